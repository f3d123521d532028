"""The warm workers of one search (warm_workers.py), as its stages ask for them: whether the search uses them, the
pool (started the first time it is asked for, or ahead while the set-up goes on), and its end.

The search's shared state (raycse/driver/state.py) only holds this object (`SearchState.workers`): the state knows
nothing of Ray, and the conductor ends what it started through `close()`.
"""
from __future__ import annotations

from typing import Any

from raycse.driver.state import SearchState
from raycse.driver.tune.warm_workers import first_workers, start_pool, stop_pool


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
