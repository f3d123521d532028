"""One search trial, as Tune runs it: the trainer of `raycse.training.trainer`, reporting to Tune.

A trial is a Tune function trainable (`run_trial`). With one worker it trains in a warm worker of the search
(raycse.driver.tune.warm_workers: a process that outlives Tune's trial actor, so that the next trial of any stage
finds torch and the trainer imported), forwarding each report to Tune; without the search's pool of warm workers (the
Python API's choice) it trains in Tune's own process. With several workers it starts a Ray Train `TorchTrainer`
(Ray 2.60 runs Train V2: a Tune function starts the TorchTrainer and `TuneReportCallback` forwards its reports).

At every evaluation the trial reports the objective (which drives ASHA and Optuna); the evaluations that write last/
(at the cadence of `raycse.training.checkpoints.CheckpointCadence`: checkpoints at most 5% of the trial's time, and
at the last step) hand Tune a checkpoint holding best/ and that last/, so that a trial Ray restarts after a crash, or
one a resumed search restarts, continues from its last last/ rather than from step 0. Each checkpoint Tune holds is
whole: its last/ knows the best/ beside it. Once the trial has ended the driver deletes its last/
(raycse.driver.tune.checkpoint_retention).

A trial whose completion MLflow already holds (its run FINISHED by the driver) is never trained again: a search
killed between that moment and Tune's next save of its own state would otherwise re-run it on --resume.
Such a trial replays its recorded final result instead (`replayed_result`).

A user's own loss reaches the trial's node with the job (Ray ships its file: raycse/training/ray_runtime.py); before
it trains, the process that trains checks that the module it imports there is the very file the search started with.

Light on purpose (no torch, no transformers at import): Tune's trial process only forwards reports when a warm
worker trains, and starts in a second or so instead of six CPU-seconds.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

from raycse.driver.tune.replay import TrialContext, replayed_result
from raycse.driver.tune.warm_workers import TrialJob, check_own_losses, run_job, train_on_warm_worker
from raycse.records import REPORTED_AT, TRIAL_STARTED_AT
from raycse.settings.config import TrainConfig
from raycse.settings.space import SearchSpace, TrialSpec


def trial_config(space: SearchSpace, spec: TrialSpec, output_dir: str) -> TrainConfig:
    """The trial's TrainConfig. Its best checkpoint is scored on the test tasks at the end when the space asks it
    of every trial (test_eval: all), and for the judging runs the judge stage names unless the test tasks are off
    (the answer's test table is made of them)."""
    config = space.trial_config(spec.sampled, spec.seed)
    test_eval = space.test_eval.scores_every_run or (spec.test and space.test_eval.scores_any)
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

    shared_tokens: the training data's token ids, made once by the driver (raycse.data.tokens), as a list holding
    their Ray object reference (a warm worker fetches them from the object store itself), or None.
    """
    from ray import tune

    worker_start_s = worker_start_seconds(time.time())
    tune_context = tune.get_context()
    replay = replayed_result(context, tune_context.get_trial_id())
    if replay is not None:
        tune.report(replay)
        return
    spec = TrialSpec.of(tune_config, space.base.seed)
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
            check_own_losses(space.loss_sources())
            _run_on_workers(config, space, tune_context, checkpoint)
            return

        started_at = trial_started_at(worker_start_s)

        def report(metrics: dict, checkpoint_dir: str | None) -> None:
            metrics = {**metrics, TRIAL_STARTED_AT: started_at, REPORTED_AT: time.time()}  # how many ran at once
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None)

        job = TrialJob(config=config, resume=resume, shared_tokens=shared_tokens,
                       least_interval_s=context.checkpoint_every_s, loss_sources=tuple(space.loss_sources()),
                       resume_from=checkpoint.path if resume else None)
        if context.warm_pool is not None:
            train_on_warm_worker(context.warm_pool, job, report, worker_start_s)
        else:
            run_job(job, report, worker_start_s)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)  # Tune keeps its own copy of every reported checkpoint
        if complementary_dir:
            shutil.rmtree(complementary_dir, ignore_errors=True)
        trial_ended()


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

    from raycse.driver.tune.trial_training import train_and_report

    config = TrainConfig(**{**loop_config["config"], "output_dir": tempfile.mkdtemp(prefix="raycse-worker-")})
    checkpoint = ray.train.get_checkpoint()
    resume = checkpoint is not None and _restore(checkpoint, config.output_dir)

    def report(metrics: dict, checkpoint_dir: str | None) -> None:
        # every worker reports (it is a barrier); only rank 0 has a checkpoint (best/, and last/ with every rank's
        # RNG states)
        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)

    try:
        train_and_report(config, report, resume, resume_from=checkpoint.path if resume else None)
    finally:
        shutil.rmtree(config.output_dir, ignore_errors=True)
