"""Start one training for `raycse train`: in this process, or on W data-parallel Ray Train workers.

Records the training as one MLflow run (parameters under the papers' names, the dev curve step-indexed,
the final figures, the best checkpoint as an artifact) and prints progress. The search reuses
`torch_trainer` for its multi-worker trials.
"""
from __future__ import annotations

import sys
import tempfile
import time

from raycse.config import TrainConfig
from raycse.evaluation import RESULTS_OF_TASKS
from raycse.tracking import Tracker, training_params

# the best checkpoint's figures (the dev curve itself is logged step by step, so not again here)
FINAL_FIGURES = (*(k for k in RESULTS_OF_TASKS["all"] if k != "stsb_dev"), "best_objective", "best_step",
                 "sentences_per_s", "wall_seconds")


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


def torch_trainer(worker_loop, config: TrainConfig, cpus_per_worker: float, storage_path: str, name: str,
                  callbacks: list | None = None, resume_from_checkpoint=None, resume: bool = False):
    """Ray Train (V2) TorchTrainer running `worker_loop` on `config.workers` workers (torch.distributed set up;
    the trainer sums gradients itself, see `trainer.sum_gradients_across_workers`)."""
    import ray.train
    from ray.train.torch import TorchTrainer

    per_worker = {"CPU": cpus_per_worker}
    if config.gpus_per_worker:
        per_worker["GPU"] = config.gpus_per_worker
    return TorchTrainer(
        worker_loop,
        train_loop_config={"config": config.to_dict(), "resume": resume},
        scaling_config=ray.train.ScalingConfig(num_workers=config.workers, use_gpu=bool(config.gpus_per_worker),
                                               resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(name=name, storage_path=storage_path, callbacks=callbacks or [],
                                       failure_config=ray.train.FailureConfig(max_failures=2)),
        resume_from_checkpoint=resume_from_checkpoint,
    )


def _train_worker(loop_config: dict) -> None:
    """A `raycse train --workers W` worker: the plain trainer, progress printed by rank 0."""
    import ray.train

    from raycse.trainer import train

    config = TrainConfig(**loop_config["config"])
    rank = ray.train.get_context().get_world_rank()
    train(config, on_eval=lambda report: rank == 0 and print(eval_line(report), flush=True),
          resume=loop_config["resume"])


def eval_metrics(report) -> dict[str, float]:
    """What an evaluation logs, step-indexed: the objective, its parts, the loss and its diagnostics."""
    return {"objective": report.objective, **report.dev_scores, "train_loss": report.train_loss,
            "sentences_per_s": report.sentences_per_s, **report.loss_stats}


def run_training(config: TrainConfig, tracking_uri: str | None = None, resume: bool = False,
                 examples: list | None = None) -> dict:
    """Train (here or on Ray Train workers), record it in MLflow, return results.json's contents."""
    import json
    from pathlib import Path

    from raycse.trainer import train

    tracker = run_id = None
    if tracking_uri:
        tracker = Tracker(tracking_uri, "raycse-train")
        run_name = Path(config.output_dir).name
        run_id = (tracker.find_run("raycse.output_dir", str(Path(config.output_dir).resolve())) if resume else None)
        if run_id is None:
            run_id = tracker.start_run(run_name, tags={"raycse.loss": config.loss,
                                                       "raycse.output_dir": str(Path(config.output_dir).resolve())})
        tracker.client.update_run(run_id, status="RUNNING")
        tracker.log_params(run_id, training_params(config.to_dict()))

    def on_eval(report) -> None:
        if sys.stderr.isatty():
            print(file=sys.stderr)
        print(eval_line(report), flush=True)
        if tracker:
            tracker.log_metrics(run_id, eval_metrics(report), step=report.step)

    started = time.perf_counter()
    try:
        if config.workers == 1:
            results = train(config, on_eval=on_eval, on_step=_progress, resume=resume, examples=examples)
        else:
            from raycse.ray_runtime import start_ray

            start_ray()
            with tempfile.TemporaryDirectory(prefix="raycse-") as ray_storage:  # Ray Train's own run state
                torch_trainer(_train_worker, config, cpus_per_worker=1, storage_path=ray_storage, name="train",
                              resume=resume).fit()
            results = json.loads((Path(config.output_dir) / "results.json").read_text())
            if tracker:
                for point in results["dev_curve"]:
                    tracker.log_metrics(run_id, {k: v for k, v in point.items() if k != "step"}, step=point["step"])
    except BaseException as err:
        if tracker:
            tracker.set_tags(run_id, {"raycse.error": f"{type(err).__name__}: {err}"})
            tracker.end_run(run_id, "KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        raise
    results.setdefault("wall_seconds", time.perf_counter() - started)
    if tracker:
        tracker.log_metrics(run_id, {k: results[k] for k in FINAL_FIGURES if k in results})
        tracker.log_artifacts(run_id, str(Path(config.output_dir) / "best"), "best_checkpoint")
        tracker.log_artifact(run_id, str(Path(config.output_dir) / "results.json"))
        tracker.end_run(run_id, "FINISHED")
    return results
