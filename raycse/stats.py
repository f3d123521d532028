"""The statistics behind a search's answer: means over seeds with their Student-t intervals, the pooled seed noise,
and the rules for printing them (raycse/judging/decision.py uses them).

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

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation (ddof=1; None for fewer than two values) and count."""

    mean: float
    std: float | None
    n: int


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
    """The Student-t quantile at `probability` with `df` degrees of freedom (cached: an answer asks for few). SciPy's
    statistics are imported here, at the first quantile (a second on two cores), not by every command that imports
    this leaf (a dry run)."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(probability, df))


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t quantile for a mean over n values (n - 1 degrees of freedom)."""
    return t_ppf(0.5 + confidence / 2, n - 1)


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


@dataclass(frozen=True)
class Interval:
    """A mean with its sample std and its two-sided 95% Student-t interval (df = n - 1); no interval for n < 2."""

    mean: float
    std: float | None
    n: int
    df: int | None
    low: float | None
    high: float | None

    @property
    def covers_zero(self) -> bool:
        return self.low is None or self.low <= 0.0 <= self.high


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of `values` with its two-sided Student-t interval (for paired differences a_i - b_i, pass the
    differences: what a seed does to both sides cancels)."""
    summary = summarise(values)
    if summary.std is None:
        return Interval(summary.mean, None, summary.n, None, None, None)
    half = t_quantile(summary.n, confidence) * summary.std / math.sqrt(summary.n)
    return Interval(summary.mean, summary.std, summary.n, summary.n - 1, summary.mean - half, summary.mean + half)


# ------------------------------------------------------------------------------------------ printing
def one_significant(value: float) -> str:
    """`value` to one significant digit: 0.0634 -> '0.06', 0.096 -> '0.1', 1.37 -> '1', 12.3 -> '10'."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    rounded = round(value, -math.floor(math.log10(abs(value))))
    return f"{rounded:.{max(0, -math.floor(math.log10(abs(rounded))))}f}"


def format_std(std: float | None, n: int) -> str:
    """A std for print: one significant digit when it rests on fewer than 3 values (its own error is about as
    large as it is), else two decimals; 'n/a' when there is none."""
    if std is None:
        return "n/a"
    return one_significant(std) if n < 3 else f"{std:.2f}"


def format_interval(interval: Interval, signed: bool = True) -> str:
    """`+0.42, 95% interval [+0.10, +0.74], n = 18, df = 17`; `+0.42, n = 1, no interval`."""
    number = "{:+.2f}" if signed else "{:.2f}"
    if interval.low is None:
        return f"{number.format(interval.mean)}, n = {interval.n}, no interval"
    return (f"{number.format(interval.mean)}, 95% interval [{number.format(interval.low)}, "
            f"{number.format(interval.high)}], n = {interval.n}, df = {interval.df}")
