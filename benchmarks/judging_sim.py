"""The whole answer, simulated: raycse's own ranking, choosing, sequential judging and decision on simulated runs.

    python benchmarks/judging_sim.py [--reps 20000] [--scenarios all|quick|affected] [--output FILE]

Every figure is in units of the seed noise sigma of the dev objective. Per repetition:

  space         focal.yaml: 16 search trials, the published point first; all.yaml: 48 trials over 4 families
                (simcse, focal, imsimcse, dclr; 12 each), each family's published point enqueued first. The winner
                is set against its own family's published point.
  truth         each configuration has a true quality q_c ~ N(0, spread^2) (the published points' 0 in the null
                and power scenarios); its dev mean is q_c + a_c, a_c ~ N(0, share^2) its DEV-SET SHARE (luck of the
                dev pairs, which the test tasks do not share); its test mean is q_c. Power: one searched
                configuration is truly `margin` better. The untouched model's test figure is 0 (one evaluation).
  a run         8 dev evaluations, each dev mean + seed noise (std 1, correlation 0.7 between evaluations of a
                run); its dev figure the best evaluation it reached (the trainer's best checkpoint); its test
                figure test mean + N(0, 1) (the test tasks read that checkpoint, a noise of their own). A run
                diverges with its configuration's probability p_c = divergence x U(0, 2) (differing between
                configurations): status diverged, no figures.
  ASHA          as raycse configures it: grace 1 evaluation, reduction factor 2, so rungs after evaluations 1, 2
                and 4; trials report in trial order and a trial stops at a rung when its value there is below the
                50th percentile of the values recorded at that rung before it (Ray's cutoff); none stops at 8.
  the pipeline  `rank_for_confirmation` (the search's ranking), `choose_winner` via `decide` (3 configurations on
                3 choosing seeds), then judging in looks exactly as the judge stage does it: after each look,
                `decide` on every judging run so far, stop when `decision.stopped`. The fixed design (18 seeds,
                one look) is run on the same draws.

Measured: the bias of the reported winner - published (the decision's `estimate_published`: the test average over
the pairs both ran, adjusted for early stopping at the sequential design's stopping look; minus the true difference,
over repetitions whose winner is not the published point; the judged interval also counts failures, so it is lower
by design when the winner fails), for the fixed design and the sequential one (beside it the naive mean's bias),
false "beats published" and "beats untouched" (the flag while the truth is not better), power at `margin`, judging
runs per repetition (sequential against fixed), and the Monte-Carlo error of each. Only the draws are vectorised;
every decision is raycse.driver's.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats as scipy_stats  # noqa: E402

from raycse.judging.confirmation_plan import ConfirmPlan  # noqa: E402
from raycse.judging.decision import choose_winner, decide  # noqa: E402
from raycse.judging.ranking import TrialCurve, rank_for_confirmation  # noqa: E402
from raycse.judging.seed_scores import ConfigScores, SeedScore, UntouchedFigures  # noqa: E402
from raycse.records import DIVERGED, FINISHED, STOPPED  # noqa: E402

EVALS, RUNGS, RF, RHO = 8, (1, 2, 4), 2, 0.7
SPACES = {"focal": (16, 1), "all": (48, 4)}  # trials, families
MEASURED_SHARE = 1.8  # recorded H100 focal search: see docs/judging.md


def smallest_detectable_exact(n: int, power: float = 0.80, alpha: float = 0.05) -> float:
    """The smallest true difference (in sigma, paired sd sqrt(2)) that a two-sided t test on n pairs detects with
    `power`: solved on the exact noncentral t (scipy.stats.nct)."""
    from scipy.optimize import brentq

    crit = scipy_stats.t.ppf(1 - alpha / 2, n - 1)

    def gap(delta: float) -> float:
        nc = delta / math.sqrt(2) * math.sqrt(n)
        lower = float(np.nan_to_num(scipy_stats.nct.cdf(-crit, n - 1, nc)))  # ~0, and NaN far out in the tail
        return float(scipy_stats.nct.sf(crit, n - 1, nc)) + lower - power

    return float(brentq(gap, 1e-6, 100.0))


def _curves(rng, dev_mean, n_reps, n_trials):
    """Seed-noise curves (reps, trials, evals) with correlation RHO between a run's evaluations, plus its mean."""
    common = rng.standard_normal((n_reps, n_trials, 1))
    own = rng.standard_normal((n_reps, n_trials, EVALS))
    return dev_mean[:, :, None] + math.sqrt(RHO) * common + math.sqrt(1 - RHO) * own


