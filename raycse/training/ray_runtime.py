"""Ray, the one way raycse uses it: join the cluster named by RAY_ADDRESS, else start a local one; and the Ray Train
TorchTrainer that a multi-worker training (`raycse train --workers W`, a search trial of W workers) runs on."""
from __future__ import annotations

import os


def start_ray() -> bool:
    """Start (or join) Ray unless it already runs; True if this call started it.

    The workers inherit two settings: tokenizers' own thread pool off (a DataLoader worker forked after the parent
    used it would warn and disable it anyway), and Hugging Face's offline mode as the driver has it (default
    online: users have networks; tests and CI set HF_HUB_OFFLINE=1).
    """
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false",
                                       "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0")}})
    return True


def torch_trainer(worker_loop, config, cpus_per_worker: float, storage_path: str, name: str,
                  callbacks: list | None = None, resume_from_checkpoint=None, resume: bool = False):
    """Ray Train (V2) TorchTrainer running `worker_loop` on `config.workers` workers (a TrainConfig; torch.distributed
    set up; the trainer sums gradients itself, see `step_runner.sum_gradients_across_workers`)."""
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
