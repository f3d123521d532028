"""The pieces of the scale benchmark and of the driver's fixes for scale: the latency record, the MLflow write queue
(order, merged metrics, errors raised in the caller's thread, a flush that waits), the stand-in trial's curve, the
schedulers' reuse of a finished trial's worker, and a small search run end to end with the stand-in in place of
training (benchmarks/scale.py's path)."""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

from raycse.driver.tune.write_queue import StepMetrics, WriteQueue
from raycse.tracking.latency import Latencies

# benchmarks/'s stand-in trial and its count of Tune's workers (they serve the scale benchmark alone)
_stand_in = load_benchmark("simulated_trial")
ParametricCurve, SimulatedTrials = _stand_in.ParametricCurve, _stand_in.SimulatedTrials
WorkerRequests = load_benchmark("trial_workers").WorkerRequests


def test_a_latency_percentile_is_within_a_bin_of_the_truth():
    latencies = Latencies()
    values = [0.001 * (i + 1) for i in range(1000)]  # 1 ms .. 1 s
    for value in values:
        latencies.record("call", value)
    summary = latencies.snapshot()["call"]
    assert summary["count"] == 1000 and summary["total_s"] == pytest.approx(sum(values))
    assert summary["median_s"] == pytest.approx(0.5, rel=0.07)
    assert summary["p99_s"] == pytest.approx(0.99, rel=0.07)
    assert summary["max_s"] == pytest.approx(1.0)
    with latencies.timed("slept"):
        time.sleep(0.02)
    assert latencies.snapshot()["slept"]["median_s"] >= 0.015


def test_the_write_queue_keeps_order_merges_a_trials_waiting_metrics_and_flushes():
    written: list = []
    gate = threading.Event()

    def write_metrics(trial_id, steps):
        written.append(("metrics", trial_id, [step for step, _ in steps]))

    writes = WriteQueue(write_metrics)
    writes.submit(gate.wait)  # the thread is busy: what follows queues up
    writes.submit(lambda: written.append("start a"))
    for step in (1, 2, 3):
        writes.submit(StepMetrics("a", step, {"objective": float(step)}))
    writes.submit(StepMetrics("b", 1, {"objective": 1.0}))
    writes.submit(StepMetrics("a", 4, {"objective": 4.0}))
    writes.submit(lambda: written.append("end a"))
    gate.set()
    writes.flush()
    assert written == ["start a", ("metrics", "a", [1, 2, 3]), ("metrics", "b", [1]), ("metrics", "a", [4]), "end a"]
    writes.close()


def test_a_failed_write_is_raised_in_the_submitting_thread_and_stops_the_queue():
    written = []
    writes = WriteQueue(lambda trial_id, steps: None)

    def fail():
        raise RuntimeError("the store went away")

    writes.submit(fail)
    writes.submit(lambda: written.append("after"))
    with pytest.raises(RuntimeError, match="the store went away"):
        writes.flush()
    assert written == []  # nothing after a failed write is written


