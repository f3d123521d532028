"""The bad-input contract, checked on generated inputs rather than on examples (issue 24).

Hypothesis generates malformed space files (a value of the wrong type or out of range at any key, unknown keys,
duplicate keys, broken encodings and control characters, syntax errors, empty and huge values) and malformed flag
sets for `raycse search`, `train`, `eval`, `report` and `bench`, and for EVERY generated input asserts what raycse
promises: exit status 2, exactly one line of output (stdout and stderr together, warnings included) and it starts
`raycse: error:`, no traceback, the culprit (key or flag) named in it, and the working directory, the files the
input points at and the stores beside them byte-for-byte unchanged.

Every input is built to be invalid. If one ever passes validation anyway, a tripwire at the first step that would
do work (the search's setup stage, the training, the evaluation, the report, the benchmark) raises instead of
running it: the command then exits 1, which fails the test and names the input, and nothing was started.

The command line is called in process (`raycse.cli.main`) for speed. The budget is the Hypothesis profile
(tests/conftest.py): "ci" by default, `--hypothesis-profile=long` for the long run:

    python -m pytest -q tests/test_fuzz_inputs.py --hypothesis-profile=long
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import http.server
import os
import random
import re
import string
import threading
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import note as hypothesis_note
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from raycse.cli import main
from raycse.settings.checks import INT_LIMIT, SEED_LIMIT

TRIED: collections.Counter = collections.Counter()  # generated inputs run, by test
TINY_CORPUS_LINES = 64  # sentences of the fuzzer's corpus: a batch of 65 or more cannot be cut from it


# --------------------------------------------------------------------------------------------- the world
@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_bert_dir):
    """The files and stores the inputs point at: a valid model, corpus, NLI csv and dev file, broken ones of each,
    an MLflow store with one experiment and an Optuna storage with one study."""
    from raycse.data.corpus import read_corpus
    from raycse.tracking.stores import study_names  # noqa: F401 - imported here so that the first input does not pay for it

    root = tmp_path_factory.mktemp("fuzz-world")
    files = {
        "corpus": "\n".join(read_corpus("wiki-sample", max_sentences=TINY_CORPUS_LINES)) + "\n",
        "three_lines": "one sentence .\ntwo sentences .\nthree sentences .\n",
        "blank": "\n  \n\n",
        "nli": "sent0,sent1,hard_neg\n" + "".join(f"a{i} .,b{i} .,c{i} .\n" for i in range(40)),
        "nli_columns": "premise,hypothesis\nx,y\n",
        "dev": "sentence1\tsentence2\tscore\n" + "".join(f"s{i} .\tt{i} .\t{i % 5}\n" for i in range(10)),
        "dev_one_pair": "sentence1\tsentence2\tscore\na .\tb .\t1\n",
        "dev_same_scores": "sentence1\tsentence2\tscore\na .\tb .\t1\nc .\td .\t1\n",
        "dev_no_score": "sentence1\tsentence2\nfirst .\tsecond .\n",
    }
    paths = {}
    for name, text in files.items():
        suffix = {"nli": ".csv", "nli_columns": ".csv"}.get(name, ".tsv" if name.startswith("dev") else ".txt")
        paths[name] = root / f"{name}{suffix}"
        paths[name].write_text(text)
    paths["latin1"] = root / "latin1.txt"
    paths["latin1"].write_bytes("caf\xe9 au lait .\n".encode("latin-1") * 20)
    paths["dev_xyz"] = root / "dev.xyz"
    paths["dev_xyz"].write_text(files["dev"])
    paths["folder"] = root / "folder"
    paths["folder"].mkdir()
    (paths["folder"] / "inside.txt").write_text("a file in a folder\n")
    paths["broken_model"] = root / "broken-model"
    paths["broken_model"].mkdir()
    (paths["broken_model"] / "config.json").write_text("{not json")
    paths["model"] = Path(tiny_bert_dir)
    stores = root / "stores"
    stores.mkdir()
    from raycse.driver.layout import optuna_rdb_storage
    from raycse.tracking.tracker import Tracker

    paths["mlflow"] = stores / "mlflow.db"
    Tracker(f"sqlite:///{paths['mlflow']}", "fuzz-existing")  # a store with one experiment (and no search in it)
    paths["optuna"] = stores / "optuna.db"
    import optuna

    optuna.create_study(study_name="fuzz-study", storage=optuna_rdb_storage(f"sqlite:///{paths['optuna']}"))
    # stores that are not what they should be: garbage bytes, a SQLite file whose header leads into garbage, a
    # --state directory whose mlflow.db is garbage
    paths["garbage"] = stores / "garbage.db"
    paths["garbage"].write_bytes(random.Random(0).randbytes(8192))
    paths["bad_header"] = stores / "bad-header.db"
    paths["bad_header"].write_bytes(b"SQLite format 3\x00" + random.Random(1).randbytes(4096))
    paths["bad_state"] = stores / "bad-state"
    paths["bad_state"].mkdir()
    (paths["bad_state"] / "mlflow.db").write_bytes(random.Random(2).randbytes(1024))
    return paths


@pytest.fixture(scope="module")
def not_mlflow():
    """An HTTP server that answers, but is no MLflow tracking server (404 everywhere): its address."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):  # quiet: the contract counts every line of output
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def unusable_store_urls(world, not_mlflow: str, for_optuna: bool = False) -> list[str]:
    """Well-formed addresses of stores that are not one of this kind: probed before anything starts (a file of
    garbage bytes, the other tool's SQLite store, a server that does not answer or is no MLflow server)."""
    other = world["mlflow"] if for_optuna else world["optuna"]
    return [f"sqlite:///{world['garbage']}", f"sqlite:///{world['bad_header']}", f"sqlite:///{world['corpus']}",
            f"sqlite:///{other}", "postgresql+psycopg2://raycse:pw@127.0.0.1:9/nothing-listens",
            *([] if for_optuna else ["http://127.0.0.1:9", not_mlflow])]


