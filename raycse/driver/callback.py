"""Tune -> MLflow, in the driver: every trial of every stage becomes a child run of the search's parent run.

Only the driver writes to MLflow (one process, one thread), so a SQLite store is never written by the trials'
processes at once. A trial's run is opened when it starts, gets its step-indexed evaluations, and is ended FINISHED
when the trial completes: from then on `raycse.driver.trial` never trains it again (it replays the recorded result).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from ray import tune

from raycse.driver import progress
from raycse.driver.state import say
from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    CHECKPOINT_TAG,
    CONFIG_KEY_TAG,
    DEV_FIGURES,
    DIVERGED,
    DIVERGED_KEY,
    ERROR,
    ERROR_TAG,
    FAILED,
    FINAL,
    FINAL_KEYS,
    FINISHED,
    LOSS_STAT_PREFIX,
    OBJECTIVE,
    REPLAYED,
    RUNNING,
    SEED_TAG,
    SENTENCES_PER_S,
    STAGE_TAG,
    STATUS_TAG,
    STEP,
    STEPS_TAG,
    STOPPED,
    TOTAL_STEPS,
    TRAIN_LOSS,
    TRIAL_TAG,
    TRIAL_TIMING_KEYS,
)
from raycse.space import SearchSpace, TrialSpec
from raycse.tracking import Tracker, training_params

STEP_METRICS = (OBJECTIVE, BEST_OBJECTIVE, TRAIN_LOSS, SENTENCES_PER_S, *DEV_FIGURES)


def step_metrics(result: dict) -> dict[str, float]:
    """The step-indexed metrics of an evaluation: the objective and its parts, the loss and any loss statistic."""
    return {k: v for k, v in result.items() if isinstance(v, (int, float))
            and (k in STEP_METRICS or k.startswith(LOSS_STAT_PREFIX))}


class MlflowSearchCallback(tune.Callback):
    def __init__(self, tracking_uri: str, experiment: str, parent_run_id: str, space: SearchSpace, log=say):
        self.tracking_uri, self.experiment, self.space = tracking_uri, experiment, space
        self.parent_run_id = parent_run_id
        self.log = log
        self.run_ids: dict[str, str] = {}
        self._tracker = None

    def __getstate__(self):  # Tune pickles its run config; the MLflow client is re-created on demand
        state = dict(self.__dict__)
        state["_tracker"] = None
        return state

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.tracking_uri, self.experiment)
        return self._tracker

    def _spec(self, trial) -> TrialSpec:
        return TrialSpec.of(trial.config, self.space.base.seed)

    def _run(self, trial) -> str:
        run_id = self.run_ids.get(trial.trial_id) or self.tracker.find_run(TRIAL_TAG, trial.trial_id)
        if run_id is None:
            spec = self._spec(trial)
            run_id = self.tracker.start_run(
                trial.trial_id, parent_run_id=self.parent_run_id,
                tags={TRIAL_TAG: trial.trial_id, STATUS_TAG: RUNNING, STAGE_TAG: spec.stage,
                      SEED_TAG: spec.seed, CONFIG_KEY_TAG: self.space.config_key(spec.sampled)})
        self.run_ids[trial.trial_id] = run_id
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        progress.trials_seen(trials, started=trial.trial_id)
        run_id = self._run(trial)
        if self.tracker.run(run_id).info.status == "FINISHED":
            return  # recorded already: the trial only replays its result (raycse.driver.trial.replayed_result)
        self.tracker.reopen_run(run_id)
        spec = self._spec(trial)
        config = self.space.trial_config(spec.sampled, spec.seed)
        self.tracker.log_params(run_id, {"loss_family": self.space.family_of(spec.sampled),
                                         **training_params(config.to_dict())})

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(REPLAYED):
            return
        if not result.get(FINAL):
            progress.trial_reported(trial.trial_id, result.get(STEP), result.get(TOTAL_STEPS),
                                    result.get(BEST_OBJECTIVE))
        run_id = self._run(trial)
        if result.get(FINAL):
            if result.get(DIVERGED_KEY):
                self.log(f"trial {trial.trial_id}  diverged: {result.get(ERROR)}")
            self.tracker.log_metrics(run_id, {k: result[k] for k in (*FINAL_KEYS, *TRIAL_TIMING_KEYS, BEST_OBJECTIVE,
                                                                     BEST_STEP) if k in result})
            return
        self.tracker.log_metrics(run_id, step_metrics(result), step=int(result[STEP]))
        spec = self._spec(trial)
        self.log(f"trial {trial.trial_id}  {spec.stage:<7} {self.space.family_of(spec.sampled):<13} "
                 f"seed {spec.seed:<4} step {int(result[STEP]):>6}  "
                 f"loss {result.get(TRAIN_LOSS, math.nan):8.4f}  "
                 f"objective {result[OBJECTIVE]:6.2f}  (best {result[BEST_OBJECTIVE]:6.2f})  "
                 f"{result.get(SENTENCES_PER_S, 0):8.1f} sentences/s")

    def on_trial_complete(self, iteration, trials, trial, **info):
        progress.trials_seen(trials, ended=trial.trial_id)
        run_id = self._run(trial)
        last = trial.last_result or {}
        if last.get(REPLAYED):
            return
        checkpoint = getattr(trial, "checkpoint", None)
        tags = {STEPS_TAG: last.get(STEP, 0), CHECKPOINT_TAG: checkpoint.path if checkpoint else ""}
        if last.get(DIVERGED_KEY):
            self.tracker.set_tags(run_id, {STATUS_TAG: DIVERGED, ERROR_TAG: last.get(ERROR, ""), **tags})
            self.tracker.end_run(run_id, "FAILED")
            return
        status = FINISHED if last.get(FINAL) else STOPPED
        self.tracker.set_tags(run_id, {STATUS_TAG: status, **tags})
        self.tracker.end_run(run_id, "FINISHED")  # from here on the trial is done, whatever happens to the driver
        self.log(f"trial {trial.trial_id}  {status}: best objective {last.get(BEST_OBJECTIVE, math.nan):.2f}")

    def on_trial_error(self, iteration, trials, trial, **info):
        progress.trials_seen(trials, ended=trial.trial_id)
        run_id = self._run(trial)
        error = trial_error(trial)  # divergence never lands here: it ends a trial normally
        self.log(f"trial {trial.trial_id}  failed: {error}")
        self.tracker.set_tags(run_id, {STATUS_TAG: FAILED, ERROR_TAG: error,
                                       STEPS_TAG: (trial.last_result or {}).get(STEP, 0)})
        self.tracker.end_run(run_id, "FAILED")


def trial_error(trial) -> str:
    """The last line of a failed trial's error: the exception, not the traceback."""
    error_file = getattr(trial, "error_file", None)
    try:
        text = Path(error_file).read_text() if error_file else ""
    except OSError:
        text = ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", line)), None)
    return (error or (lines[-1] if lines else "trial failed (no error file)"))[:500]
