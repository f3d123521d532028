"""Selection bias of a search's answer: `raycse.judging.decision` against today's rule, on simulated searches.

    python benchmarks/selection_bias.py --budget full [--reps N] [--choose-seeds C] [--output FILE]
    python benchmarks/selection_bias.py --budget cpu

Every figure is in units of the seed noise sigma. What is simulated (the same for both rules):

  configurations  num_samples of them (full 16, cpu 4), the published point first (a search enqueues it first).
                  null: every configuration equal, and training does nothing (a trained run's expected test
                  figure is the untouched model's). power: one configuration, drawn at random among the others,
                  truly `--margin` sigma better than the rest on dev and on test.
  a run           two dev evaluations (full: steps 125 and 186; cpu: 8 and 16), each the configuration's mean plus
                  Gaussian seed noise of std 1, the two correlated `--rho` (a seed that does well early tends to
                  do well at the end); the run's dev figure is the best of them (the trainer keeps the best
                  checkpoint). Its test figure: the configuration's test mean plus independent N(0, 1). The
                  untouched model's dev and test figures are 0 (one evaluation each).
  ASHA            simplified to trials arriving one at a time in trial order: a trial is stopped at its rung
                  (the first evaluation) when its value there is below the median of the earlier trials' rung
                  values (reduction factor 2, Ray's cutoff rule); the first trial always continues. Full budget
                  only: in the CPU budget the rung is the last evaluation, so nothing stops.
  the issue's     `model: single` in the output: one figure per run, N(mean, 1), no ASHA: the model of issue 22's
  model           simulation, under which today's rule shows its +1.0 sigma bias and 8.9% false "beats".

Measured, per rule and scenario: the bias of the reported winner - published difference (its mean minus the
true difference, over the repetitions whose winner is not the published point), the rate of "beats the
published point" and of "beats the untouched model", and, in the power scenario, the same rates and how often
the truly better configuration won; each with its Monte-Carlo standard error.

The new rule runs raycse.driver's own functions on every repetition: `rank_for_confirmation` on the search
stage's curves, `choose_winner` on the choosing block (the configurations the driver then judges) and `decide`
on everything, whose fields are what is counted. Only the random draws are vectorised. Today's rule is
reimplemented here with numpy, as `raycse/search.py` (before issue 22) does it: top_k by the search stage's
best value (stopped and finished alike) plus the published point, each over seeds 42, 43, ...; the search run of
seed 42 counted as that seed's confirmation run (an ASHA-stopped one retrained at seed 42, which repeats its
curve); the winner the best mean of them; "beats the published point" the paired interval's low end > 0 over
those seeds; "beats the untouched model" `mean > baseline` on dev.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package: take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats as scipy_stats  # noqa: E402

from raycse.judging.confirmation_plan import ConfirmPlan, default_plan  # noqa: E402
from raycse.judging.decision import choose_winner, decide  # noqa: E402
from raycse.judging.ranking import TrialCurve, rank_for_confirmation  # noqa: E402
from raycse.judging.seed_scores import ConfigScores, SeedScore, UntouchedFigures  # noqa: E402
from raycse.records import FINISHED, STOPPED  # noqa: E402

# the budgets of search_spaces/focal.yaml: trials, evaluation steps, whether ASHA can stop a trial, and today's
# confirmation (top_k configurations + the published point over `seeds` seeds from 42)
BUDGETS = {
    "full": {"num_samples": 16, "steps": (125, 186), "asha": True, "today": {"top_k": 3, "seeds": 3}},
    "cpu": {"num_samples": 4, "steps": (8, 16), "asha": False, "today": {"top_k": 1, "seeds": 2}},
}
DEFAULT_REPS = {"full": 40000, "cpu": 40000}
TARGET_BIAS, NOMINAL = 0.05, 0.025


@dataclass(frozen=True)
class Model:
    name: str  # "curve" (two evaluations, ASHA) or "single" (the issue's: one figure per run, no ASHA)
    rho: float
    asha: bool


def run_figures(rng: np.random.Generator, shape: tuple[int, ...], model: Model) -> np.ndarray:
    """The dev noise of trained runs: the best of a run's evaluations (one evaluation in the single model)."""
    end = rng.standard_normal(shape)
    if model.name == "single":
        return end
    rung = model.rho * end + math.sqrt(1 - model.rho**2) * rng.standard_normal(shape)
    return np.maximum(rung, end)


