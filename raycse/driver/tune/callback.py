"""Tune -> MLflow, in the driver: every trial of every stage becomes a child run of the search's parent run.

Only the driver writes to MLflow (one process; the trials' runs from one thread of its own, beside Tune's loop), so
a SQLite store is never written by the trials' processes at once. A trial's run is opened when it starts, gets its
step-indexed evaluations, and is ended FINISHED when the trial completes: from then on `raycse.driver.tune.trial` never
trains it again (it replays the recorded result). Then, unless the search keeps them (--keep-checkpoints), the trial's
checkpoint loses its last/, the training state that only a trial still running needs
(raycse.driver.tune.checkpoint_retention).
"""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path

from ray import tune

from raycse.driver import progress
from raycse.driver.outcome import ended_status
from raycse.driver.state import say
from raycse.driver.tune.checkpoint_retention import drop_training_state
from raycse.driver.tune.write_queue import StepMetrics, WriteQueue
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
    LOSS_STAT_PREFIX,
    OBJECTIVE,
    REPLAYED,
    RUNNING,
    SEED_TAG,
    SENTENCES_PER_S,
    SET_ASIDE,
    STAGE_TAG,
    STATUS_TAG,
    STEP,
    STEPS_TAG,
    TOTAL_STEPS,
    TRAIN_LOSS,
    TRIAL_TAG,
    TRIAL_TIMING_KEYS,
)
from raycse.settings.space import SearchSpace, TrialSpec
from raycse.tracking.tracker import Tracker, training_params

STEP_METRICS = (OBJECTIVE, BEST_OBJECTIVE, TRAIN_LOSS, SENTENCES_PER_S, *DEV_FIGURES)


def step_metrics(result: dict) -> dict[str, float]:
    """The step-indexed metrics of an evaluation: the objective and its parts, the loss and any loss statistic."""
    return {k: v for k, v in result.items() if isinstance(v, (int, float))
            and (k in STEP_METRICS or k.startswith(LOSS_STAT_PREFIX))}