def unusable_stores(world, not_mlflow: str, for_optuna: bool = False):
    return st.sampled_from(unusable_store_urls(world, not_mlflow, for_optuna))


@pytest.fixture(scope="module")
def tripwires():
    """The first step of each command that would do work raises instead (see the module docstring)."""
    def tripwire(*args, **kwargs):
        raise AssertionError("TRIPWIRE: a generated input passed validation")

    import raycse.bench.cached
    import raycse.bench.concurrent
    import raycse.bench.step
    import raycse.evaluation.sts
    import raycse.exporting
    import raycse.reporting
    import raycse.training.launch
    from raycse.driver.stages.setup import SetupStage

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SetupStage, "run", tripwire)
        patch.setattr(raycse.training.launch, "run_training", tripwire)
        patch.setattr(raycse.evaluation.sts, "run_eval", tripwire)
        patch.setattr(raycse.reporting, "report_experiment", tripwire)
        patch.setattr(raycse.exporting, "latest_summary", tripwire)  # export: its first read of the search
        patch.setattr(raycse.bench.step, "run_bench", tripwire)
        patch.setattr(raycse.bench.concurrent, "run_concurrent", tripwire)
        patch.setattr(raycse.bench.cached, "run_cached_bench", tripwire)
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.delenv("RAY_ADDRESS", raising=False)
        yield


@pytest.fixture(scope="module", autouse=True)
def count_report(request):
    yield
    if TRIED:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        counts = ", ".join(f"{name} {count}" for name, count in sorted(TRIED.items()))
        line = f"fuzz: {sum(TRIED.values())} generated inputs ({counts})"
        if reporter is not None:
            reporter.write_line(line)
        results = os.environ.get("RAYCSE_FUZZ_COUNT_FILE")
        if results:
            Path(results).write_text(line + "\n")


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file's bytes (as a digest) and every directory under `roots`."""
    found = {}
    for root in roots:
        for folder, dirs, names in os.walk(root):
            for name in dirs:
                found[os.path.join(folder, name)] = "<dir>"
            for name in names:
                path = os.path.join(folder, name)
                found[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def note(text: str) -> None:
    """What a failing example prints (outside a Hypothesis test, the fixed examples below, nothing)."""
    if currently_in_test_context():
        hypothesis_note(text)


@contextlib.contextmanager
def working_directory(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def assert_rejected(argv: list[str], culprits: list[str], wd: Path, capfd, test: str,
                    watched: tuple[Path, ...] = ()) -> str:
    """Run the command line on `argv` in `wd` and check the contract (module docstring); returns the error line."""
    note(f"argv: {[a if len(a) < 300 else a[:300] + f'... ({len(a)} characters)' for a in argv]}")
    capfd.readouterr()
    before = snapshot(wd, *watched)
    with working_directory(wd), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own defaults: what a user of the command would see
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.filterwarnings("ignore", category=category)
        status = main(argv)
    TRIED[test] += 1
    out, err = capfd.readouterr()
    output = out + err + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    note(f"output: {output[:2000]!r}")
    lines = output.splitlines()
    culprits = [*culprits, *(c[2:].replace("-", "_") for c in culprits if c.startswith("--") and len(c) > 2)]
    assert status == 2, output[:2000]
    assert len(lines) == 1, output[:2000]
    assert lines[0].startswith("raycse: error: ")
    assert "Traceback" not in output
    assert len(lines[0]) < 2000
    assert any(culprit in lines[0] for culprit in culprits), (culprits, lines[0][:2000])
    after = snapshot(wd, *watched)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))[:5]
    return lines[0]


@pytest.fixture(scope="module")
def wd(tmp_path_factory):
    """The working directory every input runs in: what a user's project folder holds (a space file, a file, a
    non-empty folder), never to be changed by a rejected input."""
    folder = tmp_path_factory.mktemp("fuzz-wd")
    (folder / "notes.txt").write_text("a file where a directory is expected\n")
    (folder / "full").mkdir()
    (folder / "full" / "earlier.txt").write_text("earlier work\n")
    return folder


# --------------------------------------------------------------------------------------------- values
def texts(alphabet=None, min_size=0, max_size=20):
    if alphabet is None:
        return st.text(min_size=min_size, max_size=max_size)
    return st.text(alphabet=alphabet, min_size=min_size, max_size=max_size)


NAME_ALPHABET = string.ascii_letters + string.digits + "_-. éßж中"
SAFE_KEYS = texts(NAME_ALPHABET, min_size=1, max_size=24)
LISTS = st.lists(st.integers(-5, 5), max_size=3)
DICTS = st.dictionaries(texts(string.ascii_lowercase, 1, 5), st.integers(), min_size=1, max_size=2)
NOT_INT = st.one_of(texts(), st.floats(), st.booleans(), LISTS, DICTS)
NOT_NUMBER = st.one_of(texts(), st.booleans(), LISTS, DICTS, st.sampled_from([float("nan"), float("inf"),
                                                                              float("-inf")]))
