"""How a judging block becomes a judgment: which figure judges, how a failed seed counts, and where the interim
looks stop (pure: no Ray, MLflow or I/O; raycse/judging/decision.py calls it).

Judged figure. A figure that chose never judges. The search's ranking, each run's best-checkpoint pick and the
choosing block all read the objective's dev pairs, so a configuration that happens to suit those particular pairs
is selected for it and would be credited with it again if the same pairs judged. The judged figure is therefore
one that took part in no choice: the seven-task test average ("test", the default for the STS-B dev objective), or,
for an objective whose pairs are split, the held-out part ("split": `SeedScore.held_out`). The dev figure stays
visible, labelled as the data that chose.

Failures. A judging seed whose run diverged or failed counts against its configuration in the judgment of its
configuration's claim (worst-value imputation): for "beats" (the winner's claim) the winner's failed seeds take the
worst value observed on that figure in the judging block, over both sides, and the seeds the published point lost are
left out (its failure is no evidence that the winner is better); "falls below" is judged on the mirror. So a failure
never helps the other side to a claim, and a configuration that fails cannot claim on the seeds it survived.
Imputation alone is mild when the survivors are far ahead, so a second rule blocks a claim: a configuration whose
failure rate exceeds its rival's by more than chance (one-sided Fisher exact test at 2.5%; the untouched model
counts as never failing) cannot beat it, whatever its surviving seeds show. A seed not run (cancelled by a stopping
look, or not reached) is not a failure and is left out. Against the untouched model a failed seed takes
min(worst observed, the untouched figure): a diverged model is no better than not training. The failure rate is
shown with its Wilson 95% interval.

Sequential looks. The judging block looks at its paired differences after each of `looks` seeds (6, 9, 12, 18 on
the full budget), one-sided 2.5% for "beats" and the same for "falls below". Alpha is spent by the Hwang-Shih-DeCani
function with gamma -2 (SPENDING_GAMMA), alpha(t) = alpha (1 - e^(2t)) / (1 - e^2): between O'Brien-Fleming (which
spends almost nothing at 6 pairs: its t boundary there is 9.5) and Pocock. The boundaries are on the t scale, the
paired t test repeated at the looks: each look's nominal p-value is calibrated on simulated null paths so that the
look spends exactly its share of alpha (nominal_p; the equal-p-value carriage of the z boundaries overspends, 2.70%
of 2.5%, because the looks' sd estimates differ), and a look with fewer pairs than seeds (a seed one side lost)
keeps the look's nominal p-value at its own df. One look is the fixed design's t interval. The repeated confidence
interval at look k is mean +- c_t,k * sd / sqrt(n_k); it is valid whichever look stopped. Futility (non-binding, so
the boundaries ignore it and alpha is never exceeded): at an interim look, stop when |t| < FUTILITY_T[look], t the
paired t over the seeds both sides ran without failing (futility_t): the difference seen is too small for the
remaining seeds to make it detectable.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

ALPHA_ONE_SIDED = 0.025
# The alpha-spending function of the sequential looks: Hwang-Shih-DeCani with this gamma (None: Lan-DeMets
# O'Brien-Fleming type). docs/judging.md gives the simulation that chose it.
SPENDING_GAMMA: float | None = -2.0
CALIBRATION_PATHS, CALIBRATION_SEED = 1_000_000, 20261125
# Non-binding futility bounds on |t| at the interim looks (6, 9 and 12 pairs of the full budget's 6, 9, 12, 18). With
# the spending above they save at least 35% of 18 fixed seeds under the null, at a true difference of 2 seed-stds and
# with 20% of runs diverging, for at most 5 points of power at 1 seed-std (docs/judging.md gives the simulation).
FUTILITY_T = (0.6, 0.8, 1.0)


# ------------------------------------------------------------------------------------------ failure rates
@dataclass(frozen=True)
class FailureRate:
    """Runs of a judging block that diverged or failed, out of those that ran, with the Wilson 95% interval."""

    failed: int
    ran: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.failed / self.ran if self.ran else 0.0

    @property
    def text(self) -> str:
        return f"{self.failed} of {self.ran} failed (95% interval {100 * self.low:.0f}-{100 * self.high:.0f}%)"


def fails_more(a: FailureRate, b: FailureRate | None, alpha: float = ALPHA_ONE_SIDED) -> bool:
    """Whether a's failure rate exceeds b's by more than chance: one-sided Fisher exact test at alpha. b None is
    the untouched model, which cannot fail: set against as many runs as a's, none failed."""
    b_failed, b_ran = (0, a.ran) if b is None else (b.failed, b.ran)
    if a.ran == 0 or a.failed == 0 or b_ran == 0:
        return False
    return _fisher_greater(a.failed, a.ran, b_failed, b_ran) < alpha


