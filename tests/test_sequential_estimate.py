"""The estimate at the stopping look of a sequential judgment, adjusted for the stopping rule."""
import math

import numpy as np
import pytest

from raycse.judging import judgment
from raycse.judging.confirmation_plan import ConfirmPlan, default_plan
from raycse.judging.decision import decide
from raycse.judging.seed_scores import ConfigScores, SeedScore, UntouchedFigures
from raycse.judging.sequential_estimate import adjusted_mean, correction, stopping_estimate
from raycse.records import DIVERGED, FINISHED

LOOKS = (6, 9, 12, 18)


def _stopped_paths(theta: float, paths: int, seed: int):
    """Paired differences N(theta, 1) judged at LOOKS with the judge's own boundaries and futility (written here
    apart from the module's simulation): the mean and sd at the look each path stops."""
    rng = np.random.default_rng(seed)
    x = theta + rng.standard_normal((paths, LOOKS[-1]))
    mean, sd = np.empty(paths), np.empty(paths)
    alive = np.ones(paths, dtype=bool)
    for k, n in enumerate(LOOKS, start=1):
        m, s = x[:, :n].mean(axis=1), x[:, :n].std(axis=1, ddof=1)
        t = m / (s / math.sqrt(n))
        bound, futile = judgment.t_boundary(LOOKS, n, look=k), judgment.futility_bound(LOOKS, k)
        stop = alive & ((np.abs(t) >= bound) | (np.abs(t) < futile) | (k == len(LOOKS)))
        mean[stop], sd[stop] = m[stop], s[stop]
        alive &= ~stop
    return mean, sd


@pytest.mark.parametrize("theta", [0.35, 1.2])
def test_on_stopped_paths_the_adjusted_estimate_is_unbiased_where_the_naive_mean_is_not(theta):
    # 0.35 sd: futility stops pull the naive mean down (-0.066); 1.2 sd: early efficacy stops push it up (+0.06)
    mean, sd = _stopped_paths(theta, 40_000, seed=11)
    adjusted = np.array([adjusted_mean(float(m), float(s), LOOKS) for m, s in zip(mean, sd)])
    mc_naive, mc_adjusted = mean.std() / math.sqrt(mean.size), adjusted.std() / math.sqrt(adjusted.size)
    assert abs(mean.mean() - theta) > 0.04 and abs(mean.mean() - theta) > 10 * mc_naive
    assert abs(adjusted.mean() - theta) < 4 * mc_adjusted and abs(adjusted.mean() - theta) < 0.01


def test_the_correction_is_odd_zero_far_out_and_none_with_one_look():
    grid, g, naive_bias = correction(LOOKS)
    assert grid[0] == 0.0 and g[0] == pytest.approx(0.0, abs=1e-12) and naive_bias[0] == pytest.approx(0.0, abs=1e-12)
    assert min(naive_bias) < -0.06 and max(naive_bias) > 0.05  # futility pulls down, efficacy pushes up
    assert adjusted_mean(-0.3, 1.0, LOOKS) == pytest.approx(-adjusted_mean(0.3, 1.0, LOOKS))
    assert adjusted_mean(0.3, 1.0, LOOKS) > 0.3  # a futility-sized mean is pulled away from 0
    assert adjusted_mean(50.0, 1.0, LOOKS) == 50.0  # beyond the grid every path stops at look 1: no bias
    assert adjusted_mean(0.3, 1.0, (18,)) == 0.3 and adjusted_mean(0.3, None, LOOKS) == 0.3
    fixed = stopping_estimate([0.1, 0.5, 0.3], (18,), ended=True)
    assert not fixed.adjusted and fixed.estimate == fixed.naive == pytest.approx(0.3)
    running = stopping_estimate([0.1, 0.5, 0.3], LOOKS, ended=False)  # a judgment still running: the plain mean
    assert not running.adjusted and running.estimate == pytest.approx(0.3)
    ended = stopping_estimate([0.1, 0.5, 0.3], LOOKS, ended=True)
    assert ended.adjusted and ended.naive == pytest.approx(0.3) and ended.estimate != ended.naive
    assert stopping_estimate([], LOOKS, ended=True) is None


def _runs(seeds, tests, status=FINISHED):
    return tuple(SeedScore(s, status, 80.0, {"avg": t}) if t is not None else SeedScore(s, DIVERGED, None)
                 for s, t in zip(seeds, tests))


def test_the_decision_reports_the_adjusted_estimate_beside_the_naive_mean_and_the_flags_do_not_move():
    plan = default_plan("full", top_k=1, choose_seeds=0)  # looks 6, 9, 12, 18
    judge = plan.seeds().judge[:6]
    level = [78.0, 78.4, 77.9, 78.2, 78.1, 78.3]
    w_tests = [x + d for x, d in zip(level, [0.1, -0.1, 0.05, -0.05, 0.03, -0.11])]
    w = _runs(judge, w_tests[:5] + [None])  # the last seed diverged: the estimate is over the 5 pairs both ran
    p = _runs(judge, level)
    d = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
               baseline=UntouchedFigures(70.0, {"avg": 78.15}), plan=plan)
    assert d.look == 1 and d.stopped == "futility" and not d.beats_published and not d.below_published
    e = d.estimate_published
    diffs = [a - b for a, b in zip(w_tests[:5], level[:5])]
    assert e.adjusted and e.n == 5 and e.naive == pytest.approx(sum(diffs) / 5)
    sd = float(np.std(diffs, ddof=1))
    assert e.estimate == pytest.approx(adjusted_mean(e.naive, sd, plan.design_looks))
    assert abs(e.estimate) > abs(e.naive)  # a futility stop's mean is pulled away from 0
    assert "adjusted for early stopping" in d.sentence and f"naive mean {e.naive:+.2f}" in d.sentence
    # the fixed design (one look) reports the plain mean and says nothing of stopping
    fixed = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
                   baseline=UntouchedFigures(70.0, {"avg": 78.15}),
                   plan=ConfirmPlan(budget="full", top_k=1, choose_seeds=0, judge_seeds=6))
    assert not fixed.estimate_published.adjusted and fixed.estimate_published.estimate == pytest.approx(e.naive)
    assert "adjusted for early stopping" not in fixed.sentence
    assert (fixed.beats_published, fixed.below_published) == (d.beats_published, d.below_published)
