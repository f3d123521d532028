"""One search's warm workers (warm_workers.py: the processes that train): the pool that keeps them (`WarmPool`, a Ray
actor on the head node that the driver starts and owns), and the driver's handle on it as the stages ask for it
(`SearchWorkers`): whether the search uses warm workers, the pool started the first time it is asked for or ahead
while the set-up goes on, and its end.

The search's shared state (raycse/driver/state.py) only holds this object (`SearchState.workers`): the state knows
nothing of Ray, and the conductor ends what it started through `close()`.
"""
from __future__ import annotations

import math
import os
from typing import Any

from raycse.driver.state import SearchState
from raycse.driver.tune.warm_workers import WORKER_THREADS, WarmWorker

HEAD_NODE = "node:__internal_head__"  # the resource Ray gives the head node alone: the pool's place


class WarmPool:
    """The search's warm workers, idle ones by (node, GPU ids). Started by the driver (`start_pool`), which owns it:
    the workers it starts are its own, and end with it."""

    def __init__(self):
        self._idle: dict[tuple, list] = {}
        self._workers: list = []  # every live worker, busy or idle: Ray ends an actor its owner holds no handle of

    def acquire(self, node: str, devices: str | None):
        """An idle worker on `node` for the GPU ids `devices` (None: no GPU), or a new one there."""
        key = (node, devices)
        if self._idle.get(key):
            return self._idle[key].pop()
        return self._new(key)

    def prestart(self, keys: list[tuple]) -> None:
        """Start idle workers for these (node, GPU ids) now (their imports overlap the search's set-up); returns
        once they are in the pool (not once they have started)."""
        for key in keys:
            self._idle.setdefault(key, []).append(self._new(key))

    def _new(self, key: tuple):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node, devices = key
        worker = ray.remote(WarmWorker).options(
            num_cpus=0, max_concurrency=WORKER_THREADS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        ).remote(ray.get_runtime_context().current_actor, key, devices)
        self._workers.append(worker)
        return worker

    def release(self, key: tuple, worker) -> None:
        self._idle.setdefault(key, []).append(worker)

    def forget(self, worker) -> None:
        """Drop a worker that failed (its process was killed, its node lost)."""
        for workers in (*self._idle.values(), self._workers):
            if worker in workers:
                workers.remove(worker)


def start_pool():
    """The search's pool of warm workers: a Ray actor owned by the caller, on the head node (which a search does not
    outlive; a worker node may be drained or lost)."""
    import ray

    return ray.remote(WarmPool).options(num_cpus=0, resources={HEAD_NODE: 0.001}).remote()


def first_workers(gpus_per_trial: float, slots: int) -> list[tuple]:
    """The (node, GPU ids) that the first `slots` trials of a search on this one machine will ask for: the workers
    worth starting before they do. Ray hands a trial with a share of a GPU one GPU id, filling GPUs in order.
    None on a cluster of several nodes (where Tune places the trials is not known ahead) and for trials of more than
    one GPU: their workers start with their first trials.

    Example:
        >>> first_workers(0.25, 2)  # on one machine with one GPU  # doctest: +SKIP
        [('<node id>', '0'), ('<node id>', '0')]
    """
    import ray

    if gpus_per_trial > 1 or sum(node["Alive"] for node in ray.nodes()) != 1:
        return []
    node = ray.get_runtime_context().get_node_id()
    if not gpus_per_trial:
        return [(node, None)] * slots
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # the local Ray this driver started sees these GPUs
    gpu_ids = visible.split(",") if visible else [str(i) for i in range(int(ray.cluster_resources().get("GPU", 0)))]
    per_gpu = max(1, math.floor(1 / gpus_per_trial + 1e-9))
    return [(node, gpu_ids[(i // per_gpu) % len(gpu_ids)]) for i in range(slots)] if gpu_ids else []


def stop_pool(pool) -> None:
    """End the pool and its workers (their trials have ended)."""
    import ray

    try:
        ray.kill(pool)
    except Exception:  # noqa: BLE001 - Ray already shut down: the pool went with it
        pass


class SearchWorkers:
    """The pool of one search's warm workers, started when first asked for; `close` ends it.

    Example:
        >>> workers = SearchWorkers(enabled=True)  # doctest: +SKIP
        >>> workers.start_ahead(0.25, slots=2)      # the first trials' workers import while the set-up goes on
        >>> workers.close()
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.prestarted: Any = None  # the Ray object reference of the pool's `prestart` call, or None
        self._pool: Any = None

    def pool(self):
        """The search's `WarmPool` actor, started the first time it is asked for."""
        if self._pool is None:
            self._pool = start_pool()
        return self._pool

    def start_ahead(self, gpus_per_trial: float, slots: int) -> None:
        """Start the pool and the workers the first `slots` trials will train in (where the search uses them)."""
        if self.enabled:
            keys = first_workers(gpus_per_trial, slots)
            if keys:
                self.prestarted = self.pool().prestart.remote(keys)

    def close(self) -> None:
        """End the pool and its workers (the search's trials have ended)."""
        if self._pool is not None:
            stop_pool(self._pool)
            self._pool = None


def uses_warm_workers(state: SearchState) -> bool:
    """Whether the search's trials, and its scoring outside them, run on warm workers: unless turned off, or the
    trials are a stand-in, or each trains on several Ray Train workers."""
    return (state.options.warm_workers and state.options.benchmark.trial_stand_in is None
            and state.space.resources.workers == 1)


def search_workers(state: SearchState) -> SearchWorkers:
    """The search's warm workers (`state.workers`), made the first time a stage asks for them."""
    if state.workers is None:
        state.workers = SearchWorkers(uses_warm_workers(state))
    return state.workers
