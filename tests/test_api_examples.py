"""The example of every public function's docstring runs, as a user pastes it: the packaged MiniLM, the bundled data,
the shipped space files, in a fresh working directory.

The cheap ones run here (plan, evaluate); a training, a search and a comparison at the smallest settings the API
accepts are slow; load's runs on the search example's search, as its docstring says. Those that read a finished
search (status, report, export) run where a module already records one: tests/test_report.py and
tests/test_export.py. The evaluations read the STS sets cut to 64 pairs each (`few_sts_data`): the examples' calls
as written, their figures not the point. The search and the comparison search the shipped spaces with the tiny BERT
in place of MiniLM (`tiny_spaces`: the packaged MiniLM took 1.5 minutes for the search, 6 for the comparison).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from api_examples import run_example

import raycse

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A fresh working directory whose default stores are its own (no $MLFLOW_TRACKING_URI)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


@pytest.fixture
def tiny_spaces(workdir, tiny_bert_dir) -> None:
    """`focal` and `simcse` in the working directory: the shipped space files as they are, but for the tiny BERT in
    place of the packaged MiniLM. A name that exists as a path wins over a shipped space's (space_files.py), so the
    examples' "focal" and "simcse" load these."""
    from raycse.settings.space_files import packaged_spaces

    for name in ("focal", "simcse"):
        text, found = re.subn(r"^model: minilm\b", f"model: {tiny_bert_dir}",
                              packaged_spaces()[name].read_text(encoding="utf-8"), flags=re.M)
        assert found == 1
        (workdir / name).write_text(text, encoding="utf-8")


@pytest.fixture
def ray_session():
    import ray

    yield
    ray.shutdown()


def test_every_public_functions_example_is_run_by_a_test():
    ran = {name for path in TESTS.glob("test_*.py")
           for name in re.findall(r"run_example\(raycse\.(\w+)\)", path.read_text(encoding="utf-8"))}
    assert ran == {name for name in raycse.__all__ if name != "ConfigError"}


def test_the_plan_example(workdir, capsys):
    plan = run_example(raycse.plan)["plan"]
    assert plan.budget == "full" and plan.gpus == 1 and plan.trials > 1
    assert capsys.readouterr().out.startswith(f"full {plan.trials} trials")
    assert list(workdir.iterdir()) == []  # a plan writes nothing


@pytest.mark.usefixtures("few_sts_data")
def test_the_evaluate_example(workdir, capsys):
    figures = run_example(raycse.evaluate)["figures"]
    assert list(figures) == ["stsb_dev"] and capsys.readouterr().out.startswith("STS-B dev: ")
    assert list(workdir.iterdir()) == []


@pytest.mark.slow  # a training of the packaged MiniLM: one step, then an evaluation
@pytest.mark.usefixtures("few_sts_data")
def test_the_train_example(workdir):
    result = run_example(raycse.train)["result"]
    assert result.steps == 1 and result.scores == {}  # test_eval=False
    assert (workdir / "runs" / "focal" / "best" / "model.safetensors").is_file()
    assert not (workdir / "mlflow.db").exists()  # mlflow=False


@pytest.mark.slow  # Ray, one trial (the CPU budget: 16 steps) and the untouched model's figures
@pytest.mark.usefixtures("few_sts_data", "tiny_spaces", "ray_session")
@pytest.mark.timeout(600)
def test_the_search_and_load_examples(workdir, capsys):
    outcome = run_example(raycse.search)["outcome"]
    assert [t.stage for t in outcome.trials] == ["search"] and outcome.decision is None  # confirm=False
    assert outcome.verdict in capsys.readouterr().out
    assert (workdir / "mlflow.db").is_file() and (workdir / "optuna.db").is_file()
    assert outcome.summary["space_file"] == "focal" or outcome.summary["space_file"].endswith("/focal")
    loaded = run_example(raycse.load)["outcome"]  # "after raycse.search("focal")", in the same folder
    assert repr(loaded) == repr(outcome) and loaded.verdict in capsys.readouterr().out


@pytest.mark.slow  # Ray, two searches of one trial each, then the judging seeds of both losses
@pytest.mark.usefixtures("few_sts_data", "tiny_spaces", "ray_session")
@pytest.mark.timeout(900)
def test_the_compare_example(workdir, capsys):
    outcome = run_example(raycse.compare)["outcome"]
    assert set(outcome.searches) == {"simcse", "focal"} and outcome.summary["pairs"]
    printed = capsys.readouterr().out
    assert all(f"{pair['a']} - {pair['b']} {pair['verdict']}" in printed for pair in outcome.summary["pairs"])
    assert (workdir / "compare" / "compare_summary.json").is_file()