def search_stage(rng: np.random.Generator, reps: int, k: int, model: Model) -> tuple[np.ndarray, ...]:
    """The search stage's noise: each trial's rung and end values and whether ASHA stopped it at the rung."""
    end = rng.standard_normal((reps, k))
    if model.name == "single":
        return end, end, np.zeros((reps, k), bool)
    rung = model.rho * end + math.sqrt(1 - model.rho**2) * rng.standard_normal((reps, k))
    stopped = np.zeros((reps, k), bool)
    if model.asha:
        for c in range(1, k):
            stopped[:, c] = rung[:, c] < np.median(rung[:, :c], axis=1)
    return rung, end, stopped


def rate(flags: np.ndarray) -> dict:
    p = float(np.mean(flags))
    return {"rate": p, "mc_error": math.sqrt(p * (1 - p) / len(flags))}


def mean_and_error(values: np.ndarray) -> dict:
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return {"mean": None, "mc_error": None, "n": int(len(values))}
    return {"mean": float(values.mean()), "mc_error": float(values.std(ddof=1) / math.sqrt(len(values))),
            "n": int(len(values))}


def truth(rng: np.random.Generator, reps: int, k: int, scenario: str, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Each configuration's true mean (on dev and test alike) and the index of the better one (-1: none)."""
    means = np.zeros((reps, k))
    better = np.full(reps, -1)
    if scenario == "power":
        better = rng.integers(1, k, size=reps)
        means[np.arange(reps), better] = margin
    return means, better


# ------------------------------------------------------------------------------------------ the new rule
def simulate_decision(rng: np.random.Generator, budget: str, plan: ConfirmPlan, scenario: str, reps: int,
                      model: Model, margin: float) -> dict:
    setting = BUDGETS[budget]
    k, (rung_step, end_step) = setting["num_samples"], setting["steps"]
    means, better = truth(rng, reps, k, scenario, margin)
    rung, end, stopped = search_stage(rng, reps, k, model)
    rung, end = rung + means, end + means
    seeds = plan.seeds()
    on_test = plan.judging_seeds_on_test  # the judging seeds whose runs have a test figure
    choose = run_figures(rng, (reps, k, len(seeds.choose)), model) + means[:, :, None]
    judge = run_figures(rng, (reps, k, len(seeds.judge)), model) + means[:, :, None]
    judge_test = rng.standard_normal((reps, k, len(seeds.judge))) + means[:, :, None]
    baseline = UntouchedFigures(dev=0.0, test={plan.test_key: 0.0})
    published = "c0"
    out = {name: np.zeros(reps) for name in ("diff", "true_diff", "beats_published", "below_published",
                                             "beats_baseline", "winner_is_better", "better_ranked", "detectable",
                                             "seed_noise")}
    for i in range(reps):
        trials = tuple(
            TrialCurve(f"c{c}", STOPPED if stopped[i, c] else FINISHED,
                       ((rung_step, float(rung[i, c])),) if stopped[i, c] else
                       (((rung_step, float(rung[i, c])), (end_step, float(end[i, c]))) if model.name != "single"
                        else ((end_step, float(end[i, c])),)), f"{c:02d}")
            for c in range(k))
        ranked = rank_for_confirmation(trials, plan.top_k)
        candidates = {r.key: ConfigScores(r.key, r.rank, tuple(
            SeedScore(seed, FINISHED, v) for seed, v in zip(seeds.choose, choose[i, int(r.key[1:])].tolist())))
            for r in ranked}
        winner = choose_winner(list(candidates.values()), plan)
        configs = []
        for key in list(candidates) + ([published] if published not in candidates else []):
            c = int(key[1:])
            judged = () if key not in (winner, published) else tuple(
                SeedScore(seed, FINISHED, v, {plan.test_key: t} if j < on_test else {})
                for j, (seed, v, t) in enumerate(zip(seeds.judge, judge[i, c].tolist(), judge_test[i, c].tolist())))
            config = candidates.get(key, ConfigScores(key, None))
            configs.append(ConfigScores(key, config.search_rank, config.choose, judged))
        d = decide(configs, published=published, baseline=baseline, plan=plan)
        w = int(d.winner[1:])
        out["diff"][i] = d.versus_published.mean if d.versus_published is not None else np.nan
        out["true_diff"][i] = means[i, w] - means[i, 0]
        out["beats_published"][i] = d.beats_published
        out["below_published"][i] = d.below_published
        out["beats_baseline"][i] = d.beats_baseline
        out["winner_is_better"][i] = w == better[i]
        out["better_ranked"][i] = f"c{better[i]}" in candidates
        out["detectable"][i] = d.detectable if d.detectable is not None else np.nan
        out["seed_noise"][i] = d.seed_noise if d.seed_noise is not None else np.nan
    return summarise_run(out, scenario)


# ------------------------------------------------------------------------------------------ today's rule
def simulate_today(rng: np.random.Generator, budget: str, scenario: str, reps: int, model: Model,
                   margin: float) -> dict:
    setting = BUDGETS[budget]
    k, top_k, n_seeds = setting["num_samples"], setting["today"]["top_k"], setting["today"]["seeds"]
    means, better = truth(rng, reps, k, scenario, margin)
    rung, end, stopped = search_stage(rng, reps, k, model)
    rung, end = rung + means, end + means
    full_run = np.maximum(rung, end)
    searched = np.where(stopped, rung, full_run)  # best_objective: a stopped trial's best up to its stop
    top = np.argsort(-searched, axis=1, kind="stable")[:, :top_k]
    candidate = np.zeros((reps, k), bool)
    np.put_along_axis(candidate, top, True, axis=1)
    candidate[:, 0] = True  # the published point
    # seed 42: the search run itself (finished), or its retraining at seed 42, which repeats the same curve
    values = np.concatenate([full_run[:, :, None],
                             run_figures(rng, (reps, k, n_seeds - 1), model) + means[:, :, None]], axis=2)
    mean = np.where(candidate, values.mean(axis=2), -np.inf)
    winner = mean.argmax(axis=1)
    rows = np.arange(reps)
    diffs = values[rows, winner] - values[:, 0]
    diff = diffs.mean(axis=1)
    half = scipy_stats.t.ppf(0.975, n_seeds - 1) * diffs.std(axis=1, ddof=1) / math.sqrt(n_seeds)
    not_published = winner != 0
    out = {"diff": np.where(not_published, diff, np.nan), "true_diff": means[rows, winner] - means[:, 0],
           "beats_published": not_published & (diff - half > 0),
           "below_published": not_published & (diff + half < 0),
           "beats_baseline": mean[rows, winner] > 0.0,  # mean > the untouched model's dev figure
           "winner_is_better": winner == better, "better_ranked": (top == better[:, None]).any(axis=1)}
    return summarise_run(out, scenario)


def summarise_run(out: dict[str, np.ndarray], scenario: str) -> dict:
    reported = np.isfinite(out["diff"])
    result = {"bias": mean_and_error(out["diff"][reported] - out["true_diff"][reported]),
              "winner_is_published": rate(~reported),
              "beats_published": rate(out["beats_published"].astype(bool)),
              "below_published": rate(out["below_published"].astype(bool)),
              "beats_baseline": rate(out["beats_baseline"].astype(bool))}
    if scenario == "power":
        result["winner_is_better"] = rate(out["winner_is_better"].astype(bool))
        # how often the search stage ranked the better configuration among the top_k: the most choosing can do
        result["better_ranked"] = rate(out["better_ranked"].astype(bool))
    for name in ("detectable", "seed_noise"):
        if name in out:
            values = out[name][np.isfinite(out[name])]
            result[name] = {"mean": float(values.mean()), "median": float(np.median(values))} if len(values) else None
    return result


def meets_targets(null: dict) -> dict:
    bias = null["bias"]["mean"]
    checks = {"bias": bias is not None and abs(bias) <= TARGET_BIAS}
    for name in ("beats_published", "beats_baseline"):
        checks[name] = null[name]["rate"] <= NOMINAL + 2 * null[name]["mc_error"]
    return checks


def run(budget: str, reps: int, seed: int = 0, margin: float = 1.0, rho: float = 0.7,
        choose_seeds: int | None = None, judge_seeds: int | None = None) -> dict:
    """Both rules, both scenarios, for one budget; the new rule under the curve model, today's under both."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    overrides = {k: v for k, v in (("choose_seeds", choose_seeds), ("judge_seeds", judge_seeds)) if v is not None}
    plan = default_plan(budget, num_samples=BUDGETS[budget]["num_samples"], **overrides)
    curve = Model("curve", rho, BUDGETS[budget]["asha"])
    single = Model("single", 0.0, False)
    result = {"budget": budget, "reps": reps, "seed": seed, "margin_sigma": margin, "rho": rho,
              "num_samples": BUDGETS[budget]["num_samples"],
              "plan": {"top_k": plan.top_k, "choose_seeds": len(plan.seeds().choose), "judge_seeds": plan.judge_seeds,
                       "test_seeds": plan.judging_seeds_on_test},
              "today_plan": BUDGETS[budget]["today"], "rules": {}}
    for rule, model in (("decision", curve), ("decision", single), ("today", curve), ("today", single)):
        entry = {}
        for scenario in ("null", "power"):
            if rule == "decision":
                entry[scenario] = simulate_decision(rng, budget, plan, scenario, reps, model, margin)
            else:
                entry[scenario] = simulate_today(rng, budget, scenario, reps, model, margin)
        entry["meets_targets"] = meets_targets(entry["null"])
        result["rules"][f"{rule}/{model.name}"] = entry
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def line(budget: str, name: str, entry: dict) -> str:
    def pct(r: dict) -> str:
        return f"{100 * r['rate']:.1f}% ± {100 * r['mc_error']:.1f}"

    null, power = entry["null"], entry["power"]
    bias = null["bias"]
    text = (f"{budget:4s} {name:15s} null: bias {bias['mean']:+.3f} ± {bias['mc_error']:.3f} sigma, "
            f"beats published {pct(null['beats_published'])}, beats untouched {pct(null['beats_baseline'])}; "
            f"power at the margin: beats published {pct(power['beats_published'])}, "
            f"beats untouched {pct(power['beats_baseline'])}, better one ranked in the top_k "
            f"{pct(power['better_ranked'])} and wins {pct(power['winner_is_better'])}")
    if null.get("detectable"):
        text += f"; smallest detectable difference (median) {null['detectable']['median']:.2f} sigma"
    return text + f"; targets met: {all(entry['meets_targets'].values())}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=sorted(BUDGETS), required=True)
    parser.add_argument("--reps", type=int, default=None, help="repetitions per rule and scenario "
                        f"(default: {DEFAULT_REPS})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--margin", type=float, default=1.0, help="the better configuration's margin, in sigma")
    parser.add_argument("--rho", type=float, default=0.7, help="correlation of a run's two evaluations")
    parser.add_argument("--choose-seeds", type=int, default=None, help="override the budget's default")
    parser.add_argument("--judge-seeds", type=int, default=None, help="override the budget's default")
    parser.add_argument("--output", default=None, help="write the JSON here too")
    args = parser.parse_args(argv)
    reps = args.reps or DEFAULT_REPS[args.budget]
    if reps < 2:
        print("selection_bias: error: --reps must be at least 2", file=sys.stderr)
        return 2
    result = run(args.budget, reps, args.seed, args.margin, args.rho, args.choose_seeds, args.judge_seeds)
    print(json.dumps(result))
    for name, entry in result["rules"].items():
        print(line(args.budget, name, entry))
    print(f"{args.budget}: {reps} repetitions per rule and scenario, {result['seconds']} s")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
