"""Models scored outside a training, as Ray tasks with a trial's resources: the untouched model (the baseline every
table and verdict carries) and saved checkpoints (the winner's test tasks). Where the search's trials train on warm
workers, so does the scoring (`scoring_task`)."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from raycse.driver.tune.search_workers import search_workers
from raycse.driver.tune.warm_workers import ready_worker, trial_threads
from raycse.records import FINAL_KEYS, TEST_KEYS
from raycse.settings.config import TrainConfig

HOLDING_POLL_S = 0.05  # how often a scoring task looks whether its warm worker is done (`_holding`)


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

    resources = state.space.resources
    options = {"num_cpus": resources.cpus_per_worker, "num_gpus": resources.gpus_per_worker}
    workers = search_workers(state)
    if not workers.enabled:
        return ray.remote(function).options(**options).remote
    task = ray.remote(call_on_warm_worker).options(**options)
    pool, prestarted = workers.pool(), workers.prestarted
    return lambda *args: task.remote(pool, prestarted, function, *args)


def call_on_warm_worker(pool, prestarted, function: Callable, *args) -> Any:
    """`function(*args)`, run on an idle warm worker of `pool` on this node and GPU; what it returns.

    Called as a Ray task with a trial's resources (`scoring_task`), which it holds while the worker computes: the
    worker has torch and the model code imported already, and goes back to the pool for the trials after it.

    Args:
        pool: the search's `WarmPool` actor.
        prestarted: the pool's `prestart` call, or None: a Ray object reference passed as an argument, which Ray
            resolves before this task runs, so that the workers started ahead are in the pool when it asks for one.
        function: a module-level function (pickled by reference) and its `args`.

    Example:
        >>> ray.remote(call_on_warm_worker).options(num_cpus=1).remote(pool, None, score_untouched, base, ["cls"], None)
        ... # doctest: +SKIP
    """
    import ray

    context = ray.get_runtime_context()
    worker = ready_worker(pool, context, get=_holding)
    try:
        return _holding(worker.call.remote(function, args, trial_threads(context)))
    except ray.exceptions.RayActorError:
        pool.forget.remote(worker)
        raise


def _holding(reference) -> Any:
    """`ray.get(reference)` for a Ray task that keeps its CPUs meanwhile: a task blocked in `ray.get` lends them back
    to Ray, which would start another trial beside the computation it waits for (an actor keeps them)."""
    import ray

    while not ray.wait([reference], timeout=0)[0]:
        time.sleep(HOLDING_POLL_S)
    return ray.get(reference)


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