class MlflowSearchCallback(tune.Callback):
    """Tune's events become MLflow writes, queued to a thread of their own (raycse.driver.tune.write_queue) so that
    Tune's loop never waits on MLflow, and flushed at each of Tune's snapshots of the experiment (`get_state`) and at
    its end: a snapshot never holds a result, nor a trial's end, that MLflow does not.

    A trial's run is created when the trial first starts. A callback that Tune restored (--resume) finds the runs
    its trials already have with one query of the parent's children, the first time it needs one: never a query
    per trial, which would grow with the search. Everything about runs happens on the writer's thread; the loop's
    thread reads the trial and prints its lines."""

    keep_checkpoints = False  # (the class's default: a callback pickled by a raycse without the option)

    def __init__(self, tracking_uri: str, experiment: str, parent_run_id: str, space: SearchSpace, log=say,
                 keep_checkpoints: bool = False):
        self.tracking_uri, self.experiment, self.space = tracking_uri, experiment, space
        self.parent_run_id = parent_run_id
        self.log = log
        self.keep_checkpoints = keep_checkpoints  # a trial that ended keeps its last/ too
        self.run_ids: dict[str, str] = {}  # the writer's thread's
        self._tracker = None
        self._writes: WriteQueue | None = None
        self._recorded: dict[str, str] | None = {}  # trial id -> run id of runs made before; None: not read yet
        # trial id -> the last step whose metrics its run holds: a trial resumed from a checkpoint older than its last
        # logged evaluation (a lost node, a killed driver) evaluates those steps again, and each is logged once
        self._logged_through: dict[str, int] = {}

    def __getstate__(self):  # Tune pickles its run config; the MLflow client and the queue are re-created on demand
        state = dict(self.__dict__)
        state["_tracker"] = state["_writes"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_logged_through", {})
        self._recorded = None  # unpickled: this may be a resumed search, whose earlier runs are read when needed

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.tracking_uri, self.experiment)
        return self._tracker

    @property
    def writes(self) -> WriteQueue:
        if self._writes is None:
            self._writes = WriteQueue(self._write_metrics)
        return self._writes

    def _spec(self, trial) -> TrialSpec:
        return TrialSpec.of(trial.config, self.space.base.seed)

    # ------------------------------------------------------------------------------ the loop's thread
    def on_trial_start(self, iteration, trials, trial, **info):
        progress.trials_seen(trials, started=trial)
        spec = self._spec(trial)
        config = self.space.trial_config(spec.sampled, spec.seed)
        tags = {TRIAL_TAG: trial.trial_id, STATUS_TAG: RUNNING, STAGE_TAG: spec.stage, SEED_TAG: spec.seed,
                CONFIG_KEY_TAG: self.space.config_key(spec.sampled),
                **self.space.loss_tags(self.space.family_of(spec.sampled))}  # a user's loss: its file's SHA-256
        params = {"loss_family": self.space.family_of(spec.sampled), **training_params(config.to_dict())}
        self.writes.submit(functools.partial(self._start, trial.trial_id, tags, params))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(REPLAYED):
            return
        if result.get(SET_ASIDE):  # a storage fault, not the configuration's: the trial went on from step 0
            self.log(f"trial {trial.trial_id}  checkpoint set aside, it cannot be read: {result[SET_ASIDE]}; "
                     "the trial starts again from step 0")
        if not result.get(FINAL):
            progress.trial_reported(trial.trial_id, result.get(STEP), result.get(TOTAL_STEPS),
                                    result.get(BEST_OBJECTIVE))
        if result.get(FINAL):
            if result.get(DIVERGED_KEY):
                self.log(f"trial {trial.trial_id}  diverged: {result.get(ERROR)}")
            final = {k: result[k] for k in (*FINAL_KEYS, *TRIAL_TIMING_KEYS, BEST_OBJECTIVE, BEST_STEP) if k in result}
            self.writes.submit(functools.partial(self._metrics, trial.trial_id, final))
            return
        self.writes.submit(StepMetrics(trial.trial_id, int(result[STEP]), step_metrics(result)))
        spec = self._spec(trial)
        self.log(f"trial {trial.trial_id}  {spec.stage:<7} {self.space.family_of(spec.sampled):<13} "
                 f"seed {spec.seed:<4} step {int(result[STEP]):>6}  "
                 f"loss {result.get(TRAIN_LOSS, math.nan):8.4f}  "
                 f"objective {result[OBJECTIVE]:6.2f}  (best {result[BEST_OBJECTIVE]:6.2f})  "
                 f"{result.get(SENTENCES_PER_S, 0):8.1f} sentences/s")

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = trial.last_result or {}
        checkpoint = getattr(trial, "checkpoint", None)
        if last.get(REPLAYED):  # recorded before a kill, which may have come before its last/ was deleted
            progress.trials_seen(trials, ended=trial)
            self._drop_training_state(checkpoint)
            return
        tags = {STEPS_TAG: last.get(STEP, 0), CHECKPOINT_TAG: checkpoint.path if checkpoint else ""}
        if last.get(DIVERGED_KEY):
            tags.update({STATUS_TAG: DIVERGED, ERROR_TAG: last.get(ERROR, "")})
            self.writes.submit(functools.partial(self._end, trial.trial_id, tags, "FAILED"))
        else:
            status = ended_status(last)  # finished once it reached its last step, whatever ASHA decided there
            # from the write on, the trial is done, whatever happens to the driver; its line says so once written
            line = f"trial {trial.trial_id}  {status}: best objective {last.get(BEST_OBJECTIVE, math.nan):.2f}"
            self.writes.submit(functools.partial(self._end, trial.trial_id, {STATUS_TAG: status, **tags},
                                                 "FINISHED", line))
        # counted done after its line: "2/4 trials done" follows the line of the trial that made it 2
        self.writes.submit(functools.partial(progress.trials_seen, trials, ended=trial))
        self._drop_training_state(checkpoint)

    def on_trial_error(self, iteration, trials, trial, **info):
        error = trial_error(trial)  # divergence never lands here: it ends a trial normally
        self.log(f"trial {trial.trial_id}  failed: {error}")
        progress.trials_seen(trials, ended=trial)
        tags = {STATUS_TAG: FAILED, ERROR_TAG: error, STEPS_TAG: (trial.last_result or {}).get(STEP, 0)}
        self.writes.submit(functools.partial(self._end, trial.trial_id, tags, "FAILED"))
        self._drop_training_state(getattr(trial, "checkpoint", None))

    def _drop_training_state(self, checkpoint) -> None:
        """The ended trial's last/ deleted on the writer's thread, after its run's end is written (in order)."""
        if checkpoint is not None and not self.keep_checkpoints:
            self.writes.submit(functools.partial(drop_training_state, checkpoint, self.log))

    def get_state(self):
        """Called by Tune as it snapshots the experiment: MLflow first catches up with everything the snapshot holds.
        No state of its own to save (None)."""
        if self._writes is not None:
            self._writes.flush()
        return None

    def on_experiment_end(self, trials, **info):
        if self._writes is not None:
            self._writes.close()
            self._writes = None

    # ------------------------------------------------------------------------------ the writer's thread
    def _recorded_run(self, trial_id: str) -> str | None:
        if self._recorded is None:
            self._recorded = {run.data.tags[TRIAL_TAG]: run.info.run_id
                              for run in self.tracker.child_runs(self.parent_run_id) if TRIAL_TAG in run.data.tags}
        return self._recorded.get(trial_id)

    def _run(self, trial_id: str, tags: dict | None = None) -> tuple[str, bool]:
        """The trial's run id, and whether it was created just now (with `tags`)."""
        run_id = self.run_ids.get(trial_id) or self._recorded_run(trial_id)
        created = run_id is None
        if created:
            run_id = self.tracker.start_run(trial_id, parent_run_id=self.parent_run_id, tags=tags)
        self.run_ids[trial_id] = run_id
        return run_id, created

    def _start(self, trial_id: str, tags: dict, params: dict) -> None:
        run_id, created = self._run(trial_id, tags)
        if not created:  # a trial continued after a kill or a crash, or one MLflow holds as finished
            if self.tracker.run(run_id).info.status == "FINISHED":
                return  # recorded already: the trial replays its result (raycse.driver.tune.replay.replayed_result)
            self.tracker.reopen_run(run_id)
            logged = self.tracker.metric_history(run_id, OBJECTIVE)
            if logged:
                self._logged_through[trial_id] = max(self._logged_through.get(trial_id, -1), logged[-1][0])
        self.tracker.log_params(run_id, params, new_run=created)

    def _write_metrics(self, trial_id: str, steps: list[tuple[int, dict]]) -> None:
        done = self._logged_through.get(trial_id, -1)
        fresh = [(step, metrics) for step, metrics in steps if step > done]
        if fresh:
            self.tracker.log_metric_steps(self._run(trial_id)[0], fresh)
            self._logged_through[trial_id] = max(step for step, _ in fresh)

    def _metrics(self, trial_id: str, metrics: dict) -> None:
        self.tracker.log_metrics(self._run(trial_id)[0], metrics)

    def _end(self, trial_id: str, tags: dict, status: str, line: str | None = None) -> None:
        run_id = self._run(trial_id)[0]
        self.tracker.set_tags(run_id, tags)
        self.tracker.end_run(run_id, status)
        if line:
            self.log(line)


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
