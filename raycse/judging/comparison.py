"""The judgment of a comparison of losses (`raycse compare`): every loss's tuned winner, and each loss's published
point, judged together on the same judging seeds, with the family-wise error controlled over every comparison
made (pure: no Ray, MLflow or I/O; the statistics are vectorised so that benchmarks/comparison_sim.py runs these
very functions on thousands of simulated comparisons at once).

The family. With L losses the comparison makes C(L, 2) comparisons between the tuned winners, plus one per loss
between its tuned winner and its own published point (the "was the baseline under-tuned?" question). All of them
are one family: the chance that any "better" or "worse" the comparison prints is wrong is held at 5%.

Each comparison is a paired t test on the judged figure (the seven-task STS test average: data that chose
nothing), paired by judging seed. A failed or diverged run counts against its own side's claim, as in a search's
judgment (raycse/judging/judgment.py): for "A better than B" A's failed seeds take the worst value observed in the
pair and the seeds B lost are left out; "A worse than B" is judged on the mirror image. The two one-sided
p-values make one two-sided p-value, p = min(1, 2 min(p_up, p_down)), which is the ordinary two-sided paired t
test when nothing failed. A side whose failure rate exceeds its rival's by more than chance (one-sided Fisher exact
test at 2.5%) cannot be called better.

Verdicts: Holm's step-down procedure over the family at alpha = 5%. Holm controls the family-wise error rate under
any dependence between the tests (and the tests of a comparison are dependent: they share arms and seeds), it
rejects everything Bonferroni rejects and more, and unlike Tukey-type intervals it needs no equal variances or
balanced design. A rejected comparison reads "better" or "worse" by the sign of its difference; the others read
"not distinguishable". Intervals: Bonferroni-adjusted paired t intervals, mean +- t_{n-1, 1 - alpha / (2m)} sd /
sqrt(n), which hold simultaneously for all m comparisons at 95%. They are Holm's first step: an interval that
excludes 0 always comes with a Holm verdict; Holm may also decide a comparison whose Bonferroni interval still
touches 0 (its later steps use alpha / (m - i + 1)), so the intervals are the conservative side of the verdicts.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy import stats as scipy_stats

from raycse.judging import judgment

ALPHA = 0.05  # family-wise, over every comparison of a comparison
BETTER, WORSE, TIED = "better", "worse", "not distinguishable"
TUNED, PUBLISHED = "tuned", "published"


# ------------------------------------------------------------------------------------------ vectorised statistics
def paired_t(diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """Over the last axis of `diffs` (n paired differences): mean, sample sd, n, and the one-sided p-values of the
    paired t test for "mean > 0" (p_up) and "mean < 0" (p_down). n < 2 gives p = 1 both ways (no test); a zero sd
    gives p = 0 in the direction of a non-zero mean."""
    diffs = np.asarray(diffs, dtype=float)
    n = diffs.shape[-1]
    mean = diffs.mean(axis=-1) if n else np.zeros(diffs.shape[:-1])
    if n < 2:
        ones = np.ones_like(mean)
        return mean, np.full_like(mean, np.nan), n, ones, ones
    sd = diffs.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, mean / (sd / math.sqrt(n)), np.sign(mean) * np.inf)
    t = np.nan_to_num(t, nan=0.0)
    return mean, sd, n, scipy_stats.t.sf(t, n - 1), scipy_stats.t.cdf(t, n - 1)


def two_sided(p_up: np.ndarray, p_down: np.ndarray) -> np.ndarray:
    """The two-sided p-value of a pair of one-sided ones: min(1, 2 min(p_up, p_down))."""
    return np.minimum(1.0, 2.0 * np.minimum(p_up, p_down))


def holm_adjusted(pvalues: np.ndarray) -> np.ndarray:
    """Holm's adjusted p-values over the last axis (the family): with p_(1) <= ... <= p_(m),
    p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); a comparison is decided at level alpha iff p~ <= alpha."""
    p = np.asarray(pvalues, dtype=float)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * (m - np.arange(m))
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(ranked, axis=-1))
    adjusted = np.empty_like(adjusted_sorted)
    np.put_along_axis(adjusted, order, adjusted_sorted, axis=-1)
    return adjusted


def holm_decided(pvalues: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Which comparisons Holm's step-down procedure decides at family-wise level alpha (over the last axis)."""
    return holm_adjusted(pvalues) <= alpha


def bonferroni_half_width(sd: np.ndarray, n: int, m: int, alpha: float = ALPHA) -> np.ndarray:
    """The half width of a Bonferroni-adjusted two-sided paired t interval: t_{n-1, 1 - alpha/(2m)} sd / sqrt(n)
    (NaN for n < 2)."""
    if n < 2:
        return np.full_like(np.asarray(sd, dtype=float), np.nan)
    return scipy_stats.t.isf(alpha / (2 * m), n - 1) * np.asarray(sd, dtype=float) / math.sqrt(n)


