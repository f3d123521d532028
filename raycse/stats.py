"""The statistics behind a search's answer: means over seeds, and paired intervals against the published point.

In this field one seed moves an STS figure by up to about 2 points, so a configuration is judged by its mean
over seeds, and two configurations by the mean of their paired differences (the same seeds on both sides, so
that what a seed does to the data order and the dropout masks cancels) with a 95% Student-t interval. An
interval that covers 0 means that, at this number of seeds, the data cannot tell the two apart.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation (ddof=1; None for fewer than two values) and count."""

    mean: float
    std: float | None
    n: int


@dataclass(frozen=True)
class PairedInterval:
    """The mean of paired differences a_i - b_i with its 95% Student-t interval (None for fewer than two pairs)."""

    mean: float
    std: float | None
    low: float | None
    high: float | None
    n: int

    @property
    def covers_zero(self) -> bool:
        """True when the difference is not established: no interval, or one that contains 0."""
        return self.low is None or self.low <= 0.0 <= self.high


def summarise(values: Sequence[float]) -> Summary:
    values = [float(v) for v in values]
    if not values:
        raise ValueError("summarise: no values")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Summary(mean, std, n)


@functools.lru_cache(maxsize=1024)
def t_ppf(probability: float, df: float) -> float:
    """The Student-t quantile at `probability` with `df` degrees of freedom (cached: an answer asks for few)."""
    return float(scipy_stats.t.ppf(probability, df))


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t quantile for a mean over n values (n - 1 degrees of freedom)."""
    return t_ppf(0.5 + confidence / 2, n - 1)


def paired_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> PairedInterval:
    """mean(a - b) with its two-sided Student-t interval over the n pairs (n - 1 degrees of freedom)."""
    if len(a) != len(b):
        raise ValueError(f"paired_interval: {len(a)} values against {len(b)}")
    diffs = summarise([x - y for x, y in zip(a, b)])
    if diffs.std is None:
        return PairedInterval(diffs.mean, None, None, None, diffs.n)
    half = t_quantile(diffs.n, confidence) * diffs.std / math.sqrt(diffs.n)
    return PairedInterval(diffs.mean, diffs.std, diffs.mean - half, diffs.mean + half, diffs.n)


def pooled_std(groups: Sequence[Sequence[float]]) -> float | None:
    """The within-group standard deviation pooled over groups of two or more values: the seed noise of a search.

    sqrt( sum_g sum_i (x_gi - mean_g)^2 / sum_g (n_g - 1) ); None when no group has two values.
    """
    squares, dof = 0.0, 0
    for group in groups:
        if len(group) < 2:
            continue
        mean = sum(group) / len(group)
        squares += sum((x - mean) ** 2 for x in group)
        dof += len(group) - 1
    return math.sqrt(squares / dof) if dof else None