def test_the_parametric_curve_peaks_at_its_optimum_and_repeats_a_seed():
    curve = ParametricCurve(steps=(125, 250, 375, 500), optimum={"tau": 0.05, "m": 0.3}, noise=0.0)
    at_best = curve.curve({"tau": 0.05, "m": 0.3}, seed=42)
    away = curve.curve({"tau": 0.5, "m": 0.0}, seed=42)
    assert [step for step, _ in at_best] == [125, 250, 375, 500]
    assert at_best[-1][1] > 86.5 and away[-1][1] < at_best[-1][1] - 3  # start 80, gain 7 at the optimum
    assert [v for _, v in at_best] == sorted(v for _, v in at_best)  # rises with training
    noisy = dataclasses.replace(curve, noise=0.3)
    assert noisy.curve({"tau": 0.1}, 1) == noisy.curve({"tau": 0.1}, 1) != noisy.curve({"tau": 0.1}, 2)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_search_with_the_stand_in_trial_records_what_a_real_one_does(tmp_path, tiny_bert_dir, monkeypatch):
    """benchmarks/scale.py's path, small: the real driver over 6 simulated trials on 2 fake GPUs, one trial at a time
    (two cores): every trial is a finished or stopped MLflow run with its dev curve, and the Optuna study holds them."""
    import optuna
    import ray
    from mlflow.tracking import MlflowClient

    from raycse.driver.run import run_stages
    from raycse.driver.state import BenchmarkHook, SearchOptions
    from raycse.settings.space import load_space
    from raycse.tracking.latency import LATENCIES

    monkeypatch.chdir(tmp_path)
    space = load_space(Path(__file__).resolve().parents[1] / "search_spaces" / "focal.yaml")
    # the whole bundled corpus for 3 epochs: 558 steps of 64, so the 500 the stand-in reports are a valid run
    base = dataclasses.replace(space.base, model=str(tiny_bert_dir), max_steps=500, eval_steps=125, epochs=3)
    space = dataclasses.replace(space, experiment="scale-small", num_samples=6, test_eval="none", confirm=None,
                                base=base, max_concurrent=1,
                                resources=dataclasses.replace(space.resources, cpus_per_worker=1, gpus_per_worker=0.5))
    steps = (125, 250, 375, 500)
    timeline = tmp_path / "timeline"
    timeline.mkdir()
    stand_in = SimulatedTrials(curve=ParametricCurve(steps=steps, optimum={"tau": 0.05, "m": 0.25, "lr": 2.4e-5}),
                               eval_interval_s=0.05, timeline_dir=str(timeline))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = SearchOptions(tracking_uri=uri, storage_path=str(tmp_path / "ray"), budget="full", confirm=False,
                            benchmark=BenchmarkHook(trial_stand_in=stand_in))
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        LATENCIES.reset()
        state = run_stages(space, options, log=lambda line: None)
    finally:
        ray.shutdown()
    assert len(state.searched) == 6
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("scale-small")
    children = [r for r in client.search_runs([experiment.experiment_id])
                if r.data.tags.get("mlflow.parentRunId") == state.parent_run_id]
    assert len(children) == 6 and all(r.info.status == "FINISHED" for r in children)
    for run in children:
        history = [m.step for m in client.get_metric_history(run.info.run_id, "objective")]
        assert history == list(steps[:len(history)]) and history  # its dev curve, in order, none lost
        assert run.data.tags["raycse.status"] in ("finished", "stopped early (ASHA)")
        assert {"tau", "m", "lr"} <= set(run.data.params)
    study = optuna.load_study(study_name="scale-small", storage=state.optuna_storage)
    assert len(study.trials) == 6
    assert {t.user_attrs["ray_trial_id"] for t in study.trials} == {r.data.tags["raycse.trial_id"] for r in children}
    timelines = [json.loads(p.read_text()) for p in timeline.glob("*.json")]
    assert len(timelines) == 6 and all(t["training"] for t in timelines)
    measured = LATENCIES.snapshot()
    assert measured["searcher.ask"]["count"] == 6 and measured["mlflow.log_metric_steps"]["count"] >= 1
    assert state.clock.cpu_seconds["time_search_s"] > 0


def test_the_drivers_sqlite_stores_commit_in_write_ahead_log_mode(tmp_path):
    """Optuna's study: WAL and synchronous=NORMAL on every connection, a restored (unpickled) storage too; MLflow's
    store: its file switched to WAL. Both still read back what was written."""
    import pickle
    import sqlite3

    import optuna

    from raycse.driver.layout import optuna_rdb_storage
    from raycse.tracking.tracker import Tracker

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="wal", storage=optuna_rdb_storage(url), direction="maximize")
    trial = study.ask()
    study.tell(trial, trial.suggest_float("tau", 0.01, 0.1))
    for storage in (optuna_rdb_storage(url), pickle.loads(pickle.dumps(optuna_rdb_storage(url)))):
        with storage.engine.connect() as connection:
            settings = [connection.exec_driver_sql(f"PRAGMA {name}").scalar() for name in ("journal_mode",
                                                                                             "synchronous")]
        assert settings == ["wal", 1]  # 1: NORMAL
        assert len(optuna.load_study(study_name="wal", storage=storage).trials) == 1
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "wal")
    assert sqlite3.connect(tmp_path / "mlflow.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert tracker.client.get_experiment_by_name("wal") is not None


@pytest.mark.slow
def test_a_finished_trials_worker_runs_the_next_trial_and_no_later_trial_starts_a_worker(tmp_path):
    """raycse's schedulers (ASHA here; FIFO shares the choice) hand a finished trial's worker to the trial
    suggested next (raycse/driver/tune/newest_first.py): 16 trials that end as soon as they start, 6 at a time, run in
    the workers of the first wave, and no trial after it asks Ray for a worker (Tune's debug log says). Tune's own
    FIFO order gives a finished trial's worker to an older pending trial, kills that trial's starting worker and
    asks for a new one for the next trial: 16 workers for 16 trials."""
    import ray
    from ray import tune

    from raycse.driver.tune.newest_first import NewestFirstASHA

    def instant(config):
        tune.report({"pid": os.getpid(), "objective": config["x"]})

    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False)
    try:
        with WorkerRequests() as workers:
            results = tune.Tuner(
                tune.with_resources(instant, {"CPU": 1}), param_space={"x": tune.uniform(0, 1)},
                tune_config=tune.TuneConfig(metric="objective", mode="max", num_samples=16, max_concurrent_trials=6,
                                            reuse_actors=True,
                                            scheduler=NewestFirstASHA(time_attr="training_iteration", max_t=2,
                                                                      grace_period=1)),
                run_config=tune.RunConfig(storage_path=str(tmp_path), name="reuse", verbose=0)).fit()
    finally:
        ray.shutdown()
    assert len(results) == 16 and not results.errors
    assert workers.counts["requested"] == 6  # the first wave's workers, none after it
    assert workers.counts["reused"] >= 10
    assert len({r.metrics["pid"] for r in results}) <= 6
