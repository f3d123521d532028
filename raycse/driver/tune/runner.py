"""One stage's Tune experiment: built new, or restored on --resume; run; its trials turned into `TrialRecord`s.

Every stage that trains (stage 0, the search, the confirmation) is a Tune experiment of its own under the search's
storage path, with the driver-side MLflow callback, checkpoints kept per trial (one), and a crashed trial retried
once from its last checkpoint. A restored experiment keeps its finished trials and continues its unfinished ones.
"""
from __future__ import annotations

import dataclasses
import math

from raycse.driver import layout, progress
from raycse.driver.outcome import TrialRecord, ended_status
from raycse.driver.state import SearchState
from raycse.driver.tune.pacing import checkpoint_every_s
from raycse.driver.tune.replay import TrialContext
from raycse.driver.tune.search_workers import search_workers
from raycse.driver.tune.trial import run_trial, trial_config
from raycse.evaluation.sts import DevObjective
from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    CHECKPOINT_PATH,
    DIVERGED,
    FAILED,
    FINAL,
    OBJECTIVE,
    REPLAYED,
    REPORTED_AT,
    SEARCH,
    STAGE_TAG,
    STEP,
    TEST_KEYS,
    TRIAL_ID,
    TRIAL_PROCESS,
    TRIAL_STARTED_AT,
    TRIAL_TIMING_KEYS,
)
from raycse.settings.space import SearchSpace, TrialSpec
from raycse.tracking.tracker import Tracker

MAX_FAILURES = 1  # a trial's retries for failures of its own


def experiment_path(state: SearchState, stage: str) -> str:
    """Where a stage's Tune experiment lives: the search's own directory for the search stage, name-stage else."""
    name = state.name if stage == SEARCH else f"{state.name}-{stage}"
    return f"{state.storage.rstrip('/')}/{name}"


def has_run_state(path: str) -> bool:
    """Whether a stage's Tune experiment got as far as writing its run state (`experiment_state-*.json`).

    Tune writes `tuner.pkl` when the Tuner is built, the run state only once the run has started. Restoring from
    `tuner.pkl` alone (a kill in between, e.g. while the untouched model is scored) starts a run of one sample:
    Tune's resume takes the number of samples from the run state it could not find. Such a stage starts anew."""
    from pyarrow.fs import FileSelector, FileType
    from ray.train._internal.storage import get_fs_and_path

    fs, fs_path = get_fs_and_path(path)
    listing = fs.get_file_info(FileSelector(fs_path, allow_not_found=True))
    return any(info.type == FileType.File and info.base_name.startswith("experiment_state-")
               and info.base_name.endswith(".json") for info in listing)


def tuner(state: SearchState, space: SearchSpace, stage: str, tune_config, param_space: dict | None = None,
          stopper=None, slots: int | None = None):
    """A new Tuner for `stage`, or the restored one when the stage's experiment exists (--resume).

    `tune_config` is a function returning the TuneConfig, called for a new experiment only: a restored one brings
    back its own searcher, and building another (OptunaSearch enqueues the published point into the persistent
    study when built) would change the study.
    """
    from ray import tune

    from raycse.driver.tune.callback import MlflowSearchCallback
    from raycse.driver.tune.checkpoint_recovery import RecoverDeletedCheckpoints
    from raycse.driver.tune.reset_failures import retry_resets
    from raycse.driver.tune.resumable_limits import ForgetFinishedTrials
    from raycse.driver.tune.retries import OwnFailuresOnly

    retry_resets()  # a worker lost while Tune resets it for the trial: the trial retried (reset_failures.py)
    slots = slots or layout.max_concurrent(space, state.cluster)
    trainable = tune.with_resources(trial_function(state, space, slots), layout.trial_resources(space))
    path = experiment_path(state, stage)
    if tune.Tuner.can_restore(path) and has_run_state(path):
        # finished and errored trials stay as they are; unfinished ones continue from their last checkpoint.
        # The restored run config brings back the pickled callbacks (the MLflow one re-opens its client lazily).
        return tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=False,
                                  restart_errored=False, param_space=param_space)
    callback = MlflowSearchCallback(state.options.tracking_uri, space.experiment, state.parent_run_id, space, state.log,
                                    keep_checkpoints=state.options.keep_checkpoints)
    return tune.Tuner(
        trainable, param_space=param_space, tune_config=tune_config(),
        run_config=tune.RunConfig(
            name=path.rstrip("/").rsplit("/", 1)[-1], storage_path=state.storage, verbose=0, stop=stopper,
            callbacks=[callback, RecoverDeletedCheckpoints(), ForgetFinishedTrials(), OwnFailuresOnly(MAX_FAILURES)],
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            # a crashed trial (a killed worker, a lost node) is retried once, from its last checkpoint; a node drained
            # for a preemption, or lost while the trial starts, does not use that retry up (retries.py)
            failure_config=tune.FailureConfig(max_failures=MAX_FAILURES),
        ))


