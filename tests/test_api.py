"""The Python API (raycse.search / train / evaluate) and the command line over it: the same options, the same rules,
every input checked before anything starts, and one exit-status contract (0 done, 2 bad input, 1 a failed run)."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raycse
from raycse import api
from raycse.cli import main
from raycse.errors import ConfigError


def test_importing_raycse_is_cheap():
    code = "import raycse, sys; print(sorted(m for m in ('torch', 'ray', 'mlflow', 'optuna', 'transformers', " \
           "'yaml', 'numpy') if m in sys.modules))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.stdout.strip() == "[]", completed.stderr
    assert {"search", "train", "evaluate", "ConfigError"} <= set(raycse.__all__)


@pytest.mark.parametrize("function, options", [(api.search, api.SEARCH_OPTIONS), (api.evaluate, api.EVAL_OPTIONS),
                                               (api.report, api.REPORT_OPTIONS)])
def test_each_function_takes_its_commands_options_with_the_same_defaults(function, options):
    parameters = inspect.signature(function).parameters
    for option in options:
        assert option.name in parameters, option.name
        assert parameters[option.name].default == option.default, option.name


def test_the_search_flags_are_the_apis_options(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = capsys.readouterr().out
    for option in api.SEARCH_OPTIONS:
        flag = ("--no-" if option.kind is bool and option.default else "--") + option.name.replace("_", "-")
        assert flag in text, flag


@pytest.mark.parametrize("call, culprit", [
    (lambda: raycse.search("no-such-space.yaml"), "does not exist"),
    (lambda: raycse.search("search_spaces/focal.yaml", num_samples=0), "num_samples"),
    (lambda: raycse.search("search_spaces/focal.yaml", seed=-1), "seed"),
    (lambda: raycse.search("search_spaces/focal.yaml", budget="gpu"), "budget"),
    (lambda: raycse.search("search_spaces/focal.yaml", tracking_uri="mlflow.db"), "tracking_uri"),
    (lambda: raycse.search("search_spaces/focal.yaml", resume=True, storage_path="nowhere"), "resume"),
    (lambda: raycse.search(42), "space"),
    (lambda: raycse.train(output_dir="out", batch_size=0), "batch_size"),
    (lambda: raycse.train(output_dir="out", batch_size=1, loss="focal"), "batch_size"),
    (lambda: raycse.train(output_dir="out", tua=0.05), "tua"),
    (lambda: raycse.train(output_dir="out", tau=-1.0), "tau"),
    (lambda: raycse.train(output_dir="out", max_steps=4, eval_steps=8), "eval_steps"),
    (lambda: raycse.evaluate("minilm", pooler="mean"), "pooler"),
    (lambda: raycse.evaluate("minilm", batch_size=0), "batch_size"),
    (lambda: raycse.evaluate("./no-such-model"), "model"),
    (lambda: raycse.evaluate("minilm", max_len=2), "max_len"),
])
def test_bad_options_raise_config_error_before_anything_starts(call, culprit, tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "search_spaces").mkdir()
    (tmp_path / "search_spaces" / "focal.yaml").write_text((root / "search_spaces" / "focal.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(ConfigError) as err:
        call()
    assert culprit in str(err.value) and "\n" not in str(err.value)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing created
    import ray

    assert not ray.is_initialized()


def test_report_on_a_mistyped_store_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status = main(["report", "raycse-focal", "--tracking-uri", "sqlite:///mlfow.db"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("raycse: error: --tracking-uri: no store at") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_status_on_a_store_a_search_is_making_says_there_is_none_yet(tmp_path, monkeypatch, capsys):
    """SQLite creates the file before it writes its first page: a second terminal polling in that moment is told the
    store is not there yet, not that the file is something else."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlflow.db").touch()
    assert main(["status", "raycse-focal", "--tracking-uri", "sqlite:///mlflow.db"]) == 2
    err = capsys.readouterr().err
    assert err == "raycse: error: --tracking-uri: no store at 'sqlite:///mlflow.db' yet: 'mlflow.db' is empty\n"
    assert (tmp_path / "mlflow.db").stat().st_size == 0


