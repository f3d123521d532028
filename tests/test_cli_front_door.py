"""The command line as a newcomer meets it: --version, help that explains each command with examples and says every
flag's default, the listings (`spaces`, `losses`), a second search of one file under another name (--experiment),
the plan without the run (--dry-run), evaluation with the model's own pooling, and defaults that adapt to what the
user set rather than refusing what they did not write."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import raycse
from raycse import api
from raycse.cli import build_parser, main
from raycse.errors import ConfigError
from raycse.losses import BASES, LOSS_NAMES, REGULARISER_INFO, hyperparameter_catalogue

ROOT = Path(__file__).resolve().parent.parent
FOCAL = str(ROOT / "search_spaces" / "focal.yaml")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions if a.dest == "command").choices


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"raycse {raycse.__version__}"


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_each_command_has_a_description_examples_and_every_flags_default(name, capsys):
    parser = _subcommands()[name]
    assert parser.description and len(parser.description) > 40
    assert parser.epilog.startswith("examples:") and f"raycse {name}" in parser.epilog
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        said = "required" if action.required else "default"
        assert action.help and said in action.help, f"raycse {name} {action.option_strings[-1]}: no {said}"
        takes_value = action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction)
        if takes_value and not action.choices:  # a value in a word: never argparse's DEST nor a bare X for a text
            assert action.metavar, f"raycse {name} {action.option_strings[-1]}: no metavar"
            assert action.metavar != "X" or action.type is float, f"{action.option_strings[-1]}: metavar X"
    with pytest.raises(SystemExit):
        main([name, "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "(default: %(default)s)" not in text


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_each_commands_examples_parse_as_written(name):
    """Every example a --help shows is a command line the parser takes (`raycse bench --shape base` was not)."""
    import shlex

    for line in _subcommands()[name].epilog.splitlines()[1:]:
        words = shlex.split(line, comments=True)
        assert words[0] == "raycse", line
        build_parser().parse_args(words[1:])  # a usage error raises ConfigError here


def test_raycse_help_describes_the_program_for_its_users(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "hyperparameters" in text and "published point" in text and "MLflow" in text
    assert "api.py" not in text and "parse, call" not in text  # how it is built is for its developers


# Each command line would stop at once even if its flags were taken (a dry run, a bad --max-steps, no such space):
# a check that went missing fails here fast, without starting a search or a training.
@pytest.mark.parametrize("argv, said", [
    (["search", "--spce", "focal"], "--spce: no such flag of `raycse search`; did you mean --space?"),
    (["--degub", "spaces"], "--degub: no such flag of `raycse`; did you mean --debug?"),
    (["search", "--space", "focal", "--space", "all", "--dry-run", "--step-ms", "1", "--gpus", "0"],
     "--space: given twice ('focal', then 'all'); `raycse search` takes one"),
    (["search", "--space=focal", "--space=all", "--dry-run", "--step-ms", "1", "--gpus", "0"],
     "--space: given twice"),
    (["train", "--output-dir", "out", "--max-steps", "0", "--tau", "0.1", "--tau", "0.2"],
     "--tau: given twice ('0.1', then '0.2')"),
    (["compare", "--space", "no-such-a", "--space", "no-such-b", "--seed", "1", "--seed", "2"], "--seed: given twice"),
])
def test_a_mistyped_or_repeated_flag_is_named_in_one_line(argv, said, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("raycse: error: ") and said in err and err.count("\n") == 1, err
    assert "the following arguments are required" not in err
    assert os.listdir(tmp_path) == []


def test_a_command_that_takes_several_spaces_keeps_them_all():
    args = build_parser().parse_args(["compare", "--space", "simcse", "--space", "focal"])
    assert args.space == ["simcse", "focal"]
    assert build_parser().parse_args(["search", "--spa", "focal"]).space == "focal"  # argparse's unique prefix


def test_the_judging_seeds_help_does_not_read_as_a_default_of_2(capsys):
    help_text = next(a.help for a in _subcommands()["search"]._actions if a.dest == "judge_seeds")
    default = help_text[help_text.index("(default:"):]
    assert "the file's" in default and not re.search(r"\d", default), help_text


def test_spaces_lists_every_shipped_file_on_one_line(capsys):
    from raycse.settings.space_files import packaged_spaces

    files = packaged_spaces()
    assert {"focal", "simcse", "all"} <= set(files)
    assert main(["spaces"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(files)
    assert all(len(line.split("  ")) >= 2 and str(files[line.split()[0]]) in line for line in lines)


def test_losses_lists_each_loss_its_paper_and_its_hyperparameters(capsys):
    assert main(["losses"]) == 0
    text = capsys.readouterr().out
    for name in LOSS_NAMES:
        assert f"  {name} " in text, name
    for info in [*BASES.values(), *REGULARISER_INFO.values()]:
        assert info.paper in text
        block = text[text.index(f"  {info.name} "):].split("\n")[2]
        assert all(f"{h} {spec.default:g}" in block for h, spec in info.hyperparameters.items()), info.name
    assert set(hyperparameter_catalogue()) - {"lambda"} <= {w.strip(",") for w in text.split()}


# ------------------------------------------------------------------------------------------------- the plan
DRY_RUN = """
import json, sys
from raycse.cli import main
for argv in json.loads(sys.argv[1]):
    print(f"=== exit {main(argv)}", flush=True)