def _asha(values):
    """How many evaluations each trial reaches under ASHA (trials report in order): (reps, trials) ints. The cutoff
    is np.nanpercentile's 50th percentile (linear) of the values recorded at the rung before, computed for all
    repetitions at once on the sorted record (NaN sorts last), with numpy's own interpolation."""
    reps, trials, _ = values.shape
    reached = np.full((reps, trials), EVALS)
    rows = np.arange(reps)
    q = 1 - 1 / RF
    for rung in RUNGS:
        recorded = np.full((reps, trials), np.nan)
        for t in range(trials):
            alive = reached[:, t] >= rung
            v = values[:, t, rung - 1]
            if t:
                ordered = np.sort(recorded[:, :t], axis=1)
                k = t - np.isnan(ordered).sum(axis=1)
                index = (k - 1) * q
                low = np.floor(index).astype(int)
                frac = index - low
                a = ordered[rows, np.clip(low, 0, t - 1)]
                b = ordered[rows, np.clip(low + 1, 0, t - 1)]
                diff = b - a
                cutoff = np.where(frac >= 0.5, b - diff * (1 - frac), a + diff * frac)
                cutoff = np.where(frac == 0, a, cutoff)
                cutoff[k == 0] = np.nan
                stop = alive & ~np.isnan(cutoff) & (v < cutoff)
                reached[stop, t] = rung
            recorded[alive, t] = v[alive]
    return reached


def _asha_reference(values):
    """_asha as first written, one np.nanpercentile per trial (kept to check the vectorised one)."""
    reps, trials, _ = values.shape
    reached = np.full((reps, trials), EVALS)
    for rung in RUNGS:
        recorded = np.full((reps, trials), np.nan)
        for t in range(trials):
            alive = reached[:, t] >= rung
            v = values[:, t, rung - 1]
            if t:
                cutoff = np.nanpercentile(recorded[:, :t], 100 * (1 - 1 / RF), axis=1)
                stop = alive & ~np.isnan(cutoff) & (v < cutoff)
                reached[stop, t] = rung
            recorded[alive, t] = v[alive]
    return reached


