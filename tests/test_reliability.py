"""Crash safety: a `raycse train` killed at any moment leaves the last complete best checkpoint loadable."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.timeout(600)
def test_kill_during_training_leaves_a_loadable_best_checkpoint(tmp_path, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "raycse.cli", "train", "--model", str(tiny_bert_dir), "--loss", "simcse",
           "--batch-size", "8", "--max-steps", "400", "--eval-steps", "1", "--max-sentences", "3200",
           "--lr", "1e-3", "--no-test-eval", "--no-mlflow", "--output-dir", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "best" / "config.json").exists():
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        time.sleep(0.2)
    # evaluations (and with lr 1e-3 often new best checkpoints) come every step: kill at an arbitrary moment
    time.sleep(3.7)
    assert proc.poll() is None, "training finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    best = out / "best"
    assert AutoModel.from_pretrained(best).config.hidden_size == 32
    embedding = SentenceTransformer(str(best), device="cpu").encode(["still loadable after a kill"])
    assert embedding.shape == (1, 32)
    assert not (out / "results.json").exists()  # the run did not finish, and says so by having no results


@pytest.mark.parametrize("args, culprit", [
    (["--output-dir", "/proc/raycse-nope/run"], "--output-dir"),
    (["--output-dir", "{file}"], "not a directory"),
    (["--tracking-uri", "not-a-uri"], "--tracking-uri"),
    (["--corpus", "{dir}"], "--corpus"),
    (["--eval-steps", "0"], "--eval-steps"),
    (["--gpus-per-worker", "-1"], "--gpus-per-worker"),
])
def test_more_bad_train_input_is_one_clean_line(tmp_path, tiny_bert_dir, capsys, monkeypatch, args, culprit):
    from raycse.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    args = [a.format(file=tmp_path / "a-file", dir=tmp_path / "a-dir") for a in args]
    base = ["train", "--model", str(tiny_bert_dir), "--loss", "simcse", "--max-steps", "2"]
    if "--output-dir" not in args:
        base += ["--output-dir", str(tmp_path / "out")]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(base + args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("raycse: error:") and len(err.splitlines()) == 1 and culprit in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written: no output dir, no mlflow.db
    assert not __import__("os").path.exists("/proc/raycse-nope")
