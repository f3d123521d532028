"""The command line answers at once: building the parser, every `--help` and every usage error import none of the
heavy libraries (torch, transformers, Ray, MLflow, Optuna); they are imported only when a command runs.

Each check runs in a fresh interpreter, since this test process has long imported them all.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "ray", "mlflow", "optuna", "pandas", "scipy", "sklearn")

# What a user types: each command's --help, then typical arguments parsed (not run), then usage errors through main()
PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from raycse.cli import build_parser, main

    parser = build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    helps = {}
    for argv in [["--help"], ["--version"], *([name, "--help"] for name in sub.choices)]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                parser.parse_args(argv)
            except SystemExit as done:
                assert done.code in (0, None), (argv, done.code)
        helps[" ".join(argv)] = out.getvalue()
    for argv in [["eval", "--model", "minilm", "--pooler", "avg", "--tasks", "sts"],
                 ["train", "--loss", "focal", "--tau", "0.05", "--max-steps", "100", "--output-dir", "runs/x"],
                 ["search", "--space", "search_spaces/focal.yaml", "--num-samples", "4", "--experiment", "e2"],
                 ["search", "--space", "focal", "--dry-run", "--step-ms", "100", "--gpus", "8"],
                 ["report", "raycse-focal"], ["export", "raycse-focal", "out"], ["status", "raycse-focal"],
                 ["spaces"], ["losses"], ["bench", "--shape", "tiny"]]:
        parser.parse_args(argv)
    errors = {}
    for argv in [["train", "--batch-size", "many"], ["search"], ["eval", "--pooler", "max"], ["nonsense"]]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            errors[" ".join(argv)] = [main(argv), err.getvalue()]
    heavy = sorted(name for name in HEAVY if name in sys.modules)
    print(json.dumps({"heavy": heavy, "helps": helps, "errors": errors}))
""")


def _probe() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}"], cwd=ROOT, env=env,
                          capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_parsing_every_command_imports_no_heavy_library():
    probe = _probe()
    assert probe["heavy"] == [], f"imported while only parsing: {probe['heavy']}"
    # the help texts were really produced, and the usage errors really refused (exit 2, one line)
    assert all("usage: raycse" in text for name, text in probe["helps"].items() if name != "--version")
    for argv, (code, stderr) in probe["errors"].items():
        assert code == 2, argv
        assert stderr.startswith("raycse: error: ") and stderr.count("\n") == 1, (argv, stderr)


def test_importing_the_settings_and_the_loss_catalogue_needs_no_torch():
    code = ("import sys, raycse, raycse.settings.config, raycse.settings.space, raycse.losses as L; "
            "assert L.hyperparameter_catalogue() and L.LOSS_NAMES; "
            f"print(sorted(n for n in {HEAVY!r} if n in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_losses_functions_are_still_there_when_asked_for():
    # imported lazily: each name resolves to the function (not to a submodule of the same name)
    import raycse.losses as losses

    assert callable(losses.triplet) and callable(losses.info_nce) and callable(losses.build_loss)
    assert losses.build_loss("focal").hparams == {"tau": 0.07, "m": 0.3}


def test_the_command_exits_with_main_s_code_after_the_other_threads_and_every_exit_hook():
    """`raycse` (raycse.__main__.run) skips the interpreter's teardown, not what a normal exit runs before it: a
    thread still working is waited for, an idle thread pool's workers stop (as MLflow's artifact uploads leave one)
    instead of being waited for forever, and an exit hook runs; the exit status is main's (2 for a usage error)."""
    code = ("import atexit, sys, threading, time\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "from raycse.__main__ import run\n"
            "atexit.register(lambda: print('exit hook ran', flush=True))\n"
            "pool = ThreadPoolExecutor(1)\n"
            "pool.submit(print, 'pool task ran', flush=True).result()\n"
            "threading.Thread(target=lambda: (time.sleep(0.5), print('thread finished', flush=True))).start()\n"
            "sys.argv = ['raycse', *sys.argv[1:]]\n"
            "run()\n"
            "print('not reached')\n")
    for argv, status in ((["--version"], 0), (["train", "--batch-size", "many"], 2)):
        done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert done.returncode == status, done.stderr
        assert done.stdout.splitlines()[-2:] == ["thread finished", "exit hook ran"], done.stdout
        assert "not reached" not in done.stdout


# What a search's driver does before its first trial, in the order it does it: every module it may import, the space
# file read and checked (the model's files included), the tokenizer and the objective's pairs loaded
DRIVER = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    import raycse.api, raycse.cli, raycse.driver, raycse.reporting, raycse.tracking
    for package in (raycse.driver, raycse.reporting, raycse.tracking):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    from raycse.encoder.loading import load_tokenizer, resolve_model_path
    from raycse.evaluation.sts import build_objective
    from raycse.settings.space import load_space

    plan = load_space("search_spaces/focal.yaml")
    tokenizer = load_tokenizer(resolve_model_path(plan.base.model), False)
    objective = build_objective(plan.base.objective)
    print(json.dumps({"tokens": len(tokenizer("a sentence")["input_ids"]),
                      "pairs": len(objective.pairs["stsb_dev"].scores),
                      "loaded": sorted(name for name in MODEL_CODE if name in sys.modules)}))
""")


@pytest.mark.slow
def test_a_search_s_driver_imports_no_model_code():
    """The driver tokenizes and records, and never loads a model: transformers' model code (about 2 CPU-seconds to
    import, with torch.distributed and torch._dynamo) stays out of it; the trials' processes import it."""
    model_code = ("transformers.modeling_utils", "raycse.encoder.model", "raycse.training.trainer", "torch._dynamo")
    done = subprocess.run([sys.executable, "-c", f"MODEL_CODE = {model_code!r}\n{DRIVER}"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.splitlines()[-1])
    assert probe["tokens"] == 4 and probe["pairs"] == 1500  # the tokenizer and STS-B dev really loaded
    assert probe["loaded"] == [], f"a search's driver imported model code: {probe['loaded']}"
