"""Finished means finished: a trial whose completion MLflow already holds (its run FINISHED by the driver) is never
trained again, but replays its recorded final result.

A search killed between the driver's recording of a trial's completion and Tune's next save of its own state would
otherwise re-run that trial on --resume. Light on purpose (MLflow and the run vocabulary, nothing of torch): both
the real trial (raycse.driver.tune.trial) and the stand-in of benchmarks/scale.py (benchmarks/simulated_trial.py)
ask it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    CHECKPOINT_PATH,
    CHECKPOINT_TAG,
    FINAL,
    FINAL_KEYS,
    FINISHED,
    OBJECTIVE,
    REPLAYED,
    STATUS_TAG,
    STEP,
    STEPS_TAG,
    TRIAL_TAG,
    TRIAL_TIMING_KEYS,
)


@dataclasses.dataclass(frozen=True)
class TrialContext:
    """What a trial needs besides the space: where MLflow is (for the replay check) and this trial's ids."""

    tracking_uri: str
    experiment: str
    # whether the search was resumed (--resume): only then can a trial's run be FINISHED before the trial starts
    # (the driver recorded its completion, then was killed before Tune's snapshot did), so only then is MLflow asked
    resumed: bool = True
    checkpoint_every_s: float = 0.0  # the least seconds between two of the trial's Tune checkpoints (driver/pacing)
    warm_pool: Any = None  # the search's warm workers (driver/tune/warm_workers.py); None: a trial trains in Tune's


def replayed_result(context: TrialContext, trial_id: str) -> dict | None:
    """The recorded final result of a trial whose MLflow run the driver already FINISHED, else None. A new search
    has no such trial: its workers never ask (nor import MLflow), which is a query per trial less on the store."""
    if not context.resumed:
        return None
    from raycse.errors import ConfigError
    from raycse.tracking.tracker import Tracker

    try:
        tracker = Tracker.existing(context.tracking_uri, context.experiment)
    except ConfigError:  # no store or experiment yet: nothing recorded
        return None
    runs = tracker.runs(f"tags.`{TRIAL_TAG}` = '{trial_id}' and attributes.status = 'FINISHED'", max_results=1)
    if not runs:
        return None
    from raycse.evaluation.sts import DevObjective

    run = runs[0]
    metrics, tags = run.data.metrics, run.data.tags
    best = metrics.get(BEST_OBJECTIVE, DevObjective.worst)
    result = {STEP: int(float(tags.get(STEPS_TAG, metrics.get(BEST_STEP, 0)))), OBJECTIVE: best,
              BEST_OBJECTIVE: best, BEST_STEP: int(metrics.get(BEST_STEP, 0)), REPLAYED: 1,
              CHECKPOINT_PATH: tags.get(CHECKPOINT_TAG)}
    if tags.get(STATUS_TAG) == FINISHED:
        result[FINAL] = 1
    result.update({k: metrics[k] for k in (*FINAL_KEYS, *TRIAL_TIMING_KEYS) if k in metrics})
    return result
