"""Start one training for `raycse train`: in this process, or on W data-parallel Ray Train workers.

Records the training as one MLflow run (parameters under the papers' names, the dev curve step-indexed,
the final figures, the best checkpoint as an artifact) and prints progress.
"""
from __future__ import annotations

import sys
import tempfile
import time

from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    ERROR_TAG,
    FINAL_KEYS,
    LOSS_TAG,
    OBJECTIVE,
    OUTPUT_DIR_TAG,
    SENTENCES_PER_S,
    TRAIN_EXPERIMENT,
    TRAIN_LOSS,
    loss_stat,
)
from raycse.settings.config import TrainConfig
from raycse.tracking.tracker import Tracker, training_params

# the best checkpoint's figures (the dev curve itself is logged step by step, so not again here)
FINAL_FIGURES = (*FINAL_KEYS, BEST_OBJECTIVE, BEST_STEP, SENTENCES_PER_S, "wall_seconds")


def eval_line(report) -> str:
    parts = "".join(f"  {name} {value:6.2f}" for name, value in report.dev_scores.items() if len(report.dev_scores) > 1)
    stats = "".join(f"  {name} {value:.3g}" for name, value in report.loss_stats.items())
    return (f"step {report.step:>6}/{report.total_steps}  loss {report.train_loss:8.4f}  "
            f"objective {report.objective:6.2f}{parts}  (best {report.best_objective:6.2f} @ {report.best_step})"
            f"{stats}  {report.sentences_per_s:8.1f} sentences/s")


def _progress(step: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        done = int(width * step / total)
        print(f"\r[{'#' * done}{'.' * (width - done)}] step {step}/{total}", end="", file=sys.stderr, flush=True)


def _train_worker(loop_config: dict) -> None:
    """A `raycse train --workers W` worker: the plain trainer, progress printed by rank 0."""
    import ray.train

    from raycse.training.trainer import train

    config = TrainConfig(**loop_config["config"])
    rank = ray.train.get_context().get_world_rank()
    train(config, on_eval=lambda report: rank == 0 and print(eval_line(report), flush=True),
          resume=loop_config["resume"])


def logged_evaluation(report) -> dict[str, float]:
    """What an evaluation logs, step-indexed: the objective, its parts, the loss and its diagnostics."""
    return {OBJECTIVE: report.objective, **report.dev_scores, TRAIN_LOSS: report.train_loss,
            SENTENCES_PER_S: report.sentences_per_s,
            **{loss_stat(name): value for name, value in report.loss_stats.items()}}


def run_training(config: TrainConfig, tracking_uri: str | None = None, resume: bool = False,
                 examples: list | None = None) -> dict:
    """Train (here or on Ray Train workers), record it in MLflow, return results.json's contents."""
    import json
    from pathlib import Path

    from raycse.training.trainer import train

    tracker = run_id = None
    if tracking_uri:
        tracker = Tracker(tracking_uri, TRAIN_EXPERIMENT)
        run_name = Path(config.output_dir).name
        output_dir = str(Path(config.output_dir).resolve())
        run_id = tracker.find_run(OUTPUT_DIR_TAG, output_dir) if resume else None
        if run_id is None:
            run_id = tracker.start_run(run_name, tags={LOSS_TAG: config.loss, OUTPUT_DIR_TAG: output_dir})
        tracker.reopen_run(run_id)
        tracker.log_params(run_id, training_params(config.to_dict()))

    def on_eval(report) -> None:
        if sys.stderr.isatty():
            print(file=sys.stderr)
        print(eval_line(report), flush=True)
        if tracker:
            tracker.log_metrics(run_id, logged_evaluation(report), step=report.step)

    started = time.perf_counter()
    try:
        if config.workers == 1:
            results = train(config, on_eval=on_eval, on_step=_progress, resume=resume, examples=examples)
        else:
            from raycse.training.ray_runtime import fit_stopping_in_order, start_ray, torch_trainer

            start_ray()
            with tempfile.TemporaryDirectory(prefix="raycse-") as ray_storage:  # Ray Train's run state
                fit_stopping_in_order(torch_trainer(_train_worker, config, cpus_per_worker=1, storage_path=ray_storage,
                                                    name="train", resume=resume))
            results = json.loads((Path(config.output_dir) / "results.json").read_text())
            if tracker:
                for point in results["dev_curve"]:
                    tracker.log_metrics(run_id, {k: v for k, v in point.items() if k != "step"}, step=point["step"])
    except BaseException as err:
        if tracker:
            tracker.set_tags(run_id, {ERROR_TAG: f"{type(err).__name__}: {err}"})
            tracker.end_run(run_id, "KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        raise
    results.setdefault("wall_seconds", time.perf_counter() - started)
    if tracker:
        tracker.log_metrics(run_id, {k: results[k] for k in FINAL_FIGURES if k in results})
        tracker.log_artifacts(run_id, str(Path(config.output_dir) / "best"), "best_checkpoint")
        tracker.log_artifact(run_id, str(Path(config.output_dir) / "results.json"))
        tracker.end_run(run_id, "FINISHED")
    return results