@functools.lru_cache(maxsize=4096)
def _fisher_greater(a_failed: int, a_ran: int, b_failed: int, b_ran: int) -> float:
    """The one-sided (greater) Fisher exact p-value of a's failures against b's (cached: the counts are few)."""
    table = [[a_failed, a_ran - a_failed], [b_failed, b_ran - b_failed]]
    return float(scipy_stats.fisher_exact(table, alternative="greater")[1])


def wilson(failed: int, ran: int, confidence: float = 0.95) -> FailureRate:
    """The Wilson score interval of a proportion (it stays inside [0, 1] and is sensible at 0 of n)."""
    if ran == 0:
        return FailureRate(0, 0, 0.0, 1.0)
    z = _z(confidence)
    p = failed / ran
    centre = (p + z * z / (2 * ran)) / (1 + z * z / ran)
    half = z * math.sqrt(p * (1 - p) / ran + z * z / (4 * ran * ran)) / (1 + z * z / ran)
    return FailureRate(failed, ran, max(0.0, centre - half), min(1.0, centre + half))


# ------------------------------------------------------------------------------------------ imputation
def paired_with_failures(a: dict[int, float | None], b: dict[int, float | None], against: str = "a") -> list[float]:
    """a - b over the seeds both sides ran, failures counted against `against` ("a" or "b"): its failed runs (value
    None) take the worst value observed on either side; a seed the other side lost is left out (its failure is not
    evidence for `against`'s rival). Seeds absent from a dict were not run."""
    observed = [v for v in (*a.values(), *b.values()) if v is not None]
    if not observed:
        return []
    worst = min(observed)
    diffs = []
    for seed in sorted(set(a) & set(b)):
        x, y = a[seed], b[seed]
        if (against == "a" and y is None) or (against == "b" and x is None):
            continue
        diffs.append((worst if x is None else x) - (worst if y is None else y))
    return diffs


def against_fixed_with_failures(a: dict[int, float | None], fixed: float) -> list[float]:
    """a - fixed over the seeds a ran; a failed seed takes min(worst observed, fixed)."""
    observed = [v for v in a.values() if v is not None]
    worst = min(observed + [fixed])
    return [(worst if a[s] is None else a[s]) - fixed for s in sorted(a)]