def trial_function(state: SearchState, space: SearchSpace, slots: int):
    """What each trial of the stage runs: raycse's training (trial.run_trial), or the options' stand-in."""
    from ray import tune

    context = TrialContext(state.options.tracking_uri, state.loaded_space.experiment, resumed=state.options.resume,
                           checkpoint_every_s=checkpoint_every_s(slots))
    stand_in = state.options.benchmark.trial_stand_in
    if stand_in is not None:
        return stand_in.trainable(space, context)
    if state.options.warm_workers:
        context = dataclasses.replace(context, warm_pool=search_workers(state).pool())
    return tune.with_parameters(run_trial, space=space, context=context, shared_tokens=state.shared_token_ref())


def fixed_slots(state: SearchState, space: SearchSpace, specs: list[TrialSpec]) -> int:
    return layout.max_concurrent(dataclasses.replace(space, num_samples=len(specs)), state.cluster)


def fixed_trials(state: SearchState, space: SearchSpace, specs: list[TrialSpec]):
    """A FIFO Tune config that runs exactly these trials (stage 0, the confirmation): (tune_config, param_space)."""
    from ray import tune

    from raycse.driver.tune.resumable_limits import ResumableGrid

    def tune_config():
        return tune.TuneConfig(metric=OBJECTIVE, mode=DevObjective.mode, num_samples=1, reuse_actors=True,
                               search_alg=ResumableGrid(max_concurrent=fixed_slots(state, space, specs)))

    return tune_config, {"raycse_trial": tune.grid_search([spec.as_tune_config()["raycse_trial"] for spec in specs])}


_TUNE_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"


def fit_until_interrupted(experiment):
    """`experiment.fit()`, and `Stopped` (a KeyboardInterrupt) after it when a signal stopped it.

    Tune catches Ctrl-C itself: it stops the experiment, snapshots it one last time and returns its results as if
    the stage had ended, and the search would go on to its next stage with the trials it had. So raycse takes
    SIGINT, SIGTERM and SIGHUP during the fit (raycse/training/stop_signals.py): the first asks Tune for that
    graceful stop (Tune's SIGUSR1 handler), and the search then ends with exit 130, 143 or 129, `--resume`
    continuing it; a second stops at once."""
    import os

    from raycse.training.stop_signals import Stopped, graceful

    tune_setting = os.environ.get(_TUNE_SIGINT)
    os.environ[_TUNE_SIGINT] = "1"  # Tune's own SIGINT handler would replace raycse's
    try:
        with graceful(ask_tune_to_stop) as stop:
            results = experiment.fit()
    finally:
        if tune_setting is None:  # a notebook's process keeps the user's own setting, not raycse's
            os.environ.pop(_TUNE_SIGINT, None)
        else:
            os.environ[_TUNE_SIGINT] = tune_setting
    if stop.signum is not None:
        raise Stopped(stop.signum)
    return results


def ask_tune_to_stop() -> None:
    """Tune's graceful stop (its SIGUSR1 handler), without its words for it: they name Ctrl-C and Tune's own
    restore, where raycse's last line names the signal and `--resume`."""
    import logging
    import os
    import signal

    logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)
    os.kill(os.getpid(), signal.SIGUSR1)


def fit(state: SearchState, space: SearchSpace, stage: str, experiment, drop_lost: bool = True) -> list[TrialRecord]:
    """Run a stage's Tune experiment; then drop the MLflow runs of trials that a kill took before Tune's snapshot
    recorded them (Tune ran others in their place on --resume), so that each trial is one run."""
    records = trial_records(fit_until_interrupted(experiment), space)
    if drop_lost:
        drop_lost_runs(state, space, stage, records)
    return records