def test_status_while_a_search_creates_its_store_waits_for_the_store_to_be_whole(tmp_path, monkeypatch):
    """A second terminal's `raycse status` in the moment a search creates its MLflow store (its first tables there,
    their migrations still running) waits for the creation to end: opened half made, MLflow would migrate it a
    second time, and one of the two processes would fail ("table _alembic_tmp_experiments already exists")."""
    import threading

    import sqlalchemy
    from mlflow.store.db import utils as mlflow_db

    from raycse.files import sqlite_creation_lock

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    half_made, events = threading.Event(), []

    def create_slowly():  # what a search's first Tracker does under the lock, with a pause between the two halves
        with sqlite_creation_lock(uri):
            engine = sqlalchemy.create_engine(uri)
            mlflow_db.InitialBase.metadata.create_all(engine)
            half_made.set()
            time.sleep(1.0)
            mlflow_db._upgrade_db(engine)
            engine.dispose()
            events.append("created")

    creator = threading.Thread(target=create_slowly)
    creator.start()
    assert half_made.wait(30)
    with pytest.raises(ConfigError, match="no MLflow experiment .raycse-focal."):
        raycse.status("raycse-focal", tracking_uri=uri)
    events.append("status answered")
    creator.join(30)
    assert events == ["created", "status answered"]
    assert not (tmp_path / ".mlflow.db.lock").stat().st_size  # the writer's lock file, unchanged


def test_report_refuses_a_file_that_is_no_mlflow_store_and_leaves_it_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.db").write_text("not a database\n")
    assert main(["report", "raycse-focal", "--tracking-uri", "sqlite:///notes.db"]) == 2
    assert "'sqlite:///notes.db' is not a SQLite database" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.db"]
    assert (tmp_path / "notes.db").read_text() == "not a database\n"


def test_a_search_with_an_unreadable_corpus_stops_before_ray_and_writes_nothing(tmp_path, monkeypatch, capsys,
                                                                               tiny_bert_dir):
    """The corpus is read at the edge: a byte that is not UTF-8 on line 3 is found before Ray starts (the issue:
    it used to surface after Ray's log lines, with mlflow.db, a run and lock files left behind)."""
    import ray

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "corpus.txt").write_bytes(b"a sentence .\nanother one .\ncaf\xe9 .\n" * 10)
    (tmp_path / "space.yaml").write_text(
        f"model: {tiny_bert_dir}\ncorpus: corpus.txt\nloss: focal\ntrain: {{batch_size: 8, max_steps: 4, "
        "eval_steps: 2}\nspace: {tau: {type: loguniform, low: 0.02, high: 0.2}}\npublished: {tau: 0.07}\n"
        "resources: {cpus_per_worker: 1}\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["search", "--space", "space.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "corpus" in captured.err and "line 3 is not valid UTF-8" in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not ray.is_initialized()


def test_a_run_that_fails_exits_1_with_one_line(tmp_path, monkeypatch, capsys, tiny_bert_dir):
    """Valid input, then the run fails (a disk that fills up while it trains): exit 1 and the reason in one line.
    The failure is injected where the training would start, after every check has passed."""
    import errno

    import raycse.training.launch

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out" / "last"))

    monkeypatch.setattr(raycse.training.launch, "run_training", disk_full)
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} .\n" for i in range(32)))
    status = main(["train", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--batch-size", "8",
                   "--max-steps", "2", "--eval-steps", "2", "--output-dir", "out", "--no-mlflow"])
    assert status == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"raycse: error: OSError: No space left on device ({tmp_path / 'out' / 'last'}) (run with "
                     "--debug for the traceback)"]