# ------------------------------------------------------------------------------------------ sequential looks
def spent(t: float, alpha: float = ALPHA_ONE_SIDED, gamma: float | None = SPENDING_GAMMA) -> float:
    """The one-sided alpha spent by information fraction t: Hwang-Shih-DeCani with parameter gamma,
    alpha (1 - e^(-gamma t)) / (1 - e^(-gamma)) (gamma 0: alpha t), or with gamma None the Lan-DeMets
    O'Brien-Fleming type 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if gamma is None:
        return float(2.0 - 2.0 * scipy_stats.norm.cdf(scipy_stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if gamma == 0:
        return alpha * t
    return alpha * (1.0 - math.exp(-gamma * t)) / (1.0 - math.exp(-gamma))


def _spends(looks: tuple[int, ...], alpha: float, gamma: float | None) -> list[float]:
    total = looks[-1]
    return [spent(n / total, alpha, gamma) - (spent(looks[k - 1] / total, alpha, gamma) if k else 0.0)
            for k, n in enumerate(looks)]


@functools.lru_cache(maxsize=64)
def z_boundaries(looks: tuple[int, ...], alpha: float = ALPHA_ONE_SIDED,
                 gamma: float | None = SPENDING_GAMMA) -> tuple[float, ...]:
    """The one-sided z boundaries c_1..c_K (known variance, the large-n limit of the t design): P(no crossing
    before k, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}) under the null, with corr(Z_i, Z_j) = sqrt(n_i / n_j)
    (independent increments), solved look by look with scipy's multivariate normal."""
    from scipy.optimize import brentq

    bounds: list[float] = []
    for k, spend in enumerate(_spends(looks, alpha, gamma)):
        if k == 0:
            bounds.append(float(scipy_stats.norm.isf(spend)))
            continue
        ns = looks[:k + 1]
        cov = [[math.sqrt(min(i, j) / max(i, j)) for j in ns] for i in ns]
        mvn_prev = scipy_stats.multivariate_normal(mean=[0.0] * k, cov=[row[:k] for row in cov[:k]])
        mvn = scipy_stats.multivariate_normal(mean=[0.0] * (k + 1), cov=cov)
        none_before = float(mvn_prev.cdf(bounds)) if k > 1 else float(scipy_stats.norm.cdf(bounds[0]))

        def excess(c: float, mvn=mvn, none_before=none_before, spend=spend) -> float:
            return none_before - float(mvn.cdf(bounds + [c])) - spend  # P(none before k, Z_k >= c) - spend

        bounds.append(float(brentq(excess, 0.0, 10.0, xtol=1e-6)))
    return tuple(bounds)


@functools.lru_cache(maxsize=64)
def nominal_p(looks: tuple[int, ...], alpha: float = ALPHA_ONE_SIDED,
              gamma: float | None = SPENDING_GAMMA) -> tuple[float, ...]:
    """The one-sided nominal p-value of each look's t boundary (df n_k - 1), calibrated so that the paired t test
    repeated at the looks spends alpha(t_k) - alpha(t_{k-1}) at look k, exactly for normal differences.

    The t statistics of the looks have a joint null law free of the unknown sd (pivotal), but it is not the z
    statistics' multivariate normal: carrying z_boundaries to t by equal p-value spends 2.61% (O'Brien-Fleming
    type) or 2.70% (Hwang-Shih-DeCani -2) of a nominal 2.5% over 6, 9, 12, 18 pairs, because the looks' sd estimates
    differ. So the boundaries are set on CALIBRATION_PATHS simulated null paths (a fixed seed: the same plan gives
    the same boundaries, on a resume too): at each look, among the paths not yet stopped, the boundary is the t
    value that the look's share of alpha of all paths reaches. Its Monte-Carlo error on the total alpha is about
    0.01 point. One look is the fixed t test: alpha itself."""
    if len(looks) == 1:
        return (alpha,)
    import numpy as np

    rng = np.random.default_rng(CALIBRATION_SEED)
    paths = CALIBRATION_PATHS
    total, squares = np.zeros(paths), np.zeros(paths)
    alive = np.ones(paths, dtype=bool)
    out, done = [], 0
    for n, spend in zip(looks, _spends(looks, alpha, gamma)):
        for _ in range(n - done):
            x = rng.standard_normal(paths)
            total += x
            squares += x * x
        done = n
        with np.errstate(divide="ignore", invalid="ignore"):  # rounding can leave a sum of squares just below 0
            t = (total / n) / np.sqrt(np.maximum(squares - total * total / n, 0.0) / (n - 1) / n)
        candidates = t[alive]
        count = int(round(spend * paths))  # the count-th largest t of the paths not yet stopped
        c = (float(np.partition(candidates, candidates.size - count)[candidates.size - count]) if count >= 1
             else float(candidates.max()) + 1.0)
        alive &= t < c
        out.append(float(scipy_stats.t.sf(c, n - 1)))
    return tuple(out)


