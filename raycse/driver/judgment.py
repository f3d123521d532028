"""How a judging block becomes a judgment: which figure judges, how a failed seed counts, and where the interim
looks stop (pure: no Ray, MLflow or I/O; raycse/driver/decision.py calls it).

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
the full budget). The boundaries come from the Lan-DeMets O'Brien-Fleming-type spending function
alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), one-sided 2.5% for "beats" and the same for "falls below", computed
exactly on the z scale (the joint normal law of the look statistics, corr(Z_i, Z_j) = sqrt(n_i / n_j), solved look
by look with scipy's multivariate normal), then carried to the t scale at each look by equal nominal p-value:
c_t = t_{n_k - 1}(Phi(c_z)). With 6 pairs and an estimated sd the z boundary would be anti-conservative (t_5 has
heavy tails); the equal-p-value t-analogue is the standard small-sample choice and reduces to the fixed design's
t interval at a single look. The repeated confidence interval at look k is mean +- c_t,k * sd / sqrt(n_k); it is
valid whichever look stopped. Futility (non-binding, so the boundaries ignore it and alpha is never exceeded): at an
interim look, stop when |t| < FUTILITY_T[look]: the difference seen is too small for the remaining seeds to make it
detectable.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

ALPHA_ONE_SIDED = 0.025
# Non-binding futility bounds on |t| at the interim looks (6, 9 and 12 pairs of the full budget's 6, 9, 12, 18):
# under the null they stop the block early often enough to save ~37% of 18 fixed seeds, and they cost ~4 points of
# power at a true difference of 1 seed-std (docs/judging.md gives the simulation).
FUTILITY_T = (0.4, 0.6, 0.8)
TEST = "test"
SPLIT = "split"
JUDGED_WORDS = {TEST: "the seven-task test average", SPLIT: "the held-out part of the objective's pairs"}


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
def obf_spent(t: float, alpha: float = ALPHA_ONE_SIDED) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spent by information fraction t (one-sided alpha)."""
    if t <= 0:
        return 0.0
    return float(2.0 - 2.0 * scipy_stats.norm.cdf(scipy_stats.norm.ppf(1 - alpha / 2) / math.sqrt(min(t, 1.0))))


@functools.lru_cache(maxsize=64)
def z_boundaries(looks: tuple[int, ...], alpha: float = ALPHA_ONE_SIDED) -> tuple[float, ...]:
    """The one-sided z boundaries c_1..c_K: P(no crossing before k, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}) under
    the null, with corr(Z_i, Z_j) = sqrt(n_i / n_j) (independent increments), solved look by look."""
    from scipy.optimize import brentq

    total = looks[-1]
    bounds: list[float] = []
    for k, n in enumerate(looks):
        spend = obf_spent(n / total, alpha) - obf_spent(looks[k - 1] / total, alpha) if k else obf_spent(n / total,
                                                                                                         alpha)
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


def t_boundary(looks: tuple[int, ...], n: int, alpha: float = ALPHA_ONE_SIDED, look: int | None = None) -> float:
    """The t-scale boundary at a look (1-based; by default the look that n seeds reach, the first before it),
    carried by equal nominal p-value to t with n - 1 df, n the pairs that count (a seed one side lost may be left
    out: the look is the seeds run, not the pairs). A single look is the fixed t test."""
    k = (look_of(looks, n) if look is None else look) or 1
    return _t_boundary(tuple(looks), n, alpha, min(k, len(looks)))


@functools.lru_cache(maxsize=4096)
def _t_boundary(looks: tuple[int, ...], n: int, alpha: float, k: int) -> float:
    """t_boundary's value, a pure function of the plan's looks, the pairs and the look (cached: a decision asks
    for it on every interval, and scipy's t quantile costs more than the rest of the interval)."""
    return float(scipy_stats.t.isf(float(scipy_stats.norm.sf(z_boundaries(looks, alpha)[k - 1])), n - 1))


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


def stop_reason(published: tuple, baseline: tuple, looks: Sequence[int], look: int) -> str | None:
    """Why the judging block stops at this look, or None to go on. Each judgment is (interval, beats, falls below);
    it is settled when a boundary is crossed ("beats", "falls below") or, at an interim look, when it is futile: the
    paired t statistic |mean / (sd / sqrt(n))| is below the futility bound (the difference is too small for the
    remaining seeds to be worth running). The judgment against the published point drives the block (its runs are
    the expensive half, and the question the search asks); without one, the judgment against the untouched model
    does. The other judgment is reported at the same look: its repeated interval is valid at any look. Before the
    first look, or with a single look: None."""
    if look == 0 or len(looks) < 2:
        return None

    def settled(interval, up, down) -> str | None:
        if interval is None or interval.low is None:
            return "none"
        if up:
            return "beats"
        if down:
            return "falls below"
        if interval.std and abs(interval.mean) / (interval.std / math.sqrt(interval.n)) < futility_bound(looks, look):
            return "futility"
        return None

    first = settled(*published)
    return first if first != "none" else (None if (second := settled(*baseline)) == "none" else second)
