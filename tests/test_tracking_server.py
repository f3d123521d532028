"""raycse against a real tracking server: PostgreSQL (Debian's `postgresql`, started here in a temporary directory
on a free local port) behind an `mlflow server` (artifacts proxied by the server into a temporary directory), and
the Optuna study in the same PostgreSQL — the setup docs/scaling.md recommends for a search that must outlive its
cluster.

Two searches at once share the server and every run, metric and artifact is there; stopping and restarting the
MLflow server in the middle of a search loses no run and no metric (the driver waits, and says so once); a killed
search resumes against the server with --resume.

PostgreSQL refuses to run as root (as CI runs): as root, the server runs as the `postgres` user that Debian's
package creates. Without PostgreSQL the tests are skipped, unless CI is set (.ci/run installs it).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from services import MlflowServer, Postgres
from test_search import finished_lines, kill_when, runs_of, small_dev_file, start_cli, write_space

pytestmark = pytest.mark.slow


def server_args(tmp_path: Path, space: Path, server: MlflowServer, postgres: Postgres, name: str, *extra: str):
    return ["search", "--space", str(space), "--tracking-uri", server.uri, "--optuna-storage",
            postgres.url("optuna"), "--storage-path", str(tmp_path / f"ray-{name}"), *extra]


def histories(client: MlflowClient, children) -> dict[str, list[int]]:
    return {r.data.tags["raycse.trial_id"]: [m.step for m in client.get_metric_history(r.info.run_id, "objective")]
            for r in children}


def waits_said(text: str) -> list[str]:
    return [line for line in text.splitlines() if "does not answer" in line]


@pytest.mark.timeout(1500)
def test_two_searches_at_once_record_every_run_metric_and_artifact_on_the_server(tmp_path, tiny_bert_dir, postgres,
                                                                                 mlflow_server):
    import optuna

    drivers = {}
    for name in ("first", "second"):
        space = write_space(tmp_path, tiny_bert_dir, f"server-{name}", num_samples=2, test_eval="none",
                            objective=small_dev_file(tmp_path))
        args = server_args(tmp_path, space, mlflow_server, postgres, name, "--no-confirm")
        drivers[name] = (start_cli(args, tmp_path / f"{name}.log", tmp_path), tmp_path / f"{name}.log")
    for driver, log in drivers.values():
        assert driver.wait(timeout=1200) == 0, log.read_text()[-3000:]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    for name in drivers:
        experiment = f"server-{name}"
        parent, children = runs_of(client, experiment)
        assert parent.info.status == "FINISHED" and len(children) == 2
        assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
        assert set(map(tuple, histories(client, children).values())) == {(2, 4)}  # every evaluation, once
        assert all({"tau", "m", "lr", "seed"} <= set(r.data.params) for r in children)
        # the artifacts, through the server: the space file, the summary, the report page, the best checkpoint
        artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
        assert {f"{experiment}.yaml", "search_summary.json", "report", "best_checkpoint"} <= artifacts
        files = {a.path for a in client.list_artifacts(parent.info.run_id, "best_checkpoint")}
        assert {"best_checkpoint/config.json", "best_checkpoint/modules.json"} <= files
        assert client.search_model_versions(f"name='{experiment}'")[0].run_id == parent.info.run_id
        # ... stored where the server keeps them, under its artifacts destination
        assert list(mlflow_server.artifacts.rglob("best_checkpoint/modules.json"))
        study = optuna.load_study(study_name=experiment, storage=postgres.url("optuna"))
        assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials) == \
            sorted(r.data.tags["raycse.trial_id"] for r in children)
        assert waits_said(drivers[name][1].read_text()) == []


@pytest.mark.timeout(1500)
def test_a_restart_of_the_mlflow_server_mid_search_loses_no_run_and_no_metric(tmp_path, tiny_bert_dir, postgres,
                                                                              mlflow_server):
    space = write_space(tmp_path, tiny_bert_dir, "server-restart", num_samples=3, test_eval="none", steps=8,
                        objective=small_dev_file(tmp_path))
    args = server_args(tmp_path, space, mlflow_server, postgres, "restart", "--no-confirm")
    log = tmp_path / "restart.log"
    driver = start_cli(args, log, tmp_path)
    deadline = time.monotonic() + 900
    while " step " not in log.read_text():  # a trial is training and its results are being written
        assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    mlflow_server.stop()
    time.sleep(10)  # down long enough for the driver's writes to fail and wait
    mlflow_server.start()
    assert driver.wait(timeout=1200) == 0, log.read_text()[-3000:]

    text = log.read_text()
    said = waits_said(text)
    assert len(said) == 1, text[-3000:]  # says so, once
    assert said[0].startswith(f"raycse: the MLflow store at {mlflow_server.uri} does not answer")
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    parent, children = runs_of(client, "server-restart")
    assert parent.info.status == "FINISHED" and len(children) == 3
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    assert set(map(tuple, histories(client, children).values())) == {(2, 4, 6, 8)}


@pytest.mark.timeout(1800)
def test_a_killed_search_resumes_against_the_server(tmp_path, tiny_bert_dir, postgres, mlflow_server):
    import optuna

    space = write_space(tmp_path, tiny_bert_dir, "server-resume", num_samples=3, test_eval="none",
                        objective=small_dev_file(tmp_path))
    args = server_args(tmp_path, space, mlflow_server, postgres, "resume", "--no-confirm")
    before = kill_when(start_cli(args, tmp_path / "first.log", tmp_path), tmp_path / "first.log",
                       lambda text: len(finished_lines(text)) >= 1)
    done = finished_lines(before)[0].split()[1]

    resumed = subprocess.run([sys.executable, "-m", "raycse", *args, "--resume"], capture_output=True, text=True,
                             timeout=1200, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming search" in resumed.stdout
    assert not [line for line in resumed.stdout.splitlines() if line.startswith(f"trial {done} ") and " step " in line]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    parent, children = runs_of(client, "server-resume")
    trial_ids = [r.data.tags["raycse.trial_id"] for r in children]
    assert parent.info.status == "FINISHED" and len(trial_ids) == 3 == len(set(trial_ids))
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    assert set(map(tuple, histories(client, children).values())) == {(2, 4)}
    study = optuna.load_study(study_name="server-resume", storage=postgres.url("optuna"))
    assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials if t.state.name == "COMPLETE") == sorted(trial_ids)
