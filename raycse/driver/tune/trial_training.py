"""A trial's training and its reports, wherever it runs: in a warm worker (raycse.driver.tune.warm_workers), in Tune's
own trial process (raycse.driver.tune.trial) or on each worker of a multi-worker trial.

`train_and_report` trains (raycse.training.trainer) and calls `report(metrics, checkpoint_dir)` at each evaluation
and once at the end; what a report holds is made here (the objective, the loss's statistics, the timings). Importing
this module imports torch, and the trainer with transformers' model code once a trial trains: the trial's light side
(trial.py) imports it only where it trains.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from raycse.driver.tune.trial_result import evaluation_result, final_result
from raycse.evaluation.sts import DevObjective
from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    COMPILE_DECISION,
    DIVERGED_KEY,
    ERROR,
    FINAL,
    FINAL_KEYS,
    OBJECTIVE,
    SET_ASIDE,
    STEP,
    TRIAL_CHECKPOINT,
    TRIAL_COMPILE,
    TRIAL_EVAL,
    TRIAL_STARTUP,
    TRIAL_TIMING_KEYS,
    TRIAL_TRAIN,
    loss_stat,
)
from raycse.settings.config import TrainConfig
from raycse.training.checkpoints import BEST_DIR, LAST_DIR, CheckpointCadence

COMPILE_RECORD = "raycse-compile-seconds.json"  # per node, in the system's temp directory


def evaluation_report(report, extra_checkpoint_s: float = 0.0, worker_start_s: float = 0.0) -> dict[str, Any]:
    """The Tune result of one evaluation: the objective and its parts, the loss's diagnostics, the timings
    (cumulative over the trial; startup includes the worker's own start, checkpoint Tune's copy to storage)."""
    timings = report.timings
    return evaluation_result(
        step=report.step, total_steps=report.total_steps, objective=report.objective,
        best_objective=report.best_objective, best_step=report.best_step, train_loss=report.train_loss,
        sentences_per_s=report.sentences_per_s,
        timings={TRIAL_STARTUP: worker_start_s + timings.startup_s, TRIAL_COMPILE: timings.compile_s,
                 TRIAL_TRAIN: timings.train_s, TRIAL_EVAL: timings.eval_s,
                 TRIAL_CHECKPOINT: timings.checkpoint_s + extra_checkpoint_s},
        extra={**report.dev_scores, **{loss_stat(name): value for name, value in report.loss_stats.items()},
               COMPILE_DECISION: report.compile_decision})


def final_metrics(results: dict, last_eval: dict) -> dict[str, Any]:
    """The last report of a finished trial: its best objective as the objective, the test figures if scored."""
    timings = {k: last_eval[k] for k in TRIAL_TIMING_KEYS if k in last_eval}  # the last evaluation's dev figures
    # stay out: a test figure of the same name (sickr_dev) comes from the best checkpoint, below
    timings[TRIAL_EVAL] = last_eval.get(TRIAL_EVAL, 0.0) + results.get("test_eval_seconds", 0.0)
    final = final_result(steps=results["steps"], best_objective=results["best_objective"],
                         best_step=results["best_step"], timings=timings)
    final.update({k: results[k] for k in FINAL_KEYS if k in results})
    return final


def diverged_metrics(err, last_eval: dict) -> dict[str, Any]:
    """A diverged training is an outcome, not a crash: it ends with the worst objective (so ASHA and Optuna learn
    from it) and `diverged: 1`; Ray's FailureConfig is left to retry real crashes only."""
    timings = {k: last_eval[k] for k in TRIAL_TIMING_KEYS if k in last_eval}
    return {**timings, STEP: err.step, OBJECTIVE: DevObjective.worst, FINAL: 1, DIVERGED_KEY: 1, ERROR: str(err),
            BEST_OBJECTIVE: last_eval.get(BEST_OBJECTIVE, DevObjective.worst),
            BEST_STEP: last_eval.get(BEST_STEP, 0)}


def train_and_report(config: TrainConfig, report, resume: bool, worker_start_s: float = 0.0,
                     shared_tokens=None, least_interval_s: float = 0.0, resume_from: str | None = None) -> None:
    """Train, calling `report(metrics, checkpoint_dir)` at each evaluation and once at the end (final results).
    An evaluation's report carries its checkpoint when the evaluation wrote last/ (`CheckpointCadence`, at least
    `least_interval_s` apart: driver/tune/pacing.py), the last step's always; the final report none: the last
    step's checkpoint holds the final best/, and a trial killed before its end is recorded goes on from its last/
    (no step left: it only scores the test tasks again).

    A checkpoint that cannot be read (`UnreadableCheckpoint`: a disk or copy fault) is set aside: its copy in the
    output directory is deleted and the trial trains from step 0, as it would have with no checkpoint; its first
    report names the file (`SET_ASIDE`, `resume_from` the checkpoint's place on Tune's storage), for the driver's
    one line. A storage fault is not the configuration's: the trial does not fail for it."""
    from raycse.training.checkpoints import UnreadableCheckpoint
    from raycse.training.trainer import TrainingDiverged, train

    last_eval: dict[str, Any] = {TRIAL_STARTUP: worker_start_s}
    extra_checkpoint_s = 0.0
    cadence = CheckpointCadence(least_interval_s, share=config.checkpoint_share)
    set_aside: str | None = None

    def on_eval(eval_report) -> None:
        nonlocal extra_checkpoint_s, set_aside
        metrics = evaluation_report(eval_report, extra_checkpoint_s, worker_start_s)
        if set_aside is not None:
            metrics[SET_ASIDE], set_aside = set_aside, None
        last_eval.update(metrics)
        clock = time.perf_counter()
        report(metrics, eval_report.checkpoint)
        if eval_report.checkpoint is not None:
            copied = time.perf_counter() - clock  # Tune's copy of the checkpoint to its storage
            extra_checkpoint_s += copied
            last_eval[TRIAL_CHECKPOINT] += copied  # (the final report's figure)
            cadence.spent(copied)

    record = _compile_record()
    try:
        try:
            results = train(config, on_eval=on_eval, resume=resume, compile_seconds=record.get("seconds"),
                            shared_tokens=shared_tokens, cadence=cadence)
        except UnreadableCheckpoint as err:
            set_aside = f"{(resume_from or config.output_dir).rstrip('/')}/{err.file}: {err.reason}"
            for name in (LAST_DIR, BEST_DIR):  # the local copy; Tune's own is replaced by the next checkpoint
                shutil.rmtree(Path(config.output_dir) / name, ignore_errors=True)
            results = train(config, on_eval=on_eval, resume=False, compile_seconds=record.get("seconds"),
                            shared_tokens=shared_tokens, cadence=cadence)
    except TrainingDiverged as err:
        report(diverged_metrics(err, last_eval), None)
        return
    if results["timings"]["compile_s"] > 0:
        _write_compile_record(results["timings"]["compile_s"])
    report(final_metrics(results, last_eval), None)


def _compile_record() -> dict:
    """What compiling cost the last time a trial compiled on this node (`trainer.decide_compile` uses it)."""
    try:
        return json.loads((Path(tempfile.gettempdir()) / COMPILE_RECORD).read_text())
    except (OSError, ValueError):
        return {}


def _write_compile_record(seconds: float) -> None:
    from raycse.files import write_json_atomic

    try:
        write_json_atomic(Path(tempfile.gettempdir()) / COMPILE_RECORD, {"seconds": seconds})
    except OSError:
        pass  # a missing record only makes the next decision use the default estimate
