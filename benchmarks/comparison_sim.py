"""The family-wise judgment of `raycse compare`, on simulated comparisons: error rate, power and bias.

    python benchmarks/comparison_sim.py [--reps 20000] [--judge-seeds 18] [--output FILE]

Every figure is in units of sigma, the seed noise of one run's judged figure (the seven-task test average). What is
simulated, per repetition:

  losses        L of them (3 or 6). Each loss's search tries K = 16 configurations; configuration k of loss l has
                a true test mean theta_lk = mu_l + tau * N(0, 1) (tau = 0: every configuration of a loss equal).
  the search    ranks on one run each (the search seed): theta_lk + a dev-set share d_lk ~ N(0, 1.8^2) (the
                configuration x dev-set share measured in docs/judging.md) + N(0, 1) seed noise; the winner is
                the first-ranked. Its search figure is what a naive comparison would quote.
  judging       every loss's winner (and, in the "with published points" scenarios, each loss's published point,
                theta = mu_l + tau * N(0, 1)) on the same J = 18 fresh seeds: x = theta + u_s + e, u_s ~ N(0, rho)
                shared by every arm on seed s (what a seed does to the data order), e ~ N(0, 1 - rho), rho = 0.3.
  the judgment  raycse's own functions (raycse.judging.comparison): paired_t on every pair's per-seed differences,
                two_sided, holm_adjusted over the family, bonferroni_half_width; a pair is "better"/"worse" when
                Holm decides it at 5%, by the sign of its mean. Vectorised over repetitions (the same functions
                take a leading axis). No run fails here; failures are tested in tests/test_compare.py.

Measured: the family-wise error rate, P(at least one "better" or "worse" that is false: a pair whose true
difference is 0, or the wrong sign); the power, P(a pair with a true difference is decided in its direction),
averaged over those pairs, and P(every such pair decided); the simultaneous coverage of the Bonferroni-adjusted
intervals (all m cover their true difference); and the bias of each reported difference (its mean over seeds
minus the true difference of the two arms judged; the largest |bias| over the family's pairs is printed), beside
the bias of the papers' habit where published points are simulated: the tuned winner's search figure minus the
published point's one run, as a difference of the same two arms. Each with its Monte-Carlo standard error.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # benchmarks/concurrent.py

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from itertools import combinations  # noqa: E402

import numpy as np  # noqa: E402

from raycse.judging.comparison import (  # noqa: E402
    ALPHA,
    bonferroni_half_width,
    holm_adjusted,
    paired_t,
    two_sided,
)

K = 16  # configurations a loss's search tries (the full budget's 16 trials)
DEV_SHARE = 1.8  # the configuration x dev-set share, in sigma (docs/judging.md)
RHO = 0.3  # the share of a run's seed noise common to every arm on that seed

SCENARIOS = (
    # name, L, true loss means (mu_l), tau (configuration spread), with published points
    ("global null, 3 losses", 3, (0, 0, 0), 0.0, False),
    ("global null, 6 losses", 6, (0,) * 6, 0.0, False),
    ("global null, 3 losses + published points", 3, (0, 0, 0), 0.0, True),
    ("global null, 6 losses + published points", 6, (0,) * 6, 0.0, True),
    ("one better by 1 sigma, 3 losses", 3, (1, 0, 0), 0.0, False),
    ("one better by 1 sigma, 6 losses", 6, (1, 0, 0, 0, 0, 0), 0.0, False),
    ("two better by 1 sigma, 6 losses", 6, (1, 1, 0, 0, 0, 0), 0.0, False),
    ("two better by 1.5 sigma, 6 losses", 6, (1.5, 1.5, 0, 0, 0, 0), 0.0, False),
    ("configurations spread 0.5 sigma, 6 losses equal", 6, (0,) * 6, 0.5, False),
    ("configurations spread 0.5 sigma, one loss 1 sigma better, 6 losses", 6, (1, 0, 0, 0, 0, 0), 0.5, True),
)


def simulate(rng: np.random.Generator, reps: int, mu: tuple, tau: float, published: bool, judge_seeds: int,
             chunk: int = 5000) -> dict:
    L = len(mu)
    mu = np.asarray(mu, dtype=float)
    arms_of = [(i, "tuned") for i in range(L)] + ([(i, "published") for i in range(L)] if published else [])
    pairs = [(i, j) for i, j in combinations(range(L), 2)] + ([(i, L + i) for i in range(L)] if published else [])
    ia, ib = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    m = len(pairs)
    counts = {"false_family": 0, "covered_all": 0, "all_decided": 0, "any_true": 0}
    power_hits, power_n = 0, 0
    bias_sum = np.zeros(m)
    bias_sq = np.zeros(m)
    naive_sum = np.zeros(L)
    naive_sq = np.zeros_like(naive_sum)
    done = 0
    while done < reps:
        r = min(chunk, reps - done)
        theta = mu[None, :, None] + tau * rng.standard_normal((r, L, K))
        search = theta + DEV_SHARE * rng.standard_normal((r, L, K)) + rng.standard_normal((r, L, K))
        pick = search.argmax(axis=2)
        truth_tuned = np.take_along_axis(theta, pick[:, :, None], axis=2)[:, :, 0]
        figure_tuned = np.take_along_axis(search, pick[:, :, None], axis=2)[:, :, 0]
        truth = truth_tuned
        if published:
            truth_published = mu[None, :] + tau * rng.standard_normal((r, L))
            # its search-stage run (the published point is the search's first trial): what a paper would quote
            figure_published = (truth_published + DEV_SHARE * rng.standard_normal((r, L))
                                + rng.standard_normal((r, L)))
            truth = np.concatenate([truth_tuned, truth_published], axis=1)
        A = truth.shape[1]
        shared = math.sqrt(RHO) * rng.standard_normal((r, 1, judge_seeds))
        x = truth[:, :, None] + shared + math.sqrt(1 - RHO) * rng.standard_normal((r, A, judge_seeds))
        diffs = x[:, ia, :] - x[:, ib, :]  # (r, m, J)
        mean, sd, n, p_up, p_down = paired_t(diffs)
        decided = holm_adjusted(two_sided(p_up, p_down)) <= ALPHA
        true_diff = truth[:, ia] - truth[:, ib]
        sign = np.sign(mean)
        wrong = decided & ((np.abs(true_diff) < 1e-12) | (sign != np.sign(true_diff)))
        counts["false_family"] += int(wrong.any(axis=1).sum())
        half = bonferroni_half_width(sd, n, m)
        counts["covered_all"] += int((np.abs(mean - true_diff) <= half).all(axis=1).sum())
        real = np.abs(true_diff) >= 1e-12
        right = decided & (sign == np.sign(true_diff)) & real
        power_hits += int(right.sum())
        power_n += int(real.sum())
        counts["all_decided"] += int((right | ~real).all(axis=1)[real.any(axis=1)].sum())
        counts["any_true"] += int(real.any(axis=1).sum())
        err = mean - true_diff
        bias_sum += err.sum(axis=0)
        bias_sq += (err ** 2).sum(axis=0)
        if published:  # tuned winner - published point on the search figures, less the true difference
            naive = (figure_tuned - figure_published) - (truth_tuned - truth_published)
            naive_sum += naive.sum(axis=0)
            naive_sq += (naive ** 2).sum(axis=0)
        done += r

    def rate(k, total):
        p = k / total if total else float("nan")
        return {"rate": p, "mc_error": math.sqrt(p * (1 - p) / total) if total else float("nan")}

    def worst_bias(s, sq):
        means = s / reps
        errors = np.sqrt(np.maximum(sq / reps - means ** 2, 0.0) / reps)
        k = int(np.argmax(np.abs(means)))
        return {"largest_abs": float(means[k]), "mc_error": float(errors[k]),
                "mean_over_pairs": float(means.mean())}

    return {"losses": L, "arms": [f"{i}:{role}" for i, role in arms_of], "comparisons": m, "reps": reps,
            "familywise_false_claim": rate(counts["false_family"], reps),
            "power_per_true_difference": rate(power_hits, power_n) if power_n else None,
            "power_all_true_differences": rate(counts["all_decided"], counts["any_true"])
            if counts["any_true"] else None,
            "simultaneous_coverage": rate(counts["covered_all"], reps),
            "bias_reported": worst_bias(bias_sum, bias_sq),
            "bias_naive_search_figures": worst_bias(naive_sum, naive_sq) if published else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--judge-seeds", type=int, default=18)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    results = []
    print(f"{'scenario':<70} {'m':>3} {'FWER false claim':>18} {'power/pair':>14} {'all found':>14} "
          f"{'coverage':>14} {'bias (max |.|)':>18} {'naive tuned-pub':>14}")
    for name, _losses, mu, tau, published in SCENARIOS:
        res = simulate(rng, args.reps, mu, tau, published, args.judge_seeds)
        res["scenario"] = name
        results.append(res)

        def pct(entry):
            return "-" if entry is None else f"{100 * entry['rate']:.2f} ± {100 * entry['mc_error']:.2f}%"

        bias, naive = res["bias_reported"], res["bias_naive_search_figures"]
        naive_text = "-" if naive is None else f"{naive['mean_over_pairs']:+.3f}"
        print(f"{name:<70} {res['comparisons']:>3} {pct(res['familywise_false_claim']):>18} "
              f"{pct(res['power_per_true_difference']):>14} {pct(res['power_all_true_differences']):>14} "
              f"{pct(res['simultaneous_coverage']):>14} {bias['largest_abs']:>+9.4f} ± {bias['mc_error']:.4f} "
              f"{naive_text:>14}", flush=True)
    wall = time.perf_counter() - started
    print(f"{args.reps} repetitions per scenario, {args.judge_seeds} judging seeds, alpha {ALPHA} family-wise; "
          f"{wall:.1f} s")
    if args.output:
        with open(args.output, "w") as handle:
            json.dump({"reps": args.reps, "judge_seeds": args.judge_seeds, "seed": args.seed, "wall_s": wall,
                       "scenarios": results}, handle, indent=1)


if __name__ == "__main__":
    main()