def adjusted_confidence(m: int, alpha: float = ALPHA) -> float:
    """Each interval's own confidence level (1 - alpha / m) when m intervals hold together at 1 - alpha."""
    return 1.0 - alpha / m


# ------------------------------------------------------------------------------------------ the family
@dataclass(frozen=True)
class Arm:
    """One side of the comparison: a loss's tuned winner or its published point, with the judged figure of each
    judging seed (None: the run failed or diverged; a seed absent: not run)."""

    loss: str  # the loss's label in the comparison (its space file's name)
    role: str  # TUNED | PUBLISHED
    values: Mapping[int, float | None]

    @property
    def name(self) -> str:
        return self.loss if self.role == TUNED else f"{self.loss} (published)"


@dataclass(frozen=True)
class PairJudgment:
    """a - b on the judged figure, paired by seed: the difference, its family-wise adjusted interval, n, the raw
    and Holm-adjusted p-values and the verdict for a (better, worse, not distinguishable)."""

    a: str
    b: str
    kind: str  # "between losses" | "against its published point"
    mean: float | None
    low: float | None
    high: float | None
    n: int
    df: int | None
    p: float
    p_holm: float
    verdict: str
    note: str = ""

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def family(arms: list[Arm]) -> list[tuple[Arm, Arm, str]]:
    """The comparisons of a comparison: every pair of tuned winners (in the order given), then each tuned winner
    against its own published point."""
    tuned = [arm for arm in arms if arm.role == TUNED]
    published = {arm.loss: arm for arm in arms if arm.role == PUBLISHED}
    pairs = [(a, b, "between losses") for a, b in combinations(tuned, 2)]
    pairs += [(arm, published[arm.loss], "against its published point") for arm in tuned if arm.loss in published]
    return pairs


def _rate(values: Mapping[int, float | None]) -> judgment.FailureRate:
    return judgment.wilson(sum(1 for v in values.values() if v is None), len(values))


def judge_family(arms: list[Arm], alpha: float = ALPHA) -> list[PairJudgment]:
    """Every comparison of the family, judged together: Holm's verdicts, Bonferroni-adjusted intervals."""
    pairs = family(arms)
    m = len(pairs)
    if m == 0:
        return []
    tests = []
    for a, b, _ in pairs:
        up = np.array(judgment.paired_with_failures(dict(a.values), dict(b.values), against="a"))
        down = np.array(judgment.paired_with_failures(dict(a.values), dict(b.values), against="b"))
        mean_up, sd_up, n_up, p_up, _ = paired_t(up)
        mean_down, sd_down, n_down, _, p_down = paired_t(down)
        tests.append((up, down, float(p_up), float(p_down), mean_up, sd_up, n_up, mean_down, sd_down, n_down))
    p = two_sided(np.array([t[2] for t in tests]), np.array([t[3] for t in tests]))
    adjusted = holm_adjusted(p)
    judged = []
    for (a, b, kind), test, p_i, holm_i in zip(pairs, tests, p, adjusted):
        up, down, p_up, p_down, mean_up, sd_up, n_up, mean_down, sd_down, n_down = test
        both = [a.values[s] - b.values[s] for s in sorted(set(a.values) & set(b.values))
                if a.values[s] is not None and b.values[s] is not None]
        mean = float(np.mean(both)) if both else (float(mean_up) if n_up else None)
        # each end from the claim it bounds: the low end with a's failures against a, the high end with b's against b
        low = _finite(mean_up - bonferroni_half_width(sd_up, n_up, m, alpha)) if n_up >= 2 else None
        high = _finite(mean_down + bonferroni_half_width(sd_down, n_down, m, alpha)) if n_down >= 2 else None
        n = len(set(a.values) & set(b.values))
        verdict, note = TIED, ""
        if holm_i <= alpha:
            verdict = BETTER if p_up <= p_down else WORSE
            loser_claims = (a, b) if verdict == BETTER else (b, a)
            if judgment.fails_more(_rate(loser_claims[0].values), _rate(loser_claims[1].values)):
                verdict, note = TIED, f"{loser_claims[0].name} fails more often than {loser_claims[1].name}"
        if n < 2:
            note = note or "fewer than two paired seeds: no interval"
        judged.append(PairJudgment(a=a.name, b=b.name, kind=kind, mean=mean, low=low, high=high, n=n,
                                   df=n - 1 if n >= 2 else None, p=float(p_i), p_holm=float(holm_i), verdict=verdict,
                                   note=note))
    return judged


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
