"""The point estimate of a sequential judgment, adjusted for the stopping rule (pure: numpy only, no Ray or I/O;
raycse/judging/decision.py calls it).

A judging block that may stop at an interim look reports a mean whose law depends on the stopping rule: a block
that stops early for efficacy stopped because its mean ran high, and one that stops for futility because it ran
near 0. So the naive mean of the paired differences at the stopping look is biased although each look's mean is
not (simulated on the pipeline: -0.056 seed-stds with a spread of true means, +0.049 at a true difference of 2).

The estimate reported is mean - sd * g(mean / sd), mean and sd those of the differences at the stopping look (the sd
estimated as the t boundaries do: the design's boundaries are on the t scale), g the iterated bias correction of
the design (`correction`): odd, piecewise linear on a grid of standardised true differences theta, computed on
simulated paths of normal differences so that the estimate's bias is 0 at every theta of the grid, up to the
simulation's error. Its first step is Whitehead's bias-adjusted estimate (Whitehead 1986, Biometrika 73:573-581:
theta~ = theta^ - b(theta~), b the naive mean's bias), with b read at theta^. Alone it removes only a third to two
thirds of the bias here, because b changes sign within one standard error of theta^ at the first looks (futility
stops pull the mean down at small theta, efficacy stops push it up at larger ones); the iterations remove the rest.
The design (its looks, its t boundaries on both sides, its non-binding futility bounds, assumed followed) fixes g;
the paths have a fixed seed, so the same plan gives the same estimate, on a resume too. Paths are shifted, not
redrawn, for each theta (the sample sd does not move with a shift), and used with their mirror images, so the
naive bias is exactly odd and 0 at theta 0.

Why not the median-unbiased estimate under the stage-wise ordering: the target is the mean bias of the reported
difference, which this removes by construction, and with t boundaries and futility the ordering needs the joint law
of the looks' means and sds. A single look (the fixed design) needs no adjustment: the estimate is the plain mean.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from raycse.judging import judgment

ADJUST_PATHS, ADJUST_SEED = 100_000, 20261126  # half the simulated paths: each is used with its mirror image
THETA_STEP, THETA_MAX = 0.025, 5.0  # the grid of standardised differences (>= 0: the design is symmetric)
ITERATIONS = 20


@dataclass(frozen=True)
class StoppingEstimate:
    """The point estimate of a difference at the look a sequential judgment stopped at.

    estimate  the reported value: adjusted for the stopping rule when `adjusted`, else the plain mean
    naive     the plain mean of the differences at that look (biased by the stopping rule; shown, labelled)
    n         the differences (the pairs both sides ran without failing)
    adjusted  True when the plan has interim looks and the judgment has ended (stopped or at its last look)
    """

    estimate: float
    naive: float
    n: int
    adjusted: bool

    @property
    def text(self) -> str:
        if not self.adjusted:
            return f"{self.estimate:+.2f} (the mean of {self.n} pairs)"
        return (f"{self.estimate:+.2f}, adjusted for early stopping (naive mean {self.naive:+.2f}, over the "
                f"{self.n} pairs both ran without failing)")


def _design(looks: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The design's t boundaries and futility bounds by look (futility 0 at the last look)."""
    bounds = tuple(judgment.t_boundary(looks, n, look=k + 1) for k, n in enumerate(looks))
    futility = tuple(judgment.futility_bound(looks, k + 1) for k in range(len(looks)))
    return bounds, futility


def look_statistics(z, looks: Sequence[int]):
    """Each look's mean and sd of the paths (rows of z, the differences in order): sd does not move with a shift."""
    return ([z[:, :n].mean(axis=1) for n in looks], [z[:, :n].std(axis=1, ddof=1) for n in looks])


def stopped(statistics, looks, bounds, futility, theta: float):
    """The mean and sd at the stopping look of each path shifted by theta (look_statistics of the unshifted
    paths), and the look (0-based)."""
    import numpy as np

    means, sds = statistics
    paths = means[0].size
    mean, sd = np.empty(paths), np.empty(paths)
    look = np.full(paths, len(looks) - 1)
    alive = np.ones(paths, dtype=bool)
    for k, n in enumerate(looks):
        m, s = theta + means[k], sds[k]
        last = k == len(looks) - 1
        t = m / (s / math.sqrt(n))
        stop = alive if last else alive & ((np.abs(t) >= bounds[k]) | (np.abs(t) < futility[k]))
        mean[stop], sd[stop], look[stop] = m[stop], s[stop], k
        alive &= ~stop
    return mean, sd, look