def simulate(space: str, reps: int, *, share: float, divergence: float, spread: float = 0.0, margin: float = 0.0,
             seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n_trials, n_families = SPACES[space]
    per = n_trials // n_families
    published_idx = [f * per for f in range(n_families)]
    quality = rng.normal(0, spread, (reps, n_trials)) if spread else np.zeros((reps, n_trials))
    quality[:, published_idx] = 0.0
    if margin:
        better = rng.integers(0, n_trials - n_families, reps)
        searched = np.array([i for i in range(n_trials) if i not in published_idx])
        quality[np.arange(reps), searched[better]] += margin
    dev_mean = quality + rng.normal(0, share, (reps, n_trials)) if share else quality.copy()
    p_fail = np.clip(divergence * rng.uniform(0, 2, (reps, n_trials)), 0, 1)
    search = _curves(rng, dev_mean, reps, n_trials)
    reached = _asha(search)
    diverged = rng.random((reps, n_trials)) < p_fail
    fixed_plan = ConfirmPlan(budget="full", top_k=3, choose_seeds=3, judge_seeds=18, looks=(18,))  # one look
    seq_plan = ConfirmPlan(budget="full", top_k=3, choose_seeds=3, judge_seeds=18)  # the default looks
    seeds = fixed_plan.seeds()
    out = {k: [] for k in ("diff_fixed", "true_diff", "beats_p_fixed", "beats_p_seq", "beats_b_fixed", "beats_b_seq",
                           "truth_p", "truth_b", "runs_seq", "diff_seq", "diff_seq_naive")}
    for r in range(reps):
        curves = []
        for t in range(n_trials):
            status = DIVERGED if diverged[r, t] else FINISHED if reached[r, t] == EVALS else STOPPED
            steps = range(1, (reached[r, t] if not diverged[r, t] else 1) + 1)
            curves.append(TrialCurve(str(t), status, tuple((125 * e, float(search[r, t, e - 1])) for e in steps),
                                     trial_id=f"{t:03d}"))
        ranking = rank_for_confirmation(curves, 3)
        if not ranking:
            continue

        def block(key: int, block_seeds, test: bool, r=r):
            n = len(block_seeds)
            dev = (dev_mean[r, key] + math.sqrt(RHO) * rng.standard_normal(n)[:, None]
                   + math.sqrt(1 - RHO) * rng.standard_normal((n, EVALS))).max(axis=1)
            tests = quality[r, key] + rng.standard_normal(n)
            lost = rng.random(n) < p_fail[r, key]
            return tuple(SeedScore(s, DIVERGED, None) if lost[i] else
                         SeedScore(s, FINISHED, float(dev[i]), {"avg": float(tests[i])} if test else {})
                         for i, s in enumerate(block_seeds))

        choose = {int(x.key): block(int(x.key), seeds.choose, False) for x in ranking}
        ranked = [ConfigScores(x.key, x.rank, choose=choose[int(x.key)]) for x in ranking]
        winner = choose_winner(ranked, fixed_plan)
        if winner is None:
            continue
        w = int(winner)
        pub = (w // per) * per
        judged = {k: block(k, seeds.judge, True) for k in {w, pub}}
        base = UntouchedFigures(0.0, {"avg": 0.0})

        def configs(n, w=w, pub=pub, judged=judged, ranked=ranked, winner=winner):
            cs = [ConfigScores(c.key, c.search_rank, choose=c.choose, judge=judged[w][:n] if c.key == winner else ())
                  for c in ranked]
            if pub != w:
                cs = [c if c.key != str(pub) else ConfigScores(c.key, c.search_rank, c.choose, judged[pub][:n])
                      for c in cs]
                if str(pub) not in {c.key for c in cs}:
                    cs.append(ConfigScores(str(pub), None, judge=judged[pub][:n]))
            return cs

        fixed = decide(configs(18), published=str(pub), baseline=base, plan=fixed_plan)
        for n in seq_plan.design_looks:  # as the judge stage: decide after each look, stop when it says so
            seq = decide(configs(n), published=str(pub), baseline=base, plan=seq_plan)
            if seq.stopped:
                break
        out["runs_seq"].append(n * (2 if pub != w else 1))
        out["truth_p"].append(quality[r, w] - quality[r, pub])
        out["truth_b"].append(quality[r, w])
        out["beats_p_fixed"].append(fixed.beats_published)
        out["beats_p_seq"].append(seq.beats_published)
        out["beats_b_fixed"].append(fixed.beats_baseline)
        out["beats_b_seq"].append(seq.beats_baseline)
        same = pub == w
        # the reported difference: the decision's estimate, the test average over the pairs both ran, adjusted for
        # early stopping at the sequential design's stopping look (the judged interval also counts failures)
        est_fixed, est_seq = fixed.estimate_published, seq.estimate_published
        out["diff_fixed"].append(np.nan if same or est_fixed is None else est_fixed.estimate)
        out["diff_seq"].append(np.nan if same or est_seq is None else est_seq.estimate)
        out["diff_seq_naive"].append(np.nan if same or est_seq is None else est_seq.naive)
        out["true_diff"].append(np.nan if same else quality[r, w] - quality[r, pub])
    a = {k: np.asarray(v, float) for k, v in out.items()}
    return summarise(a, margin)


def _rate(flags) -> dict:
    n = len(flags)
    p = float(np.mean(flags)) if n else float("nan")
    return {"rate": p, "mc": math.sqrt(p * (1 - p) / n) if n else float("nan"), "n": n}


def summarise(a: dict, margin: float) -> dict:
    ok = ~np.isnan(a["diff_fixed"])
    bias = a["diff_fixed"][ok] - a["true_diff"][ok]
    ok_seq = ~np.isnan(a["diff_seq"])
    bias_seq = a["diff_seq"][ok_seq] - a["true_diff"][ok_seq]
    bias_naive = a["diff_seq_naive"][ok_seq] - a["true_diff"][ok_seq]
    fixed_runs = np.where(np.isnan(a["true_diff"]), 18, 36)
    null_p, null_b = a["truth_p"] <= 0, a["truth_b"] <= 0
    result = {"reps": len(a["truth_p"]),
              "bias": {"mean": float(bias.mean()) if ok.any() else float("nan"),
                       "mc": float(bias.std(ddof=1) / math.sqrt(ok.sum())) if ok.sum() > 1 else float("nan")},
              "bias_seq": {"mean": float(bias_seq.mean()) if ok_seq.any() else float("nan"),
                           "mc": float(bias_seq.std(ddof=1) / math.sqrt(ok_seq.sum())) if ok_seq.sum() > 1
                           else float("nan")},
              "bias_seq_naive": {"mean": float(bias_naive.mean()) if ok_seq.any() else float("nan"),
                                 "mc": float(bias_naive.std(ddof=1) / math.sqrt(ok_seq.sum())) if ok_seq.sum() > 1
                                 else float("nan")},
              "rmse_seq": {"adjusted": float(np.sqrt((bias_seq ** 2).mean())) if ok_seq.any() else float("nan"),
                           "naive": float(np.sqrt((bias_naive ** 2).mean())) if ok_seq.any() else float("nan"),
                           "fixed": float(np.sqrt((bias ** 2).mean())) if ok.any() else float("nan")},
              "false_beats_published": {d: _rate(a[f"beats_p_{d}"][null_p].astype(bool)) for d in ("fixed", "seq")},
              "false_beats_untouched": {d: _rate(a[f"beats_b_{d}"][null_b].astype(bool)) for d in ("fixed", "seq")},
              "judging_runs": {"fixed": float(fixed_runs.mean()), "seq": float(a["runs_seq"].mean()),
                               "seq_mc": float(a["runs_seq"].std(ddof=1) / math.sqrt(len(a["runs_seq"])))}}
    result["judging_runs"]["saved"] = 1 - result["judging_runs"]["seq"] / result["judging_runs"]["fixed"]
    if margin:
        result["power"] = {d: _rate(a[f"beats_p_{d}"].astype(bool)) for d in ("fixed", "seq")}
    return result


def worst_cases(rows: list[dict]) -> list[str]:
    """The worst scenario for each of the issue's targets, in words."""
    def pct(x):
        return f"{100 * x['rate']:.2f} ± {100 * x['mc']:.2f}%"

    def name(r):
        return (f"{r['space']}, share {r['share']}, divergence {r['divergence']:.0%}"
                + (f", {r['margin']:g} sigma better" if r["margin"] else "")
                + (", spread 0.5" if r.get("spread") else ""))
    lines = []
    b = max(rows, key=lambda r: abs(r["bias"]["mean"]))
    lines.append(f"|bias| <= 0.05 sigma (fixed): worst {b['bias']['mean']:+.3f} ± {b['bias']['mc']:.3f} ({name(b)})")
    b = max(rows, key=lambda r: abs(r["bias_seq"]["mean"]))
    lines.append(f"|bias| <= 0.05 sigma of the reported estimate at the stopping look, adjusted for early stopping "
                 f"(seq): worst {b['bias_seq']['mean']:+.3f} ± {b['bias_seq']['mc']:.3f} ({name(b)}): "
                 f"{'holds' if abs(b['bias_seq']['mean']) <= 0.05 else 'FAILS'}")
    b = max(rows, key=lambda r: abs(r["bias_seq_naive"]["mean"]))
    lines.append(f"|bias| of the naive mean at the stopping look (seq, not reported as the estimate): worst "
                 f"{b['bias_seq_naive']['mean']:+.3f} ± {b['bias_seq_naive']['mc']:.3f} ({name(b)})")
    for key, words in (("false_beats_published", "false beats published"), ("false_beats_untouched",
                                                                            "false beats untouched")):
        for design in ("fixed", "seq"):
            r = max(rows, key=lambda r: r[key][design]["rate"])
            held = sum(r[key][design]["rate"] <= 0.025 + 2 * r[key][design]["mc"] for r in rows)
            lines.append(f"{words} ({design}) <= 2.5% + 2 MC errors: highest {pct(r[key][design])} ({name(r)}); "
                         f"holds in {held} of {len(rows)} scenarios")
    groups = {"null": lambda r: not r["margin"] and not r.get("spread"), "2 sigma": lambda r: r["margin"] == 2.0,
              "20% divergence": lambda r: r["divergence"] == 0.20}
    for label, chosen in groups.items():
        picked = [r for r in rows if chosen(r)]
        if picked:
            r = min(picked, key=lambda r: r["judging_runs"]["saved"])
            jr = r["judging_runs"]
            lines.append(f"judging runs saved >= 35% ({label}): worst {100 * jr['saved']:.1f}% "
                         f"({jr['fixed']:.2f} -> {jr['seq']:.2f} ± {jr['seq_mc']:.2f} runs; {name(r)}): "
                         f"{'holds' if jr['saved'] >= 0.35 else 'FAILS'}")
    for r in rows:
        if r["margin"] == 1.0:
            gap = r["power"]["seq"]["rate"] - r["power"]["fixed"]["rate"]
            lines.append(f"power at 1 sigma, seq - fixed >= -5 points: {100 * gap:+.2f} points ({name(r)}): "
                         f"{'holds' if gap >= -0.05 else 'FAILS'}")
    return lines


def scenarios(which: str):
    """The scenarios of `which`: "all" (30), "quick" (3), or "affected": those of "all" whose true differences are not
    all 0 (1 and 2 sigma better, a spread of true means), where the stopping rule biases the naive mean; each keeps
    its place in "all" as its seed, so its draws are those of the full run."""
    if which == "affected":
        for i, sc in enumerate(scenarios("all")):
            if sc["margin"] or sc.get("spread"):
                yield {**sc, "seed": i}
        return
    shares = (0.1, 0.3, 0.5, MEASURED_SHARE) if which == "all" else (0.5,)
    divergences = (0.0, 0.05, 0.20) if which == "all" else (0.05,)
    spaces = ("focal", "all") if which == "all" else ("focal",)
    for space in spaces:
        for share in shares:
            for divergence in divergences:
                yield {"space": space, "share": share, "divergence": divergence, "margin": 0.0}
        for margin in (1.0, 2.0):
            yield {"space": space, "share": 0.3, "divergence": 0.05, "margin": margin}
        yield {"space": space, "share": 0.3, "divergence": 0.05, "spread": 0.5, "margin": 0.0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--scenarios", choices=("all", "quick", "affected"), default="all")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    started, cpu_started = time.perf_counter(), time.process_time()
    rows = []
    print(f"smallest detectable difference, exact noncentral t, 80% power: n = 2: "
          f"{smallest_detectable_exact(2):.1f} sigma, n = 18: {smallest_detectable_exact(18):.2f} sigma")
    print("space share div  margin | bias ± mc fixed; seq adjusted (seq naive) | false beats pub fixed/seq | "
          "false beats untouched fixed/seq | runs fixed -> seq (saved) | power fixed/seq")
    for i, sc in enumerate(scenarios(args.scenarios)):
        res = simulate(sc["space"], args.reps, share=sc["share"], divergence=sc["divergence"],
                       spread=sc.get("spread", 0.0), margin=sc["margin"], seed=sc.get("seed", i))
        rows.append({**sc, **res})
        fp, fb, jr = res["false_beats_published"], res["false_beats_untouched"], res["judging_runs"]

        def pct(x):
            return f"{100 * x['rate']:.2f}±{100 * x['mc']:.2f}%"
        power = (f"{pct(res['power']['fixed'])}/{pct(res['power']['seq'])}" if "power" in res else "-")
        print(f"{sc['space']:5} {sc['share']:4.1f} {sc['divergence']:4.2f} {sc['margin']:4.1f}"
              f"{' spread ' + str(sc['spread']) if sc.get('spread') else ''} | "
              f"{res['bias']['mean']:+.3f}±{res['bias']['mc']:.3f}; {res['bias_seq']['mean']:+.3f}"
              f"±{res['bias_seq']['mc']:.3f} ({res['bias_seq_naive']['mean']:+.3f}) | "
              f"{pct(fp['fixed'])}/{pct(fp['seq'])} | "
              f"{pct(fb['fixed'])}/{pct(fb['seq'])} | {jr['fixed']:.1f} -> {jr['seq']:.1f} "
              f"({100 * jr['saved']:.0f}%) | "
              f"{power}", flush=True)
    for line in worst_cases(rows):
        print(line)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"wall time {wall:.0f} s, CPU time {cpu:.0f} s ({args.reps} repetitions per scenario)")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"reps": args.reps, "wall_s": wall, "cpu_s": cpu, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
