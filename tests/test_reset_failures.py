"""A trial whose reused worker's node is lost while Tune resets that worker for it
(raycse/driver/tune/reset_failures.py) is retried under the search's failure policy (raycse/driver/tune/retries.py),
not counted against it, and ends as it ends undisturbed. Real Ray, Tune and nodes of the fake multi-node cluster
(cluster/fake-gpu.yaml): the node is killed during the reset itself, which Tune holds open while the worker's
previous trial, stopped, unwinds (as a stopped raycse trial does while its warm worker finishes an evaluation)."""
from __future__ import annotations

import json
import re
import sys
import threading
import time

import pytest
import ray
import yaml
from services import fake_gpu_cluster, processes_of, stop_processes
from test_cluster import CLUSTER
from test_cluster_path import FAST_FAILURE_DETECTION

from raycse.training.ray_runtime import TUNE_UNWIND_WAIT_ENV

pytestmark = pytest.mark.slow

# per trial: seconds before its first report, seconds its code takes to unwind once Tune has stopped it
TRIALS = {"a": (0, 40), "b": (10, 0), "c": (0, 0)}


def trainable(config: dict) -> None:
    """Reports once (the run stops each trial at its first report), then unwinds: `a` takes 40 s to, during which
    Tune's reset of its worker for the pending trial `c` waits for it."""
    from ray import tune

    before, unwind = TRIALS[config["trial"]]
    try:
        time.sleep(before)
        for step in (1, 2):
            tune.report({"step": step, "value": ord(config["trial"]) * 10 + step})
    finally:
        time.sleep(unwind)


def kill_the_node_resetting(cluster, trial: str, killed: list, deadline_s: float = 240) -> None:
    """SIGKILL the node (its raylet and every process under it) of the worker Tune is resetting for `trial`: Tune's
    `reset` moves the worker into the trial's folder first, then waits for the previous trial's code to return."""
    import psutil

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for proc in processes_of(cluster.temp_dir):
            try:
                if not (proc.cmdline() or [""])[0].startswith("ray::ImplicitFunc") \
                        or f"trial={trial}" not in proc.cwd():
                    continue
                raylet = proc.parent()
                stop_processes([raylet, *raylet.children(recursive=True)], hard=True)
            except psutil.Error:
                continue
            killed.append(time.monotonic())
            return
        time.sleep(0.01)


@pytest.mark.timeout(900)
def test_a_node_lost_during_the_reset_of_a_reused_worker_is_retried_and_not_counted(tmp_path):
    from ray import tune

    from raycse.driver.tune.reset_failures import retry_resets
    from raycse.driver.tune.retries import OwnFailuresOnly
    from raycse.driver.tune.runner import MAX_FAILURES

    config = yaml.safe_load((CLUSTER / "fake-gpu.yaml").read_text())
    workers = config["available_node_types"]["ray.worker.gpu"]
    workers["min_workers"] = workers["max_workers"] = config["max_workers"] = 2  # the fake provider replaces none
    env = {**FAST_FAILURE_DETECTION, TUNE_UNWIND_WAIT_ENV: "120"}  # Tune's reset waits for `a` to unwind
    with fake_gpu_cluster(config, env, tmp_path / "logs") as cluster:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        deadline = time.monotonic() + 300
        while sum(node["Resources"].get("GPU", 0) for node in ray.nodes() if node["Alive"]) < 2:
            assert time.monotonic() < deadline, "the fake cluster's two GPU nodes did not start"
            time.sleep(1)

        retry_resets()  # what raycse's runner does before each stage's Tune experiment
        killed: list[float] = []
        watcher = threading.Thread(target=kill_the_node_resetting, args=(cluster, "c", killed), daemon=True)
        watcher.start()
        results = tune.Tuner(
            tune.with_resources(trainable, {"CPU": 1, "GPU": 1}),
            param_space={"trial": tune.grid_search(list(TRIALS))},
            tune_config=tune.TuneConfig(reuse_actors=True),
            run_config=tune.RunConfig(name="reset", storage_path=str(tmp_path / "ray"), verbose=0, stop={"step": 1},
                                      callbacks=[OwnFailuresOnly(MAX_FAILURES)],
                                      failure_config=tune.FailureConfig(max_failures=MAX_FAILURES)),
        ).fit()
        watcher.join(timeout=5)
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    # the node was lost as soon as Tune's reset for `c` began, while `a` (stopped) still unwound: within the reset
    assert killed, "the reset for c was never seen"

    assert not results.errors, [str(error)[:2000] for error in results.errors]
    by_trial = {result.config["trial"]: result.metrics for result in results}
    assert by_trial.keys() == TRIALS.keys()
    assert {name: metrics["value"] for name, metrics in by_trial.items()} == \
        {name: ord(name) * 10 + 1 for name in TRIALS}  # what each reports undisturbed, then stopped
    experiment = tmp_path / "ray" / "reset"
    (snapshot,) = experiment.glob("experiment_state-*.json")
    trials = json.loads(snapshot.read_text())["trial_data"]
    status = {re.search(r"trial=(\w)", trial)[1]: json.loads(run) for trial, run in trials}
    assert {name: run["num_failures"] for name, run in status.items()} == {"a": 0, "b": 0, "c": 0}
    # c did lose its worker, once, during the reset (Tune's record of it), and was retried elsewhere
    (error,) = experiment.glob("trainable_*trial=c*/error.txt")
    assert error.read_text().count("Failure # ") == 1 and "actor" in error.read_text().lower(), error.read_text()
