"""`raycse search` end to end: a real Ray runtime, real Optuna, a real SQLite MLflow store, a tiny BERT."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from raycse.cli import main

SPACE = """\
experiment: {experiment}
model: {model}
loss: focal
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
  {extra}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: {num_samples}, seed: {seed}, test_eval: {test_eval}, scheduler: {{name: fifo}}}}
resources: {{workers: 1, cpus_per_worker: 2}}
"""


def write_space(tmp_path: Path, model: Path, experiment: str, num_samples: int, test_eval: str = "best",
                extra: str = "", seed: int = 0) -> Path:
    path = tmp_path / f"{experiment}.yaml"
    path.write_text(SPACE.format(experiment=experiment, model=model, num_samples=num_samples, test_eval=test_eval,
                                 extra=extra, seed=seed))
    return path


def child_runs(client: MlflowClient, experiment: str) -> tuple[object, list]:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if "raycse.search" in r.data.tags]
    assert len(parents) == 1, "exactly one parent run per search"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], children


@pytest.fixture
def ray_session():
    import ray

    yield
    ray.shutdown()


@pytest.mark.timeout(600)
def test_two_trial_search_records_runs_params_metrics_and_checkpoint(tmp_path, tiny_bert_dir, ray_session, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = write_space(tmp_path, tiny_bert_dir, "tiny-search", num_samples=2)
    code = main(["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray")])
    out = capsys.readouterr().out
    assert code == 0
    assert "CPU budget" in out or "cpu budget" in out  # no GPU here, and the output says so
    assert "Best checkpoint:" in out

    client = MlflowClient(tracking_uri=uri)
    parent, children = child_runs(client, "tiny-search")
    assert parent.info.status == "FINISHED"
    assert len(children) == 2
    for run in children:
        assert run.info.status == "FINISHED"
        assert {"tau", "m", "lr", "batch_size"} <= set(run.data.params)
        history = client.get_metric_history(run.info.run_id, "stsb_dev")
        assert [m.step for m in history] == [2, 4]  # step-indexed dev curve, scored twice
        assert all(-100 <= m.value <= 100 for m in history)
        assert run.data.tags["raycse.status"] == "finished"
    # the paper's point runs first, so the search can only improve on it
    published = [r for r in children if float(r.data.params["tau"]) == 0.07 and float(r.data.params["m"]) == 0.3]
    assert len(published) == 1

    # the best checkpoint is an artifact of the parent, registered as a model version, and loads
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "best_checkpoint")}
    assert {"best_checkpoint/config.json", "best_checkpoint/modules.json"} <= artifacts
    assert any(a.path.endswith(".yaml") for a in client.list_artifacts(parent.info.run_id))
    versions = client.search_model_versions("name='tiny-search'")
    assert len(versions) == 1 and versions[0].run_id == parent.info.run_id
    best_dev = parent.data.metrics["best_stsb_dev"]
    assert best_dev == pytest.approx(max(r.data.metrics["best_stsb_dev"] for r in children))
    for key in ("STS12", "STS16", "STSBenchmark", "SICKRelatedness", "avg"):
        assert key in parent.data.metrics  # test_eval: best -> the best checkpoint's seven figures

    from sentence_transformers import SentenceTransformer

    local = client.download_artifacts(parent.info.run_id, "best_checkpoint", str(tmp_path / "dl"))
    assert SentenceTransformer(local, device="cpu").encode(["a test sentence"]).shape == (1, 32)

    # `raycse report` reads the same experiment back: the trial table and the plots
    report_dir = tmp_path / "report"
    assert main(["report", "tiny-search", "--tracking-uri", uri, "--output-dir", str(report_dir)]) == 0
    out = capsys.readouterr().out
    assert "2 trials" in out and "tau" in out and "best dev" in out
    plots = {p.name for p in report_dir.glob("*.png")}
    assert {"dev_curves.png", "objective_vs_tau.png", "objective_vs_m.png"} <= plots
    assert all((report_dir / name).stat().st_size > 1000 for name in plots)
    assert main(["report", "no-such-experiment", "--tracking-uri", uri]) == 2


def bad_then_good_search(tmp_path: Path, model: Path, experiment: str, param: str, bad, good) -> dict:
    """A 2-trial search whose published (first) trial sets `param` to `bad`; the child runs keyed by the value.

    With TPE seeded 1 the second trial draws the other choice, `good` (seed 0 draws `bad` again).
    """
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    as_yaml = lambda v: f"{v:.1e}" if isinstance(v, float) else str(v)  # noqa: E731  (YAML 1.1 floats need a dot)
    space = write_space(tmp_path, model, experiment, num_samples=2, test_eval="none", seed=1,
                        extra=f"{param}: {{type: categorical, choices: [{as_yaml(bad)}, {as_yaml(good)}]}}")
    space.write_text(space.read_text().replace("published: {tau: 0.07, m: 0.3}",
                                               f"published: {{tau: 0.07, m: 0.3, {param}: {as_yaml(bad)}}}"))
    assert main(["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray")]) == 0
    _, children = child_runs(MlflowClient(tracking_uri=uri), experiment)
    runs = {type(bad)(r.data.params[param]): r for r in children}
    assert sorted(runs) == sorted([bad, good])
    return runs


@pytest.mark.timeout(600)
def test_a_diverging_trial_is_recorded_and_the_search_goes_on(tmp_path, tiny_bert_dir, ray_session):
    # lr 1e30 blows the weights up to inf within a step or two
    runs = bad_then_good_search(tmp_path, tiny_bert_dir, "diverge", "lr", 1.0e30, 3.0e-5)
    assert runs[1e30].info.status == "FAILED"
    assert runs[1e30].data.tags["raycse.status"] == "diverged"
    assert "non-finite" in runs[1e30].data.tags["raycse.error"]
    assert runs[3e-5].data.tags["raycse.status"] == "finished"


@pytest.mark.timeout(600)
def test_a_trial_that_raises_is_recorded_as_failed_and_the_search_goes_on(tmp_path, tiny_bert_dir, ray_session):
    # batch 100000 passes validation but the 160 sentences hold no such batch: that trial raises at run time
    # (and is retried once by Tune's FailureConfig)
    runs = bad_then_good_search(tmp_path, tiny_bert_dir, "raises", "batch_size", 100000, 8)
    assert runs[100000].info.status == "FAILED" and runs[100000].data.tags["raycse.status"] == "failed"
    assert "fewer than one batch" in runs[100000].data.tags["raycse.error"]
    assert runs[8].data.tags["raycse.status"] == "finished"


def _run_cli(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "raycse.cli", *args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)


@pytest.mark.timeout(900)
def test_resume_after_the_driver_is_killed(tmp_path, tiny_bert_dir):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = write_space(tmp_path, tiny_bert_dir, "killed", num_samples=3, test_eval="none")
    args = ["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray")]
    log = tmp_path / "first.log"
    driver = _run_cli(args, log)
    deadline = time.time() + 400
    while time.time() < deadline and driver.poll() is None and "finished: best" not in log.read_text():
        time.sleep(0.5)
    assert driver.poll() is None, "the search ended before it could be killed:\n" + log.read_text()[-3000:]
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray runtime it started, mid-search
    driver.wait()

    resumed = subprocess.run([sys.executable, "-m", "raycse.cli", *args, "--resume"], capture_output=True, text=True,
                             timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming search" in resumed.stdout

    client = MlflowClient(tracking_uri=uri)
    _, children = child_runs(client, "killed")
    trial_ids = [r.data.tags["raycse.trial_id"] for r in children]
    assert len(trial_ids) == 3 and len(set(trial_ids)) == 3  # no lost and no duplicated trial
    assert all(r.info.status != "RUNNING" for r in children)
    assert all(r.data.tags.get("raycse.status") == "finished" for r in children)
    assert child_runs(client, "killed")[0].info.status == "FINISHED"


def test_resume_without_a_search_is_a_clean_error(tmp_path, tiny_bert_dir, capsys):
    space = write_space(tmp_path, tiny_bert_dir, "nothing", num_samples=1)
    code = main(["search", "--space", str(space), "--storage-path", str(tmp_path / "ray"), "--resume",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    assert code == 2
    assert "no search to resume" in capsys.readouterr().err