NOT_STR = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), LISTS, DICTS)
NOT_BOOL = st.one_of(st.integers(), texts(), st.floats(allow_nan=False), LISTS, st.none())
# Huge values: longer than any path may be (4,095 bytes); ten million characters in test_a_ten_million_character_...
HUGE = st.integers(5_000, 50_000).flatmap(lambda n: texts(string.ascii_letters + "é/", 1, 3).map(
    lambda s: (s * (n // len(s) + 1))[:n]))
NONE = st.none()


def ints(low=None, high=None):
    return st.integers(min_value=low, max_value=high)


def numbers(low=None, high=None):
    return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)


def bad_int(low: int, high: int = INT_LIMIT, nullable: bool = False):
    """Integers outside [low, high] and values that are no integer at all (null too unless it is allowed)."""
    options = [ints(high=low - 1), ints(high + 1, high + 2**40), NOT_INT]
    return st.one_of(*options, *([] if nullable else [NONE]))


def bad_number(low: float, strict: bool = False, high: float | None = None, nullable: bool = False):
    below = numbers(high=low).filter(lambda v: v <= low if strict else v < low)
    options = [below, NOT_NUMBER, *([numbers(low=high).filter(lambda v: v > high)] if high is not None else [])]
    return st.one_of(*options, *([] if nullable else [NONE]))


def not_one_of(choices, nullable: bool = False):
    return st.one_of(texts().filter(lambda v: v not in choices), NOT_STR, *([] if nullable else [NONE]))


# --------------------------------------------------------------------------------------------- space files
def base_space(world) -> dict:
    """A valid space file (tests/test_fuzz_inputs.py::test_the_starting_points_are_valid): every mutation of it
    below makes it invalid."""
    return {
        "experiment": "fuzz",
        "model": str(world["model"]),
        "corpus": str(world["corpus"]),
        "objective": "stsb_dev",
        "loss": "focal",
        "train": {"batch_size": 8, "max_steps": 4, "eval_steps": 2, "max_len": 16, "lr": 1.0e-4, "seed": 42,
                  "pooler": "avg", "precision": "auto", "compile": "auto", "test_eval": False, "epochs": 1,
                  "weight_decay": 0.0, "max_grad_norm": 1.0, "workers": 1, "hparams": {"m": 0.3}},
        "space": {"tau": {"type": "loguniform", "low": 0.02, "high": 0.2}},
        "published": {"tau": 0.07},
        "search": {"num_samples": 2, "seed": 0, "test_eval": "none", "max_concurrent": 1,
                   "scheduler": {"name": "asha", "grace_evals": 1, "reduction_factor": 2},
                   "confirm": {"top_k": 1, "choose_seeds": 0, "judge_seeds": 2}},
        "resources": {"workers": 1, "cpus_per_worker": 1, "gpus_per_worker": 0},
        "cpu_budget": {"num_samples": 2, "train": {"batch_size": 8, "max_steps": 4, "eval_steps": 2},
                       "confirm": {"top_k": 2, "choose_seeds": 2, "judge_seeds": 2}},
        "paper": {"focal": {"model": "bert-base-uncased", "corpus": "wiki1m_for_simcse",
                            "figures": {"STS12": [68.5, 0.08], "avg": 77.33}}},
    }


def space_slots(world):
    """(path of a key, invalid values for it): every key of the base space with the values it must refuse."""
    from raycse.encoder.poolers import AUTO_POOLER, POOLERS
    from raycse.evaluation.sts import OBJECTIVES
    from raycse.losses import LOSS_NAMES, REGULARISERS
    from raycse.settings.distributions import DISTRIBUTIONS
    from raycse.settings.space_keys import TestScoring

    missing = st.sampled_from(["./no-such-thing", "no/such/model/dir", "/no/such/file.txt", "~/no-such-file"])
    paths = st.sampled_from
    return [
        (("experiment",), st.one_of(texts(min_size=101, max_size=400), HUGE,
                                    texts(min_size=1).map(lambda s: s + "/"), texts().map(lambda s: "a:" + s),
                                    texts().map(lambda s: s + "\x07"), st.sampled_from(["", "   ", ".", ".."]),
                                    NOT_STR)),
        (("description",), NOT_STR),
        (("model",), st.one_of(missing, paths([str(world["corpus"]), str(world["broken_model"]),
                                               str(world["folder"])]), HUGE, NOT_STR, NONE, st.just(""))),
        (("corpus",), st.one_of(missing, paths([str(world[n]) for n in ("folder", "blank", "latin1", "three_lines",
                                                                        "nli_columns")]),
                                st.just("hf:"), HUGE, NOT_STR, NONE, st.just(""))),
        (("objective",), st.one_of(texts(min_size=1).filter(lambda v: v not in OBJECTIVES), missing,
                                   paths([str(world[n]) for n in ("dev_one_pair", "dev_same_scores", "dev_no_score",
                                                                  "dev_xyz", "folder", "latin1")]),
                                   HUGE, NOT_STR, NONE)),
        (("loss",), st.one_of(texts().filter(lambda v: v not in LOSS_NAMES), HUGE, NOT_STR, NONE)),
        (("reg",), st.one_of(texts().filter(lambda v: v not in REGULARISERS), NOT_STR)),
        (("train", "batch_size"), st.one_of(ints(TINY_CORPUS_LINES + 1, INT_LIMIT), bad_int(2))),
        (("train", "lr"), bad_number(0.0, strict=True)),
        (("train", "weight_decay"), bad_number(0.0)),
        (("train", "max_grad_norm"), bad_number(0.0)),
        (("train", "epochs"), bad_int(1)),
        (("train", "max_steps"), bad_int(2, nullable=True)),  # 1 step: fewer than eval_steps 2
        (("train", "eval_steps"), st.one_of(ints(5, INT_LIMIT), bad_int(1))),  # beyond max_steps 4
        (("train", "max_len"), bad_int(3)),
        (("train", "seed"), bad_int(0, SEED_LIMIT)),
        (("train", "workers"), bad_int(1)),
        (("train", "max_sentences"), st.one_of(ints(1, 7), bad_int(1, nullable=True))),  # 7 < one batch of 8
        (("train", "pooler"), not_one_of((AUTO_POOLER, *POOLERS))),
        (("train", "eval_pooler"), not_one_of(POOLERS, nullable=True)),
        (("train", "precision"), not_one_of(("auto", "fp32", "bf16", "fp16"))),
        (("train", "compile"), not_one_of(("auto", "always", "never"))),
        (("train", "test_eval"), NOT_BOOL),
        (("train", "replace_bad_bytes"), NOT_BOOL),
        (("train", "objective_columns"), st.one_of(texts(), NOT_STR)),  # any: the objective is stsb_dev
        (("train", "hparams"), st.one_of(LISTS, texts(), st.integers(),
                                         st.dictionaries(SAFE_KEYS.filter(lambda k: k not in ("tau", "m")),
                                                         st.floats(0.1, 0.5), min_size=1, max_size=2))),
        (("train", "hparams", "m"), bad_number(0.0, high=1.0)),
        (("train", "gpus_per_worker"), bad_number(0.0)),
        (("space", "tau", "type"), not_one_of(DISTRIBUTIONS)),
        (("space", "tau", "low"), st.one_of(numbers(high=0.0), numbers(low=0.2), NOT_NUMBER, NONE)),
        (("space", "tau", "high"), st.one_of(numbers(high=0.02), NOT_NUMBER, NONE)),
        (("published", "tau"), st.one_of(numbers(high=0.0199), numbers(low=0.2001), NOT_NUMBER, NONE)),
        (("search", "num_samples"), bad_int(1)),
        (("search", "max_concurrent"), bad_int(1, nullable=True)),
        (("search", "seed"), bad_int(0, SEED_LIMIT)),
        (("search", "test_eval"), not_one_of([choice.value for choice in TestScoring])),
        (("search", "scheduler", "name"), not_one_of(("asha", "fifo"))),
        (("search", "scheduler", "grace_evals"), bad_number(1.0)),
        (("search", "scheduler", "reduction_factor"), bad_number(2.0)),
        (("search", "confirm", "top_k"), bad_int(1)),
        (("search", "confirm", "choose_seeds"), bad_int(0, 100)),  # top_k 1: no choosing block, 0 seeds allowed
        (("search", "confirm", "judge_seeds"), bad_int(2, 100)),  # 2: the least that gives an interval
        (("search", "confirm", "test_seeds"), bad_int(1, 2, nullable=True)),  # at most the judging seeds; null: all
        (("resources", "workers"), bad_int(1)),
        (("resources", "cpus_per_worker"), st.one_of(numbers(low=10_000.0), bad_number(0.0))),
        (("resources", "gpus_per_worker"), bad_number(0.0)),
        (("cpu_budget", "num_samples"), bad_int(1)),
        (("cpu_budget", "train", "batch_size"), st.one_of(ints(TINY_CORPUS_LINES + 1, INT_LIMIT), bad_int(2))),
        (("cpu_budget", "train", "eval_steps"), st.one_of(ints(5, INT_LIMIT), bad_int(1))),
        (("cpu_budget", "confirm", "top_k"), bad_int(1)),
        (("cpu_budget", "confirm", "choose_seeds"), bad_int(1, 100)),  # top_k 2: a choosing block needs a seed
        (("cpu_budget", "confirm", "judge_seeds"), bad_int(2, 100)),
        (("paper", "focal", "model"), st.one_of(NOT_STR, st.sampled_from(["", "  "]))),
        (("paper", "focal", "corpus"), st.one_of(NOT_STR, st.sampled_from(["", "  "]))),
        (("paper", "focal", "source"), st.one_of(NOT_STR, st.sampled_from(["", "  "]))),
        (("paper", "focal", "figures"), st.one_of(LISTS.filter(bool), texts(min_size=1), st.integers())),
        (("paper", "focal", "figures", "STS12"), st.one_of(texts(), st.booleans(), DICTS, NONE, st.lists(
            numbers(), min_size=3, max_size=4), st.sampled_from([float("nan"), float("inf")]))),
    ]


# A section of the base space and the keys it allows: an unknown key there must be refused.
SECTIONS = {
    (): {"experiment", "description", "model", "corpus", "objective", "loss", "reg", "train", "space", "published",
         "families", "search", "resources", "cpu_budget", "paper"},
    ("search",): {"num_samples", "max_concurrent", "seed", "scheduler", "test_eval", "confirm"},
    ("search", "scheduler"): {"name", "grace_evals", "reduction_factor"},
    ("search", "confirm"): {"top_k", "choose_seeds", "judge_seeds", "test_seeds"},
    ("cpu_budget", "confirm"): {"top_k", "choose_seeds", "judge_seeds", "test_seeds"},
    ("paper", "focal"): {"model", "corpus", "source", "figures"},
    ("resources",): {"workers", "gpus_per_worker", "cpus_per_worker"},
    ("cpu_budget",): {"num_samples", "train", "resources", "test_eval", "max_concurrent", "scheduler", "confirm",
                      "space"},
    ("space", "tau"): {"type", "low", "high"},
    ("published",): {"tau"},
}


def set_at(data: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=False, default_flow_style=False, width=10**9)


@st.composite
def bad_space_files(draw, world):
    """(file bytes, culprits): the base space with one mutation that makes it invalid."""
    import dataclasses

    from raycse.settings.config import TrainConfig, searchable_settings

    data = base_space(world)
    kind = draw(st.sampled_from(["value", "value", "value", "unknown key", "duplicate key", "encoding",
                                 "control character", "syntax", "structure", "empty"]))
    note(f"mutation: {kind}")
    if kind == "value":
        path, values = draw(st.sampled_from(space_slots(world)))
        value = draw(values)
        set_at(data, path, value)
        note(f"{'.'.join(path)} = {value!r:.300}")
        return dump(data).encode(), [path[-1], *(str(key)[:20] for key in (value if isinstance(value, dict) else ()))]
    if kind == "unknown key":
        section = draw(st.sampled_from([*SECTIONS, ("train",), ("space",)]))
        allowed = SECTIONS.get(section) or {f.name for f in dataclasses.fields(TrainConfig)}
        if section == ("space",):
            allowed = {*searchable_settings(), "tau", "m"}
        key = draw(st.one_of(SAFE_KEYS, HUGE).filter(lambda k: k not in allowed and k.strip() == k and k))
        target = data
        for part in section:
            target = target[part]
        target[key] = draw(st.one_of(st.integers(), texts(), NONE,
                                     st.just({"type": "uniform", "low": 0.1, "high": 0.2})))
        return dump(data).encode(), [key[:20]]
    text = dump(data)
    lines = text.splitlines()
    if kind == "duplicate key":
        candidates = [i for i, line in enumerate(lines) if re.match(r"^ *[A-Za-z_][A-Za-z0-9_]*:( |$)", line)]
        i = draw(st.sampled_from(candidates))
        key = lines[i].split(":")[0].strip()
        if draw(st.booleans()) and not lines[i].startswith(" ") and lines[i].split(":", 1)[1].strip():
            lines.append(lines[i])  # far away: at the end of the file
            where = [str(i + 1), str(len(lines))]
        else:
            lines.insert(i + 1, lines[i])
            where = [str(i + 1), str(i + 2)]
        message = "\n".join(lines) + "\n"
        return message.encode(), [f"{key}' at lines {where[0]} and {where[1]}"]
    if kind == "encoding":
        how = draw(st.sampled_from(["latin-1", "utf-16", "byte"]))
        if how == "latin-1":
            return dump({**data, "description": "caf\xe9 na\xefve"}).replace("\\xE9", "\xe9").replace(
                "\\xEF", "\xef").encode("latin-1"), ["UTF-8"]
        if how == "utf-16":
            return text.encode("utf-16"), ["UTF-8"]
        raw = text.encode()
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xfe", b"\xc0", b"\xf8"])) + raw[at:], ["UTF-8"]
    if kind == "control character":
        at = draw(st.integers(0, len(lines) - 1))
        column = draw(st.integers(0, len(lines[at])))
        char = draw(st.sampled_from([c for c in map(chr, range(32)) if c not in "\t\n\r"] + ["\x7f", "\ufffe"]))
        lines[at] = lines[at][:column] + char + lines[at][column:]
        return ("\n".join(lines) + "\n").encode(), [f"line {at + 1}"]
    if kind == "syntax":
        at = draw(st.integers(0, len(lines)))
        broken = draw(st.sampled_from(["zz: [unclosed", "zz: {unclosed: 1", "\tbad: indentation", "- a\n: b",
                                       "'unclosed quote"]))
        lines.insert(at, broken)
        return ("\n".join(lines) + "\n").encode(), ["YAML syntax error", "line"]
    if kind == "structure":
        section = draw(st.sampled_from(["train", "search", "resources", "space", "published", "cpu_budget", "paper",
                                        "top"]))
        value = draw(st.one_of(LISTS.filter(bool), texts(min_size=1), st.integers(), st.booleans()))
        if section == "top":
            return dump(value).encode(), ["top level"]
        data[section] = value
        return dump(data).encode(), [section]
    # empty: a document with no settings, or a key left empty
    how = draw(st.sampled_from(["file", "comments", "loss", "model", "corpus", "objective", "batch_size"]))
    if how == "file":
        return b"", ["empty file"]
    if how == "comments":
        return b"# only a comment\n\n", ["empty file"]
    if how == "batch_size":
        return text.replace("  batch_size: 8\n", "  batch_size:\n", 1).encode(), ["batch_size"]
    return re.sub(rf"(?m)^{how}: .*$", f"{how}:", text).encode(), [how]


@given(data=st.data())
def test_malformed_space_files_are_refused_naming_the_key(data, world, wd, tripwires, capfd):
    content, culprits = data.draw(bad_space_files(world))
    path = wd / "space.yaml"
    path.write_bytes(content)
    try:
        assert_rejected(["search", "--space", "space.yaml"], culprits, wd, capfd, "search space file",
                        watched=(world["corpus"].parent, world["model"]))
    finally:
        path.unlink()


# --------------------------------------------------------------------------------------------- flags
def flag_mutations(flags: dict[str, st.SearchStrategy]):
    """(extra argv, culprits): one bad flag among good ones, an unknown flag, or a flag without its value."""
    known = sorted(flags)
    bad_value = st.sampled_from(known).flatmap(lambda flag: flags[flag].map(
        lambda value: ([flag, value] if value is not None else [flag], [flag])))
    unknown = SAFE_KEYS.map(lambda k: (["--x-" + k, "1"], ["--x-" + k[:16]]))  # no flag starts --x-: no abbreviation
    dangling = st.sampled_from([f for f in known if flags[f] is not FLAG_ONLY]).map(lambda f: ([f], [f]))
    return st.one_of(bad_value, bad_value, bad_value, unknown, dangling)


FLAG_ONLY = st.just(None)  # a flag without a value (--resume)


def text_int(low: int, high: int = INT_LIMIT):
    """Words that are no integer in [low, high]: out of range, or not an integer at all."""
    return st.one_of(ints(high=low - 1).map(str), ints(high + 1, high + 2**64).map(str),
                     st.sampled_from(["", "abc", "1.5", "1e3", "0x10", "nan", "--", "4 5", "\u0661\u0662x"]),
                     texts(string.ascii_letters + "., -", 1, 8).filter(lambda s: not s.strip().lstrip("-").isdigit()))


def text_number(low: float, strict: bool = False):
    return st.one_of(numbers(high=low).filter(lambda v: v <= low if strict else v < low).map(repr),
                     st.sampled_from(["nan", "inf", "-inf", "abc", "", "1,5", "--"]))


def not_choice(choices):
    return texts(min_size=1).filter(lambda v: v not in choices and not v.startswith("-"))


def bad_uris(world, for_optuna: bool = False):
    return st.sampled_from([
        "not a uri", "mlflow.db", "sqlite://", "sqlite:/x.db", f"sqlite:///{world['folder']}", "redis://host/0",
        "postgresql://host:notaport/db", f"sqlite:///{'x' * 300}.db", f"sqlite:///{world['corpus']}/under/a/file.db",
        *([] if for_optuna else ["http://", "file:///tmp/mlruns", "nope://x"]), "",
    ])


def bad_paths(world):
    return st.one_of(st.sampled_from(["notes.txt/below", "", "x" * 300, "a\x00b"]), HUGE)


@given(data=st.data())
def test_malformed_search_flags_are_refused_naming_the_flag(data, world, wd, tripwires, capfd, not_mlflow):
    (wd / "good.yaml").write_text(dump(base_space(world)))
    flags = {
        "--num-samples": text_int(1), "--max-concurrent": text_int(1), "--seed": text_int(0, SEED_LIMIT),
        "--choose-seeds": text_int(1, 100), "--judge-seeds": text_int(2, 100),
        "--budget": not_choice(("auto", "cpu", "full")),
        "--tracking-uri": st.one_of(bad_uris(world), unusable_stores(world, not_mlflow)),
        "--optuna-storage": st.one_of(bad_uris(world, for_optuna=True), unusable_stores(world, not_mlflow, True)),
        "--state": st.one_of(bad_paths(world), st.sampled_from(["notes.txt", "s3://", "s3://bucket/no-databases",
                                                                str(world["bad_state"])])),
        "--storage-path": st.one_of(bad_paths(world), st.just("notes.txt")), "--resume": FLAG_ONLY,
        "--space": st.one_of(bad_paths(world), st.sampled_from(["no-such.yaml", "full", str(world["corpus"])])),
    }
    extra, culprits = data.draw(flag_mutations(flags))
    if data.draw(st.booleans()):  # a valid flag beside the bad one changes nothing
        extra = [*extra, "--no-confirm"] if extra[0] != "--space" else extra
    if extra[0] == "--space" and len(extra) == 2:
        argv = ["search", *extra]
        culprits = [*culprits, "space file", extra[1][:40]]  # a file that is no space file: named by its path
    else:
        argv = ["search", "--space", "good.yaml", *extra]
    try:
        assert_rejected(argv, culprits, wd, capfd, "search flags", watched=(world["corpus"].parent, world["model"]))
    finally:
        (wd / "good.yaml").unlink()


def test_every_unusable_store_is_refused_before_anything_starts(world, wd, tripwires, capfd, not_mlflow):
    """Each kind of store that is not one, for each flag that names a store (the fuzzer above draws among them):
    one line naming the flag and the address, exit 2, nothing created beside it or in the working directory."""
    (wd / "good.yaml").write_text(dump(base_space(world)))
    cases = [(flag, url) for flag, for_optuna in (("--tracking-uri", False), ("--optuna-storage", True))
             for url in unusable_store_urls(world, not_mlflow, for_optuna)]
    cases.append(("--state", str(world["bad_state"])))
    try:
        for flag, url in cases:
            line = assert_rejected(["search", "--space", "good.yaml", flag, url], [f"{flag}: "], wd, capfd,
                                   "unusable stores", watched=(world["corpus"].parent, world["model"]))
            address = url.replace(":pw@", ":***@") if flag != "--state" else f"{url}/mlflow.db"
            assert address in line, line  # the address, its password hidden
            assert ":pw@" not in line
    finally:
        (wd / "good.yaml").unlink()


def train_flags(world) -> dict[str, st.SearchStrategy]:
    from raycse.encoder.poolers import AUTO_POOLER, POOLERS
    from raycse.evaluation.sts import OBJECTIVES
    from raycse.losses import LOSS_NAMES, REGULARISERS

    missing = st.sampled_from(["./no-such-thing", "/no/such/file.txt", "no/such/model/dir"])
    return {
        "--model": st.one_of(missing, st.sampled_from([str(world["corpus"]), str(world["broken_model"]),
                                                       str(world["folder"])]), bad_paths(world)),
        "--loss": not_choice(LOSS_NAMES), "--reg": not_choice(REGULARISERS),
        "--pooler": not_choice((AUTO_POOLER, *POOLERS)), "--eval-pooler": not_choice(POOLERS),
        "--batch-size": st.one_of(text_int(2), ints(TINY_CORPUS_LINES + 1, INT_LIMIT).map(str)),
        "--lr": text_number(0.0, strict=True), "--weight-decay": text_number(0.0),
        "--max-grad-norm": text_number(0.0), "--epochs": text_int(1), "--max-steps": text_int(2),
        "--eval-steps": st.one_of(text_int(1), ints(5, INT_LIMIT).map(str)), "--max-len": text_int(3),
        "--objective": st.one_of(not_choice(OBJECTIVES), st.sampled_from(
            [str(world[n]) for n in ("dev_one_pair", "dev_same_scores", "dev_no_score", "dev_xyz", "folder")])),
        "--objective-columns": texts(min_size=1).filter(lambda v: not v.startswith("-")),
        "--corpus": st.one_of(missing, st.sampled_from([str(world[n]) for n in ("folder", "blank", "latin1",
                                                                                 "three_lines")]), bad_paths(world)),
        "--max-sentences": st.one_of(text_int(1), ints(1, 7).map(str)), "--seed": text_int(0, SEED_LIMIT),
        "--workers": text_int(1), "--gpus-per-worker": text_number(0.0),
        "--precision": not_choice(("auto", "fp32", "bf16", "fp16")), "--compile": not_choice(("auto", "always",
                                                                                             "never")),
        "--complementary": st.one_of(missing, st.sampled_from([str(world["broken_model"]), str(world["corpus"])])),
        "--tau": text_number(0.0, strict=True), "--m": st.one_of(text_number(0.0), numbers(low=1.0001).map(repr)),
        "--lambda": text_number(0.0), "--phi": text_number(0.0), "--output-dir": st.one_of(
            st.sampled_from(["full", "notes.txt", "notes.txt/under"]), bad_paths(world)),
        "--tracking-uri": bad_uris(world), "--resume": FLAG_ONLY,
    }


@given(data=st.data())
def test_malformed_train_flags_are_refused_naming_the_flag(data, world, wd, tripwires, capfd):
    good = ["train", "--model", str(world["model"]), "--corpus", str(world["corpus"]), "--loss", "focal",
            "--batch-size", "8", "--max-steps", "4", "--eval-steps", "2", "--max-len", "16", "--no-test-eval",
            "--output-dir", "out", "--tracking-uri", "sqlite:///mlflow.db"]
    extra, culprits = data.draw(flag_mutations(train_flags(world)))
    if extra[0] in ("--tau", "--phi", "--lambda") and len(extra) == 2:  # hyperparameters focal does not take are
        culprits = [*culprits, extra[0][2:]]                            # refused too, named as such
    if extra[0] == "--sup-data" or (extra[0] == "--loss" and len(extra) == 2):
        culprits = [*culprits, "loss"]
    assert_rejected([*good, *extra], culprits, wd, capfd, "train flags",
                    watched=(world["corpus"].parent, world["model"]))


@given(data=st.data())
def test_malformed_eval_flags_are_refused_naming_the_flag(data, world, wd, tripwires, capfd):
    from raycse.encoder.poolers import AUTO_POOLER, POOLERS

    flags = {
        "--model": st.one_of(st.sampled_from(["./no-such-model", str(world["corpus"]), str(world["broken_model"]),
                                              str(world["folder"])]), bad_paths(world)),
        "--pooler": not_choice((AUTO_POOLER, *POOLERS)), "--tasks": not_choice(("stsb-dev", "sts", "all")),
        "--batch-size": text_int(1), "--max-len": text_int(3),
        "--output": st.one_of(st.sampled_from(["full", "notes.txt/out.json", "."]), bad_paths(world)),
    }
    extra, culprits = data.draw(flag_mutations(flags))
    assert_rejected(["eval", "--model", str(world["model"]), "--pooler", "avg", *extra], culprits, wd, capfd,
                    "eval flags", watched=(world["corpus"].parent, world["model"]))


@given(data=st.data())
def test_malformed_report_inputs_are_refused_naming_the_culprit(data, world, wd, tripwires, capfd):
    flags = {
        "--tracking-uri": st.one_of(bad_uris(world), st.sampled_from([
            "sqlite:///missing.db", f"sqlite:///{world['corpus']}", f"sqlite:///{world['optuna']}"])),
        "--optuna-storage": st.one_of(bad_uris(world, for_optuna=True), st.sampled_from([
            "sqlite:///missing-optuna.db", f"sqlite:///{world['corpus']}"])),
        "--output-dir": st.one_of(st.sampled_from(["notes.txt", "notes.txt/below"]), bad_paths(world)),
    }
    store = f"sqlite:///{world['mlflow']}"
    experiment = st.one_of(
        st.sampled_from(["", "   ", "a/b", "a:b", "x\x07"]), texts(min_size=101, max_size=300), HUGE,
        SAFE_KEYS.filter(lambda k: k != "fuzz-existing" and k.strip() == k and k not in (".", "..")))
    if data.draw(st.booleans()):
        name = data.draw(experiment)
        argv, culprits = ["report", name, "--tracking-uri", store], ["experiment"]
    else:
        extra, culprits = data.draw(flag_mutations(flags))
        argv = ["report", "fuzz-existing", "--tracking-uri", store, *extra]
        if extra[0] == "--optuna-storage" and len(extra) == 2 and extra[1].startswith("sqlite:///") \
                and not extra[1].startswith("sqlite:////"):
            culprits = [*culprits]
    assert_rejected(argv, [*culprits, "experiment"] if argv[1] != "fuzz-existing" else culprits, wd, capfd,
                    "report", watched=(world["mlflow"].parent,))


@given(data=st.data())
def test_malformed_bench_flags_are_refused_naming_the_flag(data, world, wd, tripwires, capfd):
    from raycse.bench.options import BENCH_PRECISIONS
    from raycse.bench.synthetic import SHAPES
    from raycse.losses import LOSS_NAMES

    flags = {
        "--shape": not_choice(SHAPES), "--loss": not_choice(LOSS_NAMES), "--batch-size": text_int(1),
        "--steps": text_int(1), "--warmup": text_int(0), "--seq-len": st.one_of(text_int(3), ints(513, 10**6).map(str)),
        "--precision": not_choice(BENCH_PRECISIONS), "--concurrent": text_int(1, 64),
        "--output": st.one_of(st.sampled_from(["full", "notes.txt/out.json"]), bad_paths(world)),
        "--profile": st.one_of(st.sampled_from(["full", "notes.txt/trace.txt"]), bad_paths(world)),
    }
    extra, culprits = data.draw(flag_mutations(flags))
    assert_rejected(["bench", "--shape", "tiny", *extra], culprits, wd, capfd, "bench flags")


@given(data=st.data())
def test_malformed_cached_bench_flags_are_refused_naming_the_flag(data, world, wd, tripwires, capfd):
    from raycse.losses import LOSS_NAMES

    flags = {
        "--loss": st.one_of(st.sampled_from([",", " , ", "simcse,nope"]), not_choice(LOSS_NAMES).filter(
            lambda v: v != "all" and not all(n.strip() in LOSS_NAMES for n in v.split(",") if n.strip()))),
        "--batch-size": text_int(1), "--cached-batch-size": st.one_of(text_int(1), st.sampled_from(["1", "4"])),
        "--seq-len": st.one_of(text_int(3), ints(513, 10**6).map(str)),
        "--output": st.one_of(st.sampled_from(["full", "notes.txt/out.json"]), bad_paths(world)),
    }
    extra, culprits = data.draw(flag_mutations(flags))
    if extra[0] == "--cached-batch-size":  # below --batch-size (8 here) is refused too, naming both
        culprits = [*culprits, "batch-size"]
    assert_rejected(["bench", "--cached", "--shape", "tiny", "--batch-size", "8", *extra], culprits, wd, capfd,
                    "cached bench flags")


@given(data=st.data())
def test_malformed_export_inputs_are_refused_naming_the_culprit(data, world, wd, tripwires, capfd):
    store = f"sqlite:///{world['mlflow']}"
    flags = {
        "--tracking-uri": st.one_of(bad_uris(world), st.sampled_from([
            "sqlite:///missing.db", f"sqlite:///{world['corpus']}", f"sqlite:///{world['optuna']}"])),
        "--push-to-hub": st.one_of(
            st.sampled_from(["no-owner", "a/b/c", "/name", "owner/", "own er/name", "owner/na--me..", "-/-",
                             "owner/" + "n" * 97]), HUGE, texts(string.punctuation + " é", 1, 12).filter(
                lambda v: not v.startswith("-") and not re.fullmatch(r"[\w.-]+/[\w.-]+", v))),  # (may be valid)
    }
    experiment = st.one_of(
        st.sampled_from(["", "   ", "a/b", "a:b", "x\x07"]), texts(min_size=101, max_size=300), HUGE,
        SAFE_KEYS.filter(lambda k: k != "fuzz-existing" and k.strip() == k and k not in (".", "..")
                         and not k.startswith("-")))  # (argparse reads '-x' as a flag, and then misses DIR)
    folder = st.one_of(st.sampled_from(["notes.txt", "full", "notes.txt/below", "."]), bad_paths(world))
    how = data.draw(st.sampled_from(["experiment", "dir", "flag"]))
    private = ["--private"] if data.draw(st.booleans()) else []  # a valid flag beside the bad input
    if how == "experiment":
        argv, culprits = ["export", data.draw(experiment), "exported", "--tracking-uri", store], ["experiment"]
    elif how == "dir":
        argv, culprits = ["export", "fuzz-existing", data.draw(folder), "--tracking-uri", store], ["dir", "DIR"]
    else:
        extra, culprits = data.draw(flag_mutations(flags))
        argv = ["export", "fuzz-existing", "exported", "--tracking-uri", store, *extra]
    assert_rejected([*argv, *private], culprits, wd, capfd, "export", watched=(world["mlflow"].parent,))


# --------------------------------------------------------------------------------------------- fixed points
def test_the_starting_points_are_valid(world, wd):
    """The fuzzers mutate valid inputs: the base space file passes every check a search makes before it starts, and
    the base training's settings every check of a training, so each mutation is what makes an input invalid."""
    from raycse.api import prepare_training
    from raycse.driver.preflight import check_search
    from raycse.driver.state import SearchOptions
    from raycse.settings.space import load_space

    path = wd / "valid.yaml"
    path.write_text(dump(base_space(world)))
    try:
        with working_directory(wd):
            before = snapshot(wd)
            check_search(load_space(path), SearchOptions(tracking_uri=f"sqlite:///{wd / 'mlflow.db'}",
                                                         storage_path=str(wd / "ray_results")))
            config = prepare_training("out", False, {"model": str(world["model"]), "corpus": str(world["corpus"]),
                                                     "loss": "focal", "batch_size": 8, "max_steps": 4,
                                                     "eval_steps": 2, "max_len": 16, "test_eval": False})
            assert len(config.open_inputs()) == TINY_CORPUS_LINES
            assert snapshot(wd) == before
    finally:
        path.unlink()


TEN_MILLION = 10_000_000


@pytest.mark.parametrize("command", ["search --storage-path", "search --space", "train --corpus", "eval --model",
                                     "report EXPERIMENT", "bench --output"])
def test_a_ten_million_character_value_is_quoted_in_part(command, world, wd, tripwires, capfd):
    """The issue's over-long name: refused before it reaches the file system, and quoted in part."""
    huge = "n" * TEN_MILLION
    (wd / "good.yaml").write_text(dump(base_space(world)))
    argv = {"search --storage-path": ["search", "--space", "good.yaml", "--storage-path", huge],
            "search --space": ["search", "--space", huge],
            "train --corpus": ["train", "--corpus", huge, "--output-dir", "out"],
            "eval --model": ["eval", "--model", huge],
            "report EXPERIMENT": ["report", huge, "--tracking-uri", f"sqlite:///{world['mlflow']}"],
            "bench --output": ["bench", "--output", huge]}[command]
    culprit = command.split()[1] if command.split()[1].startswith("--") else "experiment"
    try:
        assert_rejected(argv, [culprit, "space file"], wd, capfd, "ten million characters",
                        watched=(world["corpus"].parent,))
    finally:
        (wd / "good.yaml").unlink()


def test_a_ten_million_character_space_file_is_refused_unread(world, wd, tripwires, capfd):
    (wd / "huge.yaml").write_text("experiment: " + "n" * TEN_MILLION + "\n" + dump(base_space(world)))
    try:
        assert_rejected(["search", "--space", "huge.yaml"], ["huge.yaml: 10,0"], wd, capfd,
                        "ten million characters")
    finally:
        (wd / "huge.yaml").unlink()