@functools.lru_cache(maxsize=16)
def correction(looks: tuple[int, ...], bounds: tuple[float, ...] | None = None,
               futility: tuple[float, ...] | None = None, paths: int = ADJUST_PATHS, seed: int = ADJUST_SEED,
               iterations: int = ITERATIONS) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(grid, g, b): the estimate is mean - sd * g(mean / sd) (g odd, piecewise linear on the grid, 0 beyond it);
    b is the naive mean's bias on the grid of true standardised differences, in units of the differences' sd.

    g is the iterated bias correction: g_0 = 0, g_{i+1} = g_i + (bias of the estimate with g_i), the bias at each
    true difference on the grid computed on the same simulated paths, so that the estimate is unbiased on the grid
    up to the simulation's error. Whitehead's one-step solve (theta~ + b(theta~) = mean / sd) removes only a third
    to two thirds of the bias here, because b changes sign within one standard error of the estimate at the first
    looks; its iterations do the rest. A path stops at interim look k when |t_k| >= bounds[k] (either boundary) or
    |t_k| < futility[k]; at the last look it stops. Bounds and futility default to the design's."""
    import numpy as np

    if bounds is None or futility is None:
        design = _design(looks)
        bounds, futility = bounds or design[0], futility or design[1]
    z = np.random.default_rng(seed).standard_normal((paths, looks[-1]))
    z = np.concatenate([z, -z])  # antithetic: b is exactly odd, 0 at 0
    statistics = look_statistics(z, looks)
    grid = np.arange(0.0, THETA_MAX + THETA_STEP / 2, THETA_STEP)
    nodes = grid.size
    naive = np.empty(nodes)
    weights = np.zeros((nodes, nodes))  # weights[i, j]: E[sd * sign * hat_j(|mean / sd|)] at true difference grid[i]
    for i, theta in enumerate(grid):
        mean, sd, _ = stopped(statistics, looks, bounds, futility, float(theta))
        naive[i] = mean.mean() - theta
        u = np.abs(mean / sd) / THETA_STEP
        j = np.floor(u).astype(int)
        frac = u - j
        signed = np.sign(mean) * sd / z.shape[0]
        inside = j < nodes - 1
        weights[i] += np.bincount(j[inside], signed[inside] * (1 - frac[inside]), minlength=nodes)[:nodes]
        weights[i] += np.bincount(j[inside] + 1, signed[inside] * frac[inside], minlength=nodes)[:nodes]
    g = np.zeros(nodes)
    for _ in range(iterations):
        g = g + naive - weights @ g
    return tuple(grid.tolist()), tuple(g.tolist()), tuple(naive.tolist())


def adjusted_mean(mean: float, sd: float | None, looks: Sequence[int]) -> float:
    """The estimate adjusted for the stopping rule of a difference whose sample mean `mean` and sd `sd` were read
    at the stopping look of a judgment with these looks: mean - sd * g(mean / sd) (correction). With one look, or
    no sd (fewer than two differences, or none spread), the mean itself."""
    looks = tuple(looks)
    if len(looks) < 2 or sd is None or not sd > 0 or not math.isfinite(mean):
        return mean
    import numpy as np

    grid, g, _ = correction(looks)
    observed = mean / sd
    return mean - sd * math.copysign(1.0, observed) * float(np.interp(abs(observed), grid, g, right=0.0))


def stopping_estimate(diffs: Sequence[float], looks: Sequence[int], ended: bool) -> StoppingEstimate | None:
    """The reported estimate of the mean of `diffs` (the pairs both sides ran) at a look of a judgment with these
    looks: adjusted for the stopping rule when the plan has interim looks and the judgment has ended (`ended`: it
    stopped, or reached its last look); the plain mean otherwise (one look, or a judgment still running). None
    without differences."""
    if not diffs:
        return None
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else None
    adjust = ended and len(tuple(looks)) > 1 and sd is not None and sd > 0
    return StoppingEstimate(adjusted_mean(mean, sd, looks) if adjust else mean, mean, n, adjust)
