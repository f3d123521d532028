"""Trials really run side by side: raycse's searcher, scheduler, resources and concurrency on a Ray cluster with a
fake GPU (Ray counts it; no device is used), 4 slots of a quarter GPU each, short trials that report as raycse's
trainable does (its start and report times), measured by raycse/driver/concurrency.py."""
from __future__ import annotations

import time

import pytest

from raycse.driver.concurrency import search_concurrency
from raycse.records import OBJECTIVE, REPORTED_AT, STEP, TRIAL_STARTED_AT
from raycse.settings.space import parse_space


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_four_slots_keep_at_least_three_trials_running_while_trials_remain_to_start(tmp_path):
    import ray
    from ray import tune

    from raycse.driver import layout
    from raycse.driver.tune import newest_first
    from raycse.driver.tune.searcher import TaggedOptunaSearch
    from raycse.sampling import samplers

    # defined here, so that Ray pickles the function itself (the test module is not importable in a worker)
    def short_trial(config: dict) -> None:
        """Four evaluations 0.4 s apart in place of a training; its start counted by raycse.driver.tune.trial's own
        functions, called as run_trial calls them (a new worker process from its creation, a reused one from now)."""
        from ray import tune

        from raycse.driver.tune import trial as raycse_trial

        started = raycse_trial.trial_started_at(raycse_trial.worker_start_seconds(time.time()))
        try:
            for k in range(1, 5):
                time.sleep(0.4)
                value = 80 - 100 * (config["tau"] - 0.08) ** 2 + k * 0.1
                tune.report({STEP: 8 * k, OBJECTIVE: value, TRIAL_STARTED_AT: started, REPORTED_AT: time.time()})
        finally:
            raycse_trial.trial_ended()

    plan = parse_space({"loss": "focal", "space": {"tau": {"type": "loguniform", "low": 0.02, "high": 0.2},
                                                   "m": {"type": "uniform", "low": 0.0, "high": 0.6}},
                        "published": {"tau": 0.07, "m": 0.3}, "train": {"max_steps": 32, "eval_steps": 8},
                        "search": {"num_samples": 16},
                        "resources": {"workers": 1, "gpus_per_worker": 0.25, "cpus_per_worker": 0.5}}, "fake.yaml")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        slots = layout.max_concurrent(plan, ray.cluster_resources())
        assert slots == 4  # one fake GPU, a quarter each
        searcher = TaggedOptunaSearch(space=plan.define_by_run, metric=OBJECTIVE, mode="max",
                                      points_to_evaluate=plan.points_to_evaluate(), sampler=samplers.sampler(plan))
        tuner = tune.Tuner(
            tune.with_resources(short_trial, layout.trial_resources(plan)),
            tune_config=tune.TuneConfig(metric=OBJECTIVE, mode="max", search_alg=searcher,
                                        scheduler=newest_first.scheduler(plan), num_samples=plan.num_samples,
                                        max_concurrent_trials=slots, reuse_actors=True),
            run_config=tune.RunConfig(storage_path=str(tmp_path), name="concurrency", verbose=0))
        results = tuner.fit()
    finally:
        ray.shutdown()
    spans = [(r.metrics[TRIAL_STARTED_AT], r.metrics[REPORTED_AT]) for r in results]
    assert len(spans) == 16 and not results.errors
    figures = search_concurrency(spans, slots)
    print(f"concurrency of 16 short trials on 4 fake-GPU slots: {figures}")  # shown with -s
    assert figures["mean_running_starting"] >= 3.0, figures
    assert figures["slot_use"] >= 0.75
