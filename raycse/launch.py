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
FINAL_FIGURES = (*(k for k in RESULTS_OF_TASKS["all"] if k != "stsb_dev"), "best_stsb_dev", "best_step",
                 "sentences_per_s", "wall_seconds")


def eval_line(report) -> str:
    return (f"step {report.step:>6}/{report.total_steps}  loss {report.train_loss:8.4f}  "
            f"STS-B dev {report.stsb_dev:6.2f}  (best {report.best_stsb_dev:6.2f} @ {report.best_step})  "
            f"{report.sentences_per_s:8.1f} sentences/s")


def _progress(step: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        done = int(width * step / total)
        print(f"\r[{'#' * done}{'.' * (width - done)}] step {step}/{total}", end="", file=sys.stderr, flush=True)


def torch_trainer(worker_loop, config: TrainConfig, cpus_per_worker: float, storage_path: str, name: str,
                  callbacks: list | None = None):
    """Ray Train (V2) TorchTrainer running `worker_loop` on `config.workers` workers with DDP-style all-reduce."""
    import ray.train
    from ray.train.torch import TorchTrainer

    per_worker = {"CPU": cpus_per_worker}
    if config.gpus_per_worker:
        per_worker["GPU"] = config.gpus_per_worker
    return TorchTrainer(
        worker_loop,
        train_loop_config={"config": config.to_dict()},
        scaling_config=ray.train.ScalingConfig(num_workers=config.workers, use_gpu=bool(config.gpus_per_worker),
                                               resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(name=name, storage_path=storage_path, callbacks=callbacks or [],
                                       failure_config=ray.train.FailureConfig(max_failures=2)),
    )


def _train_worker(loop_config: dict) -> None:
    """A `raycse train --workers W` worker: the plain trainer, progress printed by rank 0."""
    from raycse.trainer import train

    import ray.train

    config = TrainConfig(**loop_config["config"])
    rank = ray.train.get_context().get_world_rank()
    train(config, on_eval=lambda report: rank == 0 and print(eval_line(report), flush=True))


def run_training(config: TrainConfig, tracking_uri: str | None = None) -> dict:
    """Train (here or on Ray Train workers), record it in MLflow, return results.json's contents."""
    import json
    from pathlib import Path

    from raycse.trainer import train

    tracker = run_id = None
    if tracking_uri:
        tracker = Tracker(tracking_uri, "raycse-train")
        run_id = tracker.start_run(Path(config.output_dir).name, tags={"raycse.loss": config.loss})
        tracker.log_params(run_id, training_params(config.to_dict()))

    def on_eval(report) -> None:
        if sys.stderr.isatty():
            print(file=sys.stderr)
        print(eval_line(report), flush=True)
        if tracker:
            tracker.log_metrics(run_id, {"stsb_dev": report.stsb_dev, "train_loss": report.train_loss,
                                         "sentences_per_s": report.sentences_per_s}, step=report.step)

    started = time.perf_counter()
    try:
        if config.workers == 1:
            results = train(config, on_eval=on_eval, on_step=_progress)
        else:
            import ray

            if not ray.is_initialized():
                ray.init(include_dashboard=False)
            with tempfile.TemporaryDirectory(prefix="raycse-") as ray_storage:  # Ray Train's own run state
                torch_trainer(_train_worker, config, cpus_per_worker=1, storage_path=ray_storage, name="train").fit()
            results = json.loads((Path(config.output_dir) / "results.json").read_text())
            if tracker:
                for point in results["dev_curve"]:
                    tracker.log_metrics(run_id, {"stsb_dev": point["stsb_dev"], "train_loss": point["train_loss"]},
                                        step=point["step"])
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