def t_boundary(looks: tuple[int, ...], n: int, alpha: float = ALPHA_ONE_SIDED, look: int | None = None) -> float:
    """The t-scale boundary at a look (1-based; by default the look that n seeds reach, the first before it): the
    t quantile with n - 1 df of the look's calibrated nominal p-value, n the pairs that count (a seed one side lost
    may be left out: the look is the seeds run, not the pairs; fewer pairs keep the look's nominal p-value).
    A single look is the fixed t test."""
    k = (look_of(looks, n) if look is None else look) or 1
    return _t_boundary(tuple(looks), n, alpha, min(k, len(looks)))


@functools.lru_cache(maxsize=4096)
def _t_boundary(looks: tuple[int, ...], n: int, alpha: float, k: int) -> float:
    """t_boundary's value, a pure function of the plan's looks, the pairs and the look (cached: a decision asks
    for it on every interval, and scipy's t quantile costs more than the rest of the interval)."""
    return float(scipy_stats.t.isf(nominal_p(looks, alpha)[k - 1], n - 1))


@functools.lru_cache(maxsize=8)
def _z(confidence: float) -> float:
    return float(scipy_stats.norm.ppf(0.5 + confidence / 2))


def look_of(looks: Sequence[int], n: int) -> int:
    """The 1-based look that n pairs reach (0 before the first)."""
    return sum(1 for m in looks if m <= n)


def futility_bound(looks: Sequence[int], look: int) -> float:
    """The non-binding futility bound on |t| at an interim look (1-based); 0 at the last look (no futility there)."""
    if look >= len(looks) or look < 1:
        return 0.0
    return FUTILITY_T[min(look, len(FUTILITY_T)) - 1]


def valid_pairs(a: dict[int, float | None], b: dict[int, float | None] | float) -> list[float]:
    """a - b over the seeds both sides ran without failing (b a dict by seed, or a fixed figure), in seed order:
    what futility reads, and the differences whose mean is the reported estimate (failures are judged apart)."""
    if isinstance(b, dict):
        return [a[s] - b[s] for s in sorted(set(a) & set(b)) if a[s] is not None and b[s] is not None]
    return [a[s] - b for s in sorted(a) if a[s] is not None]


def futility_t(a: dict[int, float | None], b: dict[int, float | None] | float) -> float | None:
    """The paired t statistic that futility reads: a - b over the seeds both sides ran without failing (b a dict
    by seed, or the untouched model's fixed figure); None under two pairs or with no spread. Failed seeds are left
    out here, unlike in the judgments. Futility is non-binding, so what it reads cannot raise alpha; reading the
    imputed figure made a futility stop depend on the winner's failures, and the difference reported over the
    pairs both ran leaned to the winner at such stops (+0.09 seed-stds under the null with 20% of runs diverging)."""
    diffs = valid_pairs(a, b)
    if len(diffs) < 2:
        return None
    mean = sum(diffs) / len(diffs)
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    return mean / (std / math.sqrt(len(diffs))) if std > 0 else None


def stop_reason(published: tuple, baseline: tuple, looks: Sequence[int], look: int) -> str | None:
    """Why the judging block stops at this look, or None to go on. Each judgment is (interval, beats, falls below,
    futility t); it is settled when a boundary is crossed ("beats", "falls below") or, at an interim look, when it
    is futile: |futility t| (futility_t) is below the futility bound (the difference is too small for the
    remaining seeds to be worth running). The judgment against the published point drives the block (its runs are
    the expensive half, and the question the search asks); without one, the judgment against the untouched model
    does. The other judgment is reported at the same look: its repeated interval is valid at any look. Before the
    first look, or with a single look: None."""
    if look == 0 or len(looks) < 2:
        return None

    def settled(interval, up, down, t) -> str | None:
        if interval is None or interval.low is None:
            return "none"
        if up:
            return "beats"
        if down:
            return "falls below"
        if t is not None and abs(t) < futility_bound(looks, look):
            return "futility"
        return None

    first = settled(*published)
    return first if first != "none" else (None if (second := settled(*baseline)) == "none" else second)
