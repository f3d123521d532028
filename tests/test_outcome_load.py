"""A search seen from outside and afterwards: `raycse status` from another process while it runs (and once it has
finished), and `raycse.load`, which gives back the outcome `raycse.search` returned, with its short repr and its
trials as a table. One small real search (tiny BERT, two search trials, two judging seeds) serves all three."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raycse
from raycse.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

SPACE = """\
experiment: {experiment}
model: {model}
loss: focal
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160, lr: 1.0e-4}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: 2, seed: 0, test_eval: best, scheduler: {{name: fifo}}, confirm: {{top_k: 1, judge_seeds: 2}}}}
resources: {{workers: 1, cpus_per_worker: 1}}
"""

# Polls the store from its own process, as a user's second terminal would, until it is stopped. It first reads a
# store of its own (argv[3]), so that importing MLflow and opening a store, seconds on a loaded machine, is done before
# the search starts: the polls during the search then take a fraction of a second each.
POLLER = """
import json, sys, time
import raycse
from raycse.errors import ConfigError
import mlflow
mlflow.MlflowClient(sys.argv[3]).search_experiments()
print(json.dumps({"ready": True}), flush=True)
while True:
    try:
        status = raycse.status(sys.argv[1], tracking_uri=sys.argv[2])
        seen = {"stage": status.stage, "done": status.done, "running": len(status.running)}
    except ConfigError as err:  # the search has not made its experiment yet
        seen = {"error": str(err)}
    print(json.dumps(seen), flush=True)
    time.sleep(1.0)
"""


@pytest.fixture
def ray_session():
    import ray

    yield
    ray.shutdown()


def _tail(log_path: Path, lines: int = 6) -> str:
    return "\n".join(log_path.read_text().splitlines()[-lines:])


def _wait_for(log_path: Path, seen, poller: subprocess.Popen, timeout_s: float = 180.0) -> bool:
    """Whether the poller printed a poll for which `seen` holds, before it exited or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        polls = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
        if any(seen(p) for p in polls):
            return True
        if poller.poll() is not None:
            return False
        time.sleep(0.5)
    return False


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(1200)
def test_status_while_running_and_load_after(tmp_path, tiny_bert_dir, ray_session, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    experiment, uri = "load-status", f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(experiment=experiment, model=tiny_bert_dir))
    log_path = tmp_path / "polls.jsonl"
    log = log_path.open("w")
    poller = subprocess.Popen([sys.executable, "-c", POLLER, experiment, uri, f"sqlite:///{tmp_path / 'warm.db'}"],
                              stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              cwd=tmp_path)
    try:
        assert _wait_for(log_path, lambda p: p.get("ready"), poller), f"the poller never started: {_tail(log_path)}"
        outcome = raycse.search(space, tracking_uri=uri, storage_path=str(tmp_path / "ray"))
        assert _wait_for(log_path, lambda p: p.get("stage") == "finished", poller), \
            f"no poll saw the finished search: {_tail(log_path)}"
    finally:
        poller.terminate()
        poller.wait(timeout=60)
        log.close()
    polls = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    during = [p for p in polls if "stage" in p and p["stage"] != "finished"]
    assert during, f"no poll saw the search running: {_tail(log_path)}"
    assert any(p["running"] or sum(p["done"].values()) for p in during), "no poll saw a trial"
    assert "Traceback" not in log_path.read_text()

    # afterwards: finished, every planned trial done; the search stage's leader among its finished trials, and the
    # answer as the search recorded it (never the luckiest judging run's dev figure)
    status = raycse.status(experiment, tracking_uri=uri)
    assert status.stage == "finished" and not status.running
    assert status.planned["search"] == 2 and status.planned["judge"] == 4
    assert status.done["search"] == 2 and status.done["judge"] == 4
    assert status.leading == pytest.approx(max(t.best_objective for t in outcome.trials
                                               if t.stage == "search" and t.status == "finished"))
    versus = outcome.decision.versus_published
    assert status.answer.get("versus_published") == (None if versus is None else pytest.approx(versus.mean))
    capsys.readouterr()
    assert main(["status", experiment, "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    assert "stage: finished" in printed and "search 2/2" in printed and "judge 4/4" in printed
    assert "answer (the judging seeds)" in printed and "best objective so far" not in printed

    # load: the same outcome, field by field
    loaded = raycse.load(experiment, tracking_uri=uri)
    for name in ("experiment", "name", "parent_run_id", "budget", "objective", "baseline", "ranking", "winner_key",
                 "published_key", "verdict", "timings", "model_version", "decision"):
        assert getattr(loaded, name) == getattr(outcome, name), name
    assert [dataclasses.asdict(t) for t in loaded.trials] == [dataclasses.asdict(t) for t in outcome.trials]
    assert loaded.registered_run == outcome.registered_run and loaded.best_checkpoint == outcome.best_checkpoint
    assert {k: loaded.configurations[k] for k in outcome.configurations} == outcome.configurations
    assert repr(loaded) == repr(outcome) and "\n" not in repr(outcome) and len(repr(outcome)) < 300
    assert repr(outcome).startswith(f"<SearchOutcome {experiment!r}")
    assert "on the seven-task test average" in repr(outcome)
    judged_against_published = versus is not None and outcome.winner_key != outcome.published_key
    assert ("winner − published" in repr(outcome)) == judged_against_published

    table = outcome.trials_dataframe()
    assert len(table) == len(outcome.trials) == 6
    assert {"trial_id", "stage", "seed", "status", "objective", "params_tau", "params_m"} <= set(table.columns)
    assert sorted(table["stage"]) == ["judge"] * 4 + ["search"] * 2
    assert list(table["objective"]) == [t.best_objective for t in outcome.trials]
