"""raycse/training/ray_runtime.py: the local Ray raycse starts. A real Ray, started twice in a subprocess each."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from raycse.driver.tune.warm_workers import cancel_wait_s
from raycse.training.ray_runtime import TRIAL_UNWIND_WAIT_S

pytestmark = pytest.mark.slow

# Starts Ray as raycse does, waits past the moment a raylet prestarts its idle workers (about a second after the
# driver connects), then counts the driver's descendants by name, and the environment variables it set for Ray's
# start; then an actor says what its process was started with. With REUSE set, two Tune trials then take turns in one
# reused actor, the first stopped after its first report and taking 3 s to unwind (Tune waits 2 s by default).
COUNT = """
import json, os, tempfile, time
import psutil, ray
from raycse.training.ray_runtime import start_ray
start_ray()
time.sleep(4)
names = [p.name() for p in psutil.Process().children(recursive=True)]

@ray.remote(num_cpus=0)
class Probe:
    def started_with(self):
        return {name: os.environ.get(name) for name in
                ("TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TUNE_FUNCTION_THREAD_TIMEOUT_S")}

environment = ray.get(Probe.remote().started_with.remote())
reused = None
if os.environ.get("REUSE"):
    from ray import tune

    def unwinds(config):
        try:
            for step in range(1, 4):
                tune.report({"step": step})
        finally:
            time.sleep(3 if config["slow"] else 0)

    one_at_a_time = tune.with_resources(unwinds, {"cpu": ray.cluster_resources()["CPU"]})
    results = tune.Tuner(one_at_a_time, param_space={"slow": tune.grid_search([True, False])},
                         tune_config=tune.TuneConfig(reuse_actors=True),
                         run_config=tune.RunConfig(stop={"step": 1}, storage_path=tempfile.mkdtemp(), verbose=0)).fit()
    reused = [result.error is None for result in results]
print(json.dumps({"idle": names.count("ray::IDLE"), "raylet": names.count("raylet"),
                  "left": os.environ.get("RAY_prestart_worker_first_driver"),
                  "parallelism": os.environ.get("TOKENIZERS_PARALLELISM"), "worker": environment,
                  "runtime_env": ray.get_runtime_context().runtime_env, "reused": reused}))
"""


def idle_workers(**environment: str) -> dict:
    env = {**os.environ, **environment}
    env.pop("RAY_ADDRESS", None)
    env.pop("TUNE_FUNCTION_THREAD_TIMEOUT_S", None)
    done = subprocess.run([sys.executable, "-c", COUNT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_the_local_ray_starts_no_idle_worker_and_gives_its_workers_raycse_s_settings_without_a_runtime_env():
    """No idle worker: nothing of a search would run in one. No runtime environment: Ray would start each worker
    through setup_worker.py first (0.2 CPU-seconds a process); the workers inherit raycse's settings from the
    environment Ray started in instead, raycse's value of TOKENIZERS_PARALLELISM replacing the user's there, and the
    driver's own environment is left as it was. Tune's trial actors among them wait for a stopped trial to unwind
    before they take the next one."""
    mine = idle_workers(TOKENIZERS_PARALLELISM="true", HF_HUB_OFFLINE="1", REUSE="1")
    assert {k: mine[k] for k in ("idle", "raylet", "left")} == {"idle": 0, "raylet": 1, "left": None}
    assert mine["worker"] == {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                              "TUNE_FUNCTION_THREAD_TIMEOUT_S": str(TRIAL_UNWIND_WAIT_S)}
    # the trial after a stopped one that took 3 s to unwind ran in its actor: with Tune's own 2 s it failed
    assert mine["reused"] == [True, True]
    assert mine["parallelism"] == "true"  # the driver's, as the user set it
    assert mine["runtime_env"] == {}
    # the same start with Ray's own default, as a user may ask: one idle worker per CPU of the local Ray
    theirs = idle_workers(RAY_prestart_worker_first_driver="1")
    assert theirs["raylet"] == 1 and theirs["idle"] >= 1, theirs
    assert theirs["left"] == "1"


@pytest.mark.parametrize(("tune_wait", "cancel_wait"), [(None, TRIAL_UNWIND_WAIT_S / 2), ("5", 2.5), ("0.5", 0.25)])
def test_tune_outwaits_a_stopped_trials_wait_for_its_warm_worker_whatever_the_users_setting(monkeypatch, tune_wait,
                                                                                           cancel_wait):
    """A stopped trial waits for its warm worker at most half of what Tune waits for the trial before reusing its
    process, raycse's wait or a shorter one of the user's: otherwise Tune fails the next trial."""
    if tune_wait is None:
        monkeypatch.delenv("TUNE_FUNCTION_THREAD_TIMEOUT_S", raising=False)
    else:
        monkeypatch.setenv("TUNE_FUNCTION_THREAD_TIMEOUT_S", tune_wait)
    assert cancel_wait_s() == cancel_wait
