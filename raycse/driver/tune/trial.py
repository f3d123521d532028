"""One search trial, as it runs inside its Ray worker: the trainer of `raycse.training.trainer`, reporting to Tune.

A trial is a Tune function trainable (`run_trial`). With one worker it trains in its own process; with several
it starts a Ray Train `TorchTrainer` (Ray 2.60 runs Train V2: a Tune function starts the TorchTrainer and
`TuneReportCallback` forwards its reports). At every evaluation the trial reports the objective (which drives
ASHA and Optuna); the evaluations that write last/ (at the cadence of `raycse.training.checkpoints.CheckpointCadence`:
checkpoints at most 5% of the trial's time, and at the last step) hand Tune a checkpoint holding best/ and that
last/, so that a trial Ray restarts after a crash, or one a resumed search restarts, continues from its last last/
rather than from step 0. Each checkpoint Tune holds is whole: its last/ knows the best/ beside it. Once the trial
has ended the driver deletes its last/ (raycse.driver.tune.checkpoint_retention).

A trial whose completion MLflow already holds (its run FINISHED by the driver) is never trained again: a search
killed between that moment and Tune's next save of its own state would otherwise re-run it on --resume.
Such a trial replays its recorded final result instead (`replayed_result`).

A user's own loss reaches the trial's node with the job (Ray ships its file: raycse/training/ray_runtime.py); before
it trains, the trial checks that the module it imports there is the very file the search started with.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from raycse.driver.tune.replay import TrialContext, replayed_result
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
    REPORTED_AT,
    STEP,
    TRIAL_CHECKPOINT,
    TRIAL_COMPILE,
    TRIAL_EVAL,
    TRIAL_STARTED_AT,
    TRIAL_STARTUP,
    TRIAL_TIMING_KEYS,
    TRIAL_TRAIN,
    loss_stat,
)
from raycse.settings.config import TrainConfig
from raycse.settings.space import SearchSpace, TrialSpec
from raycse.training.checkpoints import CheckpointCadence

COMPILE_RECORD = "raycse-compile-seconds.json"  # per node, in the system's temp directory


# ------------------------------------------------------------------------------------------ reports
def eval_metrics(report, extra_checkpoint_s: float = 0.0, worker_start_s: float = 0.0) -> dict[str, Any]:
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
                     shared_tokens=None, least_interval_s: float = 0.0) -> None:
    """Train, calling `report(metrics, checkpoint_dir)` at each evaluation and once at the end (final results).
    An evaluation's report carries its checkpoint when the evaluation wrote last/ (`CheckpointCadence`, at least
    `least_interval_s` apart: driver/tune/pacing.py), the last step's always; the final report none: the last
    step's checkpoint holds the final best/, and a trial killed before its end is recorded goes on from its last/
    (no step left: it only scores the test tasks again)."""
    from raycse.training.trainer import TrainingDiverged, train

    last_eval: dict[str, Any] = {TRIAL_STARTUP: worker_start_s}
    extra_checkpoint_s = 0.0
    cadence = CheckpointCadence(least_interval_s, share=config.checkpoint_share)

    def on_eval(eval_report) -> None:
        nonlocal extra_checkpoint_s
        metrics = eval_metrics(eval_report, extra_checkpoint_s, worker_start_s)
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
        results = train(config, on_eval=on_eval, resume=resume, compile_seconds=record.get("seconds"),
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


# ------------------------------------------------------------------------------------ the trainable
def trial_config(space: SearchSpace, spec: TrialSpec, output_dir: str) -> TrainConfig:
    """The trial's TrainConfig. Its best checkpoint is scored on the test tasks at the end when the space asks it
    of every trial (test_eval: all), and for the judging runs the judge stage names unless the test tasks are off
    (the answer's test table is made of them)."""
    config = space.trial_config(spec.sampled, spec.seed)
    test_eval = space.test_eval == "all" or (spec.test and space.test_eval != "none")
    return dataclasses.replace(config, workers=space.resources.workers,
                               gpus_per_worker=space.resources.gpus_per_worker, test_eval=test_eval,
                               output_dir=output_dir)


_previous_trial_end: float | None = None  # when this worker process last finished a trial (Tune reuses actors)


def worker_start_seconds(now: float) -> float:
    """Seconds this trial waited for its worker: since the process started (a new Ray actor: interpreter, imports),
    or since the previous trial in the same process ended (a reused actor: close to nothing)."""
    import psutil

    since = _previous_trial_end if _previous_trial_end is not None else psutil.Process().create_time()
    return max(0.0, now - since)


def trial_started_at(worker_start_s: float) -> float:
    """When this trial counts as started, for how many ran at once: a new worker from its creation (its start-up,
    `worker_start_s`, is part of the trial), a reused one from now."""
    return time.time() - worker_start_s if _previous_trial_end is None else time.time()


def trial_ended() -> None:
    """Note that this worker process finished a trial: the next one in it starts with no start-up to count."""
    global _previous_trial_end
    _previous_trial_end = time.time()


def run_trial(tune_config: dict, space: SearchSpace, context: TrialContext, shared_tokens=None) -> None:
    """The Tune function trainable: one training of the configuration Tune gives.

    shared_tokens: the training data's token ids, made once by the driver (raycse.data.tokens); Tune hands them over
    through Ray's object store.
    """
    from ray import tune

    worker_start_s = worker_start_seconds(time.time())
    tune_context = tune.get_context()
    replay = replayed_result(context, tune_context.get_trial_id())
    if replay is not None:
        tune.report(replay)
        return
    spec = TrialSpec.of(tune_config, space.base.seed)
    _check_own_losses(space)
    output_dir = tempfile.mkdtemp(prefix="raycse-trial-")
    complementary_dir = None
    try:
        checkpoint = tune.get_checkpoint()
        resume = checkpoint is not None and _restore(checkpoint, output_dir)
        config = trial_config(space, spec, output_dir)
        if config.complementary and "://" in config.complementary:  # stage 0's model on remote storage
            from ray.train import Checkpoint

            complementary_dir = tempfile.mkdtemp(prefix="raycse-complementary-")
            config = dataclasses.replace(config, complementary=Checkpoint(config.complementary).to_directory(
                complementary_dir))
        if config.workers > 1:
            _run_on_workers(config, space, tune_context, checkpoint)
            return

        started_at = trial_started_at(worker_start_s)

        def report(metrics: dict, checkpoint_dir: str | None) -> None:
            metrics = {**metrics, TRIAL_STARTED_AT: started_at, REPORTED_AT: time.time()}  # how many ran at once
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None)

        train_and_report(config, report, resume, worker_start_s, shared_tokens, context.checkpoint_every_s)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)  # Tune keeps its own copy of every reported checkpoint
        if complementary_dir:
            shutil.rmtree(complementary_dir, ignore_errors=True)
        trial_ended()