# --------------------------------------------------------------------------------------------- train's defaults
def test_train_takes_every_training_setting_with_train_configs_default():
    """One source of truth: every TrainConfig setting with a flag is a keyword of `raycse.train` whose default is the
    field's (the same value and type), but for the ones train works out when the training starts (None there:
    TRAIN_DERIVED_DEFAULTS, whose ways the docstring states); nothing else but train's own arguments."""
    import dataclasses

    from raycse.settings.config import TrainConfig

    fields = {f.name: f for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag")}
    parameters = inspect.signature(api.train).parameters
    assert set(api.TRAIN_DERIVED_DEFAULTS) <= set(fields)
    for name, f in fields.items():
        assert name in parameters and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        expected = None if name in api.TRAIN_DERIVED_DEFAULTS else f.default
        default = parameters[name].default
        assert (type(default), default) == (type(expected), expected), f"train's {name}={default!r}, not {expected!r}"
    assert set(parameters) - set(fields) == {"output_dir", "hparams", "resume", "tracking_uri", "mlflow",
                                             "hyperparameters"}


def test_train_works_out_its_derived_defaults_as_train_config_would(tmp_path):
    from raycse.settings.config import TrainConfig

    config = api.prepare_training(str(tmp_path / "out"), False, {"eval_steps": None, "gpus_per_worker": None})
    assert config.eval_steps == TrainConfig.eval_steps  # "every 125 steps" when nothing shortens the run
    assert config.gpus_per_worker in (0.0, 1.0)


# --------------------------------------------------------------------------------------------- docstrings
PUBLIC = [getattr(raycse, name) for name in raycse.__all__ if name != "ConfigError"]


def args_entries(doc: str) -> list[tuple[str, str]]:
    """The Args section of a docstring (as inspect.getdoc gives it): (name, what the entry says) in order."""
    section = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    entries = []
    for line in section.splitlines():
        if not line.startswith(" " * 8):
            assert line.startswith(" " * 4) and line.endswith(":"), f"not an entry's name: {line!r}"
            entries.append((line.strip().removesuffix(":"), ""))
        else:
            entries[-1] = (entries[-1][0], f"{entries[-1][1]} {line.strip()}".strip())
    return entries


def test_the_public_functions_are_the_nine():
    assert sorted(f.__name__ for f in PUBLIC) == ["compare", "evaluate", "export", "load", "plan", "report", "search",
                                                  "status", "train"]


@pytest.mark.parametrize("function", PUBLIC, ids=lambda function: function.__name__)
def test_every_public_function_documents_each_argument_its_result_errors_and_an_example(function):
    """Optuna's layout: a summary, then Args (every parameter: what it is and its default, or that it is required),
    Returns, Raises and an Example (run by tests/test_api_examples.py and the modules it names)."""
    import re

    from api_examples import example_of

    doc = inspect.getdoc(function)
    assert re.findall(r"^(\w+):$", doc, re.M) == ["Args", "Returns", "Raises", "Example"]
    assert not doc.startswith("Args:") and "--help" not in doc
    assert not re.search(r"^\s*<.*>$", doc, re.M), "a <...> line the decorator did not fill"
    entries = args_entries(doc)
    names = [name for name, _ in entries]
    assert len(names) == len(set(names)), names
    parameters = inspect.signature(function).parameters.values()
    assert sorted(names) == sorted(("**" if p.kind is p.VAR_KEYWORD else "") + p.name for p in parameters)
    said = dict(entries)
    for p in parameters:
        text = said[("**" if p.kind is p.VAR_KEYWORD else "") + p.name]
        assert len(text) > len("Default: None."), (p.name, text)
        if p.kind is p.VAR_KEYWORD:
            assert "Default:" in text, (p.name, text)
        elif p.default is p.empty:
            assert "Required" in text, (p.name, text)
        else:
            assert f"Default: {p.default!r}" in text, (p.name, text)
    for section in ("Returns", "Raises"):
        assert doc.split(f"\n{section}:\n", 1)[1].split("\n\n", 1)[0].strip(), section
    assert "ConfigError" in doc.split("\nRaises:\n", 1)[1]
    example_of(function)  # a block that stands alone