def drop_lost_runs(state: SearchState, space: SearchSpace, stage: str, records: list[TrialRecord]) -> None:
    """On --resume, drop the stage's unfinished MLflow runs whose trial none of `records` is (every trial the
    stage's experiments hold)."""
    if state.options.resume:
        tracker = Tracker(state.options.tracking_uri, space.experiment)
        dropped = tracker.drop_unrecorded_trials(state.parent_run_id, (STAGE_TAG, stage),
                                                 {record.trial_id for record in records})
        if dropped:
            state.log(f"{len(dropped)} {stage} trial run(s) started just before the kill, before Tune recorded "
                      f"them, were deleted from MLflow (Tune ran new trials in their place): {', '.join(dropped)}.")


def run_fixed(state: SearchState, space: SearchSpace, stage: str, specs: list[TrialSpec], *, part: str = "",
              drop_lost: bool = True) -> list[TrialRecord]:
    """Train exactly these trials as the stage's Tune experiment (restored when it exists). `part` names one of
    several experiments of a stage (a judging look: `{stage}-{part}`); `drop_lost` False leaves the dropping of
    runs a kill took to the caller, who knows every part's trials (see `drop_lost_runs`)."""
    tune_config, param_space = fixed_trials(state, space, specs)
    progress.plan_trials(len(specs), DevObjective.mode,
                         tests=sum(trial_config(space, spec, "").test_eval for spec in specs))  # the time they take
    slots = fixed_slots(state, space, specs)
    path_stage = f"{stage}-{part}" if part else stage
    experiment = tuner(state, space, path_stage, tune_config, param_space, slots=slots)
    return fit(state, space, stage, experiment, drop_lost=drop_lost)


def trial_records(grid, space: SearchSpace) -> list[TrialRecord]:
    """Every trial of a Tune run, from its last result (works the same after --resume)."""
    records = []
    for result in grid:
        metrics = result.metrics or {}
        spec = TrialSpec.of(result.config or {}, space.base.seed)
        status = FAILED if result.error else ended_status(metrics)  # finished once it reached its last step
        best = metrics.get(BEST_OBJECTIVE)
        best = best if isinstance(best, (int, float)) and math.isfinite(best) else None
        if status == DIVERGED:
            best = DevObjective.worst
        records.append(TrialRecord(
            trial_id=metrics.get(TRIAL_ID) or result.path.rstrip("/").split("/")[-1], stage=spec.stage,
            family=space.family_of(spec.sampled) if spec.sampled or space.conditional else next(iter(space.families)),
            params=space.params_of(spec.sampled) if spec.sampled else {}, seed=spec.seed,
            config_key=space.config_key(spec.sampled), best_objective=best,
            best_step=int(metrics.get(BEST_STEP, 0) or 0), steps=int(metrics.get(STEP, 0) or 0),
            status=status, checkpoint=best_dir(result),
            test={k: metrics[k] for k in TEST_KEYS if k in metrics},
            timings={k: float(metrics.get(k, 0.0)) for k in TRIAL_TIMING_KEYS},
            # Ray's own timestamp is whole seconds: the trial's report times, where it reported them, are exact
            ended_at=float(metrics.get(REPORTED_AT) or metrics.get("timestamp", 0.0)), curve=dev_curve(result),
            started_at=float(metrics.get(TRIAL_STARTED_AT) or 0.0),
            process_id=int(metrics[TRIAL_PROCESS]) if metrics.get(TRIAL_PROCESS) else None))
    return sorted(records, key=lambda r: r.trial_id)


def dev_curve(result) -> list[tuple[int, float]]:
    """(step, objective) of every evaluation a trial reported (its final and replayed reports left out)."""
    frame = result.metrics_dataframe
    if frame is None or OBJECTIVE not in frame or STEP not in frame:
        return []
    for flag in (FINAL, REPLAYED):
        if flag in frame:
            frame = frame[frame[flag].isna() | (frame[flag] != 1)]
    return [(int(step), float(value)) for step, value in zip(frame[STEP], frame[OBJECTIVE])
            if isinstance(value, (int, float)) and math.isfinite(value)]


def best_dir(result) -> str | None:
    """The trial's best model: best/ inside its last Tune checkpoint (or the path a replayed result names)."""
    if result.checkpoint is not None:
        base = result.checkpoint.path
    else:
        base = (result.metrics or {}).get(CHECKPOINT_PATH)
        frame = result.metrics_dataframe
        if not base and frame is not None and CHECKPOINT_PATH in frame:  # a multi-worker trial's TorchTrainer
            paths = frame[CHECKPOINT_PATH].dropna()
            base = str(paths.iloc[-1]) if len(paths) else None
    return f"{base.rstrip('/')}/best" if base else None
