"""`raycse train` end to end on the tiny random BERT: results.json, the best checkpoint and the MLflow run; bad input
is one line on stderr, exit 2, and nothing written (no output directory, no MLflow database)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raycse.cli import main
from raycse.data.corpus import read_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(read_corpus("wiki-sample", max_sentences=64)) + "\n")
    return path


def train_args(model: Path, corpus: Path, output_dir: Path, tracking_db: Path, *extra: str) -> list[str]:
    return ["train", "--model", str(model), "--loss", "focal", "--tau", "0.05", "--m", "0.3", "--batch-size", "8",
            "--max-steps", "4", "--eval-steps", "2", "--corpus", str(corpus), "--max-sentences", "64",
            "--output-dir", str(output_dir), "--tracking-uri", f"sqlite:///{tracking_db}", *extra]


@pytest.mark.slow  # a whole training
def test_train_writes_results_checkpoint_and_an_mlflow_run(tiny_bert_dir, corpus, tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient
    from sentence_transformers import SentenceTransformer

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is relative to the working directory
    output_dir, db = tmp_path / "D", tmp_path / "mlflow.db"
    # --no-test-eval: the seven test tasks are covered by tests/test_trainer.py and cost a minute on this CPU
    status = main(train_args(tiny_bert_dir, corpus, output_dir, db, "--no-test-eval"))

    assert status == 0
    printed = capsys.readouterr().out
    assert "objective" in printed and "best checkpoint:" in printed
    results = json.loads((output_dir / "results.json").read_text())
    assert results["steps"] == 4 and [p["step"] for p in results["dev_curve"]] == [2, 4]
    assert results["config"]["loss"] == "focal" and results["config"]["hparams"] == {"tau": 0.05, "m": 0.3}
    SentenceTransformer(str(output_dir / "best"), device="cpu")

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("raycse-train")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.info.artifact_uri.startswith(str(tmp_path))  # nothing lands in the repository's ./mlruns
    assert float(run.data.params["tau"]) == 0.05 and float(run.data.params["m"]) == 0.3
    assert run.data.params["loss"] == "focal"
    for metric in ("objective", "stsb_dev"):  # the objective, and the STS-B dev figure it is made of
        history = client.get_metric_history(run.info.run_id, metric)
        assert sorted((m.step, m.value) for m in history) == [(p["step"], p[metric]) for p in results["dev_curve"]]
    assert run.data.metrics["best_objective"] == results["best_objective"]
    checkpoint = {Path(f.path).name for f in client.list_artifacts(run.info.run_id, "best_checkpoint")}
    assert {"config.json", "model.safetensors", "modules.json", "tokenizer.json"} <= checkpoint
    assert "results.json" in {f.path for f in client.list_artifacts(run.info.run_id)}


# --------------------------------------------------------------------------------------------- bad input
def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


BAD_INPUT = {
    # name: (how to change the good arguments, words the error must contain)
    "unknown-loss": (lambda a, t: _replace(a, "--loss", "simclr"), ["simclr", "focal"]),
    "tau-zero": (lambda a, t: _replace(a, "--tau", "0"), ["tau=0"]),
    "tau-negative": (lambda a, t: _replace(a, "--tau", "-0.1"), ["tau=-0.1"]),
    "phi-above-1": (lambda a, t: _replace(_drop_focal(a), "--loss", "dclr") + ["--phi", "1.5"], ["phi=1.5"]),
    "k-negative": (lambda a, t: _replace(_drop_focal(a), "--loss", "dclr") + ["--k", "-1"], ["k=-1"]),
    "batch-size-zero": (lambda a, t: _replace(a, "--batch-size", "0"), ["--batch-size", "0"]),
    "unknown-flag": (lambda a, t: a + ["--tua", "0.05"], ["--tua"]),
    "missing-corpus": (lambda a, t: _replace(a, "--corpus", str(t / "no-such-corpus.txt")), ["no-such-corpus.txt"]),
    "empty-corpus": (lambda a, t: _replace(a, "--corpus", str(_write(t / "empty.txt", b"\n \n"))), ["empty"]),
    "non-utf8-corpus": (lambda a, t: _replace(a, "--corpus", str(_write(t / "bad.txt", b"fine .\ncaf\xe9 .\n"))),
                        ["bad.txt", "line 2"]),
    "corpus-smaller-than-a-batch": (
        lambda a, t: _replace(a, "--corpus", str(_write(t / "small.txt", b"one .\ntwo .\nthree .\n"))),
        ["3 examples", "fewer than one batch"]),
    "missing-model": (lambda a, t: _replace(a, "--model", str(t / "no-such-model")), ["no-such-model"]),
    "missing-sup-data": (lambda a, t: _replace(_drop_focal(a), "--loss", "simcse-sup") + [
        "--sup-data", str(t / "no-such.csv")], ["no-such.csv"]),
    "supervised-loss-without-sup-data": (lambda a, t: _replace(_drop_focal(a), "--loss", "simcse-sup"),
                                         ["--sup-data"]),
}


def _replace(args: list[str], flag: str, value: str) -> list[str]:
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


def _drop_focal(args: list[str]) -> list[str]:
    """Without focal's --m (losses that do not take it would reject it)."""
    args = list(args)
    del args[args.index("--m"):args.index("--m") + 2]
    return args


def assert_nothing_written(tmp_path: Path, output_dir: Path, db: Path) -> None:
    assert not output_dir.exists()
    assert not db.exists()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def assert_one_line_error(stderr: str, words: list[str]) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("raycse: error: ")
    assert "Traceback" not in stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tiny_bert_dir, corpus, tmp_path, monkeypatch, capsys, case):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    output_dir, db = tmp_path / "D", tmp_path / "tracking" / "mlflow.db"
    change, words = BAD_INPUT[case]
    status = main(change(train_args(tiny_bert_dir, corpus, output_dir, db), tmp_path))

    assert status == 2
    captured = capsys.readouterr()
    assert_one_line_error(captured.err, words)
    assert captured.out == ""
    assert_nothing_written(tmp_path, output_dir, db)


def test_an_existing_non_empty_output_dir_is_refused_and_left_alone(tiny_bert_dir, corpus, tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    output_dir, db = tmp_path / "D", tmp_path / "mlflow.db"
    output_dir.mkdir()
    (output_dir / "notes.txt").write_text("earlier work")

    status = main(train_args(tiny_bert_dir, corpus, output_dir, db))

    assert status == 2
    assert_one_line_error(capsys.readouterr().err, ["--output-dir", str(output_dir)])
    assert [p.name for p in output_dir.iterdir()] == ["notes.txt"]
    assert (output_dir / "notes.txt").read_text() == "earlier work"
    assert not db.exists()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unknown-loss", "non-utf8-corpus", "missing-model"])
def test_the_command_exits_2_with_one_line_and_no_traceback(tiny_bert_dir, corpus, tmp_path, case):
    output_dir, db = tmp_path / "D", tmp_path / "tracking" / "mlflow.db"
    change, words = BAD_INPUT[case]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    completed = subprocess.run([sys.executable, "-m", "raycse",
                                *change(train_args(tiny_bert_dir, corpus, output_dir, db), tmp_path)],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    assert completed.returncode == 2, completed.stderr
    assert_one_line_error(completed.stderr, words)
    assert_nothing_written(tmp_path, output_dir, db)