def _check_own_losses(space: SearchSpace) -> None:
    """Each user's loss the space trains is importable on this node, from the file the search started with."""
    if space.loss_sources():
        from raycse.losses.own import check_shipped

        for source in space.loss_sources():
            check_shipped(source)


def _restore(checkpoint, output_dir: str) -> bool:
    """Copy a reported checkpoint's best/ and last/ into the trial's output directory; True if last/ came back."""
    with checkpoint.as_directory() as saved:
        for name in ("best", "last"):
            if (Path(saved) / name).is_dir():
                shutil.copytree(Path(saved) / name, Path(output_dir) / name)
    return (Path(output_dir) / "last").is_dir()


def _run_on_workers(config: TrainConfig, space: SearchSpace, tune_context, checkpoint) -> None:
    from ray.tune.integration.ray_train import TuneReportCallback

    from raycse.training.ray_runtime import torch_trainer

    torch_trainer(worker_loop, config, cpus_per_worker=space.resources.cpus_per_worker,
                  storage_path=os.path.dirname(tune_context.get_trial_dir()),
                  name=f"{tune_context.get_trial_id()}-train", callbacks=[TuneReportCallback()],
                  resume_from_checkpoint=checkpoint).fit()


def worker_loop(loop_config: dict) -> None:
    """One Ray Train worker of a multi-worker trial (torch.distributed is set up by TorchTrainer)."""
    import ray.train

    config = TrainConfig(**{**loop_config["config"], "output_dir": tempfile.mkdtemp(prefix="raycse-worker-")})
    checkpoint = ray.train.get_checkpoint()
    resume = checkpoint is not None and _restore(checkpoint, config.output_dir)

    def report(metrics: dict, checkpoint_dir: str | None) -> None:
        # every worker reports (it is a barrier); only rank 0 has a checkpoint (best/, and last/ with every rank's
        # RNG states)
        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)

    try:
        train_and_report(config, report, resume)
    finally:
        shutil.rmtree(config.output_dir, ignore_errors=True)
