"""Models scored outside a training, as Ray tasks with a trial's resources: the untouched model (the baseline every
table and verdict carries) and saved checkpoints (the winner's test tasks). Where the search's trials train on warm
workers, so does the scoring (`scoring_task`)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from raycse.records import FINAL_KEYS, TEST_KEYS
from raycse.settings.config import TrainConfig


def scoring_task(state, function: Callable) -> Callable[..., Any]:
    """`function` as a Ray task with a trial's resources: `scoring_task(state, f)(*args)` is the Ray object reference
    of `f(*args)`. It runs on an idle warm worker of the search (raycse.driver.tune.warm_workers) when the search's
    trials train on them, else in a Ray worker process of its own.

    Args:
        state: the search's SearchState (its plan's resources; its warm pool).
        function: a module-level function of this module.

    Example:
        >>> figures = ray.get(scoring_task(state, score_checkpoint)("/runs/best", "avg"))  # doctest: +SKIP
    """
    import ray

    resources = state.plan.resources
    options = {"num_cpus": resources.cpus_per_worker, "num_gpus": resources.gpus_per_worker}
    if not state.uses_warm_workers():
        return ray.remote(function).options(**options).remote
    from raycse.driver.tune.warm_workers import call_on_warm_worker

    task = ray.remote(call_on_warm_worker).options(**options)
    pool, prestarted = state.warm_pool(), state.prestarted_workers
    return lambda *args: task.remote(pool, prestarted, function, *args)


def score_untouched(base: TrainConfig, poolers: list[str], test_pooler: str | None) -> dict:
    """The starting model, before any step: its objective with each evaluation pooler, and (unless test_pooler is
    None) its seven test tasks with that pooler: {"by_pooler": {pooler: scores}, "test": {task: figure},
    "process_id": the process that scored them}."""
    from raycse.encoder.model import Encoder, encode_fn, pick_device
    from raycse.evaluation.sts import build_objective, evaluate_encoder

    objective = build_objective(base.objective, base.objective_columns)
    encoder = Encoder.from_pretrained(base.model, trust_remote_code=base.trust_remote_code).to(pick_device())
    by_pooler = {pooler: objective(encode_fn(encoder, pooler)) for pooler in poolers}
    test = {}
    if test_pooler is not None:
        figures = evaluate_encoder(encode_fn(encoder, test_pooler), tasks="sts")
        test = {k: figures[k] for k in TEST_KEYS}
    return {"by_pooler": by_pooler, "test": test, "process_id": os.getpid()}


def score_checkpoint(path: str, eval_pooler: str) -> dict[str, float]:
    """A saved best checkpoint's seven test tasks (and SICK-R dev, alignment, uniformity)."""
    from raycse.encoder.model import Encoder, encode_fn, pick_device
    from raycse.evaluation.sts import evaluate_encoder

    with local_copy(path) as local:
        encoder = Encoder.from_pretrained(local, pooler=eval_pooler).to(pick_device())
        results = evaluate_encoder(encode_fn(encoder, eval_pooler), tasks="all")
    return {k: results[k] for k in FINAL_KEYS if k in results}


@contextlib.contextmanager
def local_copy(path: str):
    """A local directory with the contents of `path` (itself when local; downloaded from s3:// and the like)."""
    if "://" not in path:
        yield path
        return
    from ray.train import Checkpoint

    with Checkpoint(path).as_directory() as local:
        yield local