assert "ray" not in sys.modules, "a dry run imported Ray"
"""


def _dry_runs(cwd: Path, *runs: list[str]) -> list[tuple[int, str]]:
    """`raycse search --space focal --dry-run ARGS` for each ARGS, in one fresh interpreter (which must not import
    Ray): each run's exit status and output."""
    argvs = [["search", "--space", FOCAL, "--dry-run", *args] for args in runs]
    done = subprocess.run([sys.executable, "-c", DRY_RUN, json.dumps(argvs)], cwd=cwd, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    outputs, lines = [], []
    for line in done.stdout.splitlines():
        if line.startswith("=== exit "):
            outputs.append((int(line.split()[-1]), "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    assert len(outputs) == len(runs), done.stdout
    return outputs


def _stage_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in ("baseline", "stage0", "search", "choose", "judge", "total"):
            rows[words[0]] = words
    return rows


@pytest.mark.slow  # a CLI subprocess
def test_a_dry_run_prints_each_stage_and_its_cost_and_creates_nothing(tmp_path):
    (code, full), (cpu_code, cpu) = _dry_runs(tmp_path, ["--step-ms", "100", "--gpus", "8", "--experiment", "focal-2"],
                                              ["--step-ms", "100", "--gpus", "0"])
    assert code == 0 and cpu_code == 0
    assert sorted(os.listdir(tmp_path)) == [], "a dry run created something"
    assert "experiment 'focal-2'" in full and "budget: full" in full
    rows = _stage_rows(full)
    # focal.yaml's full budget: 16 search trials, the top 3 on 3 seeds, the winner and the published point on 18
    assert [rows[s][1] for s in ("search", "choose", "judge")] == ["16", "9", "36"]
    assert rows["choose"][2] == "43-45" and rows["judge"][2] == "46-63"
    trial_hours, wall_hours, gpu_hours = (float(word) for word in rows["total"][2:5])
    assert gpu_hours == pytest.approx(wall_hours * 8, abs=0.05) and trial_hours > wall_hours  # 8 GPUs held
    # gpus_per_worker: auto, and why: MiniLM at batch 64 shares a GPU eight ways on the recorded steps
    assert "step: 100 ms (--step-ms, taken as a trial's step with 8 trial(s) sharing a GPU)" in full
    assert "\ngpus_per_worker: auto gives 8 trial(s) a GPU: 37.3 -> 75.9 steps/s from 1 to 2" in full
    assert re.search(r"Wall clock: about .* expected .*, .* at most \(the fixed design's 36 judging runs", full)
    rows = _stage_rows(cpu)
    assert "budget: cpu" in cpu and "choose" not in rows
    assert [rows[s][1] for s in ("search", "judge")] == ["4", "4"]
    assert float(rows["total"][4]) == 0.0 and "; no GPU." in cpu  # the CPU budget asks for no GPU


def test_the_plan_scales_with_the_step_time():
    slow, fast = (api.plan(FOCAL, step_ms=ms, gpus=4) for ms in (200.0, 100.0))
    assert [s.trials for s in slow.stages] == [s.trials for s in fast.stages]
    assert slow.rates.step.value == 2 * fast.rates.step.value == 0.2
    # the step's terms double (training, and the evaluations priced from it); start-up and the driver's do not
    assert 1.2 * fast.trial_hours < slow.trial_hours < 2 * fast.trial_hours
    assert fast.wall_hours < slow.wall_hours < 2 * fast.wall_hours


def test_the_dry_run_runs_as_many_cpu_trials_at_once_as_the_search_will():
    """The CPU budget's one-core trials run as many at once as the machine has cores (docs/spaces.md): the dry run
    says the number the search's own rule gives (raycse.driver.layout.max_concurrent, which the run uses)."""
    from raycse.driver.layout import max_concurrent
    from raycse.planning.dry_run import format_dry_run, machine_cpus
    from raycse.settings.space import load_space

    run = api.plan(FOCAL, step_ms=100.0, gpus=0)
    cpu_plan = load_space(FOCAL).with_cpu_budget()
    assert run.concurrent == max_concurrent(cpu_plan, {"CPU": machine_cpus()}) == min(4, int(machine_cpus()))
    assert f"{run.concurrent} at once (this machine's" in format_dry_run(run)
    assert "one core a trial: 2 at once on 2 cores" in (ROOT / "docs" / "spaces.md").read_text()
    assert api.plan(FOCAL, step_ms=100.0, gpus=1).concurrent == 8  # the full budget: auto, eight MiniLM trials a GPU


def test_the_dry_runs_trials_are_a_full_searchs_tune_trials_and_the_untouched_models_scoring():
    """focal.yaml's full budget with every judging look ran 61 Tune trials on the H200 (16 + 9 + 36); the dry run
    counts them, and the untouched model's scoring beside them (on a GPU its figures are not shipped): 62. The docs
    say both (docs/method.md, docs/reliability.md), each generated from the plan."""
    import json

    record = ROOT / "benchmarks" / "results" / "search-wall-clock" / "2026-11-27-h200" / "before" / "search.json"
    ran = json.loads(record.read_text())["trials"]
    run = api.plan(FOCAL, step_ms=100.0, gpus=1)
    stages = {stage.name: stage.trials for stage in run.stages}
    assert stages == {"baseline": 1, "search": 16, "choose": 9, "judge": 36}
    assert len(ran) == run.trials - stages["baseline"] == 61


def test_the_dry_run_states_the_disk_a_search_peaks_at_and_keeps():
    """What a search's checkpoints take on disk, from the model's weights (their rule and the measured run they are
    checked against: tests/test_costs.py)."""
    from raycse.planning.dry_run import format_dry_run

    cpu = api.plan(FOCAL, step_ms=100.0, gpus=0)
    assert cpu.weight_bytes == pytest.approx(90.9e6, rel=0.01)  # all-MiniLM-L6-v2's 22.7M parameters in float32
    full = api.plan(FOCAL, step_ms=100.0, gpus=1)
    assert full.disk_bytes > 4 * cpu.disk_bytes and full.disk_bytes > full.cost.end_disk_bytes()
    text = format_dry_run(full)
    assert f"Disk: peaks at about {full.disk_bytes / 1e9:.1f} GB" in text
    assert f"{full.cost.end_disk_bytes() / 1e9:.1f} GB kept at the end" in text
    kept = api.plan(FOCAL, step_ms=100.0, gpus=1, keep_checkpoints=True)  # every trial keeps its last/ too
    assert kept.cost.end_disk_bytes() == 4 * full.cost.end_disk_bytes() - 3 * full.weight_bytes
    assert "best/ and last/ (--keep-checkpoints)" in format_dry_run(kept)


def test_the_dry_run_says_when_the_real_run_would_refuse(tmp_path, monkeypatch):
    import optuna

    from raycse.planning.dry_run import format_dry_run

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the default stores: this folder's
    assert api.plan(FOCAL, step_ms=100.0, gpus=0).refused is None  # nothing there yet
    (tmp_path / "ray_results" / "raycse-focal").mkdir(parents=True)
    (tmp_path / "ray_results" / "raycse-focal" / "tuner.pkl").write_bytes(b"")  # what a started search leaves
    optuna.create_study(study_name="raycse-focal", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    before = sorted(p.name for p in tmp_path.iterdir())
    run = api.plan(FOCAL, step_ms=100.0, gpus=0)
    assert "the experiment 'raycse-focal' already exists" in run.refused and "--resume" in run.refused
    assert "an Optuna study 'raycse-focal'" in run.refused and "ray_results/raycse-focal" in run.refused
    assert format_dry_run(run).splitlines()[1].startswith("Refused: the experiment 'raycse-focal' already exists")
    assert api.plan(FOCAL, step_ms=100.0, gpus=0, resume=True).refused is None  # --resume continues it
    assert api.plan(FOCAL, step_ms=100.0, gpus=0, experiment="focal-2").refused is None
    assert "no search 'focal-2' to resume" in api.plan(FOCAL, step_ms=100.0, gpus=0, experiment="focal-2",
                                                        resume=True).refused
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # read, never written


@pytest.mark.parametrize("argv, culprit", [
    (["search", "--space", FOCAL, "--step-ms", "100"], "--step-ms: only applies with --dry-run"),
    (["search", "--space", FOCAL, "--dry-run", "--step-ms", "0"], "--step-ms"),
    (["search", "--space", FOCAL, "--dry-run", "--gpus", "-1"], "--gpus"),
    (["search", "--space", FOCAL, "--dry-run", "--experiment", "a/b"], "--experiment"),
    # a GPU plan is never timed on this CPU: no recorded GPU step for DCLR's batch 128, and none given
    (["search", "--space", "dclr", "--dry-run", "--gpus", "1"], "--step-ms: no recorded GPU step for a minilm"),
    (["compare", "--space", "simcse", "--space", "focal", "--gpus", "1"], "--gpus: only applies with --dry-run"),
    (["compare", "--space", "simcse", "--space", "focal", "--dry-run", "--step-ms", "-1"], "--step-ms"),
])
def test_plan_flags_are_checked(argv, culprit, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("raycse: error: ") and culprit in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == []


def test_experiment_renames_the_search():
    space, _ = api._search_inputs(FOCAL, {**{o.name: o.default for o in api.SEARCH_OPTIONS},
                                          "experiment": "focal-2"})
    assert space.experiment == "focal-2"
    with pytest.raises(ConfigError, match="experiment"):
        api.plan(FOCAL, experiment="", step_ms=1.0)


# ------------------------------------------------------------------------------------------------- eval
def test_eval_pools_as_the_model_does_by_default(tiny_bert_dir):
    assert api.EVAL_OPTIONS[1].name == "pooler" and api.EVAL_OPTIONS[1].default == "auto"
    assert api.evaluation_pooler("minilm") == "avg"  # all-MiniLM-L6-v2 declares mean pooling
    assert api.evaluation_pooler(str(tiny_bert_dir)) == "cls_before_pooler"  # declares none: SimCSE's
    assert api.evaluation_pooler(str(tiny_bert_dir), "avg_top2") == "avg_top2"


def test_a_model_that_is_no_text_encoder_is_one_line_exit_2(tmp_path, tiny_bert_dir, capsys):
    from transformers import ViTConfig, ViTModel

    folder = tmp_path / "vit"
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                       image_size=8, patch_size=4)).save_pretrained(folder)
    for name in os.listdir(tiny_bert_dir):  # a tokenizer beside it: only the architecture is wrong
        if "token" in name or name == "vocab.txt":
            (folder / name).write_bytes((tiny_bert_dir / name).read_bytes())
    capsys.readouterr()  # what building the folder printed (transformers' progress bars) is not the command's
    assert main(["eval", "--model", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("raycse: error: --model: ")
    assert str(folder) in err and "'vit' is not a text encoder" in err


# ------------------------------------------------------------------------------------------------- train
def test_a_run_shorter_than_the_evaluation_interval_is_evaluated_at_its_end(tmp_path):
    config = api.prepare_training(str(tmp_path / "out"), False, {"max_steps": 100})
    assert config.eval_steps == 100
    assert api.prepare_training(str(tmp_path / "out"), False, {"max_steps": 400}).eval_steps == 125
    with pytest.raises(ConfigError, match="eval_steps"):  # a contradiction the user wrote is still refused
        api.prepare_training(str(tmp_path / "out"), False, {"max_steps": 100, "eval_steps": 125})


def test_of_several_mistakes_the_file_is_named_first(tmp_path, capsys):
    status = main(["train", "--corpus", str(tmp_path / "missing.txt"), "--batch-size", "0", "--max-steps", "4",
                   "--eval-steps", "8", "--output-dir", str(tmp_path / "out")])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("raycse: error: --corpus") and "missing.txt" in err


def test_train_takes_explicit_settings_with_the_configs_defaults():
    import dataclasses
    import inspect

    from raycse.settings.config import TrainConfig

    parameters = inspect.signature(api.train).parameters
    adaptive = {"eval_steps", "gpus_per_worker"}  # None: decided from the rest (the interval, CUDA)
    for f in dataclasses.fields(TrainConfig):
        if f.metadata.get("flag", True):
            assert parameters[f.name].kind is inspect.Parameter.KEYWORD_ONLY, f.name
            assert parameters[f.name].default == (None if f.name in adaptive else f.default), f.name
    assert "started_at" not in inspect.signature(api.search).parameters
    assert all(not name.startswith("_") or name == "_started_at" for name in inspect.signature(api.search).parameters)


def test_train_result_is_typed(tmp_path):
    from raycse.training.result import TrainResult

    results = {"objective": "stsb_dev", "best_objective": 70.5, "best_step": 4, "steps": 8,
               "dev_curve": [{"step": 4, "objective": 70.5}], "sentences_per_s": 10.0, "wall_seconds": 3.0,
               "avg": 60.0, "STS12": 55.0, "config": {}}
    result = TrainResult.from_results(tmp_path, results)
    assert result.best_checkpoint == tmp_path / "best" and result.scores == {"avg": 60.0, "STS12": 55.0}
    assert "results=" not in repr(result) and json.dumps(result.results)
