"""How long the search driver's own calls take, per kind of call, in this process: MLflow's calls (`mlflow.<method>`)
and the sampler's asks, reports and tells (`searcher.<call>`), with a count, the seconds in all and percentiles.

A search of thousands of trials makes these calls millions of times, so each kind keeps a histogram of fixed size
(log-spaced bins, 20 a decade from a microsecond to 1,000 s: a percentile is exact to about 6%) instead of every
duration: recording one is a few integer operations, and memory does not grow with the search.
`benchmarks/scale.py` reads them (`LATENCIES.snapshot()`) after a search it ran in its own process.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time

BINS_PER_DECADE = 20
LOWEST_S = 1e-6
DECADES = 9  # 1 microsecond to 1,000 seconds; longer calls fall in the last bin, shorter in the first
BINS = BINS_PER_DECADE * DECADES


class Latency:
    """The durations of one kind of call: count, total, maximum and a log-spaced histogram."""

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0
        self.max_s = 0.0
        self.bins = [0] * BINS

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        self.max_s = max(self.max_s, seconds)
        index = int(math.log10(max(seconds, LOWEST_S) / LOWEST_S) * BINS_PER_DECADE)
        self.bins[min(max(index, 0), BINS - 1)] += 1

    def quantile(self, q: float) -> float:
        """The q-quantile (0 < q <= 1), as the geometric middle of its bin; 0.0 when nothing was recorded."""
        if not self.count:
            return 0.0
        rank, seen = q * self.count, 0
        for index, n in enumerate(self.bins):
            seen += n
            if seen >= rank and n:
                return min(LOWEST_S * 10 ** ((index + 0.5) / BINS_PER_DECADE), self.max_s)
        return self.max_s

    def summary(self) -> dict[str, float]:
        mean = self.total_s / self.count if self.count else 0.0
        return {"count": self.count, "total_s": self.total_s, "mean_s": mean, "median_s": self.quantile(0.5),
                "p99_s": self.quantile(0.99), "max_s": self.max_s}


class Latencies:
    """Every kind of call's `Latency`, by name."""

    def __init__(self) -> None:
        self.kinds: dict[str, Latency] = {}
        self.lock = threading.Lock()  # the driver's MLflow writes are made on a thread of their own

    def record(self, kind: str, seconds: float) -> None:
        with self.lock:
            latency = self.kinds.get(kind)
            if latency is None:
                latency = self.kinds[kind] = Latency()
            latency.add(seconds)

    @contextlib.contextmanager
    def timed(self, kind: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.record(kind, time.perf_counter() - started)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """{kind: count, total_s, mean_s, median_s, p99_s, max_s}."""
        with self.lock:
            return {kind: latency.summary() for kind, latency in sorted(self.kinds.items())}

    def reset(self) -> None:
        self.kinds.clear()


LATENCIES = Latencies()  # this process's
