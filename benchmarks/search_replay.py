"""Replayed searches: raycse's real searcher and scheduler, each trial's training replaced by a recorded landscape.

A search is an event loop over a simulated clock with `slots` trials at once, driving the objects `raycse search`
builds (so that what is measured is what users run):

  searcher   raycse.driver.tune.searcher.TaggedOptunaSearch over the sampler raycse.sampling.samplers builds from the
             plan (the published point enqueued first, an in-memory study instead of the SQLite one);
  scheduler  driver/tune/newest_first.scheduler(plan): ASHA over training steps from the space's scheduler settings
             (grace period, reduction factor, max_t), or FIFO;
  ranking    raycse.judging.ranking.rank_for_confirmation: the configuration the search hands to confirmation.

and calling them as Ray Tune's TuneController does (ray/tune/execution/tune_controller.py): each evaluation goes
to scheduler.on_trial_result, and on CONTINUE to searcher.on_trial_result; a STOP ends the trial with the last
result (scheduler.on_trial_complete, searcher.on_trial_complete: Optuna is told PRUNED); a trial that trains to
its end reports its best objective with `final` set (raycse.driver.tune.trial.final_metrics), which Optuna is told as
COMPLETE. A trial's curve is the surrogate's at the recorded steps, with the seed noise of the trial's training
seed (every search-stage trial trains with the search's base seed, as in raycse); its cost is the surrogate's
seconds for the steps it reached; its reports arrive at start-up + steps x step time + evaluations x their time.

Not replayed: Ray's runtime (actors, placement, the trial's process), which `raycse search` adds on top; the
concurrency test in tests/test_concurrency.py measures that side on a real Ray.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

# the hand grids a researcher writes around focal's published point (tau 0.07, m 0.3, lr 3e-5), lr kept fixed as
# hand grids keep it; one per budget (its size). Other spaces get an even grid over their ranges (`hand_grid`).
FOCAL_GRIDS = {
    8: {"tau": [0.03, 0.05, 0.07, 0.1], "m": [0.1, 0.3], "lr": [3e-5]},
    16: {"tau": [0.03, 0.05, 0.07, 0.1], "m": [0.1, 0.2, 0.3, 0.5], "lr": [3e-5]},
    32: {"tau": [0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 0.14, 0.2], "m": [0.1, 0.2, 0.3, 0.5], "lr": [3e-5]},
}


class _Trial:
    """What ASHA reads of Tune's Trial: its id."""

    def __init__(self, trial_id: str):
        self.trial_id = trial_id


@dataclass
class Replay:
    """One replayed search: its trials in start order and what it hands to confirmation over time."""

    trials: list[dict] = field(default_factory=list)  # id, config, status, curve, start, end, seconds
    answers: list[dict] = field(default_factory=list)  # after each trial ends: trials ended, gpu seconds, answer
    study: Any = None

    def answer(self) -> dict | None:
        return self.answers[-1]["config"] if self.answers else None


_PLANS: dict[tuple, Any] = {}


def plan_of(surrogate, *, sampler: str, asha: bool, budget: int, seed: int, settings: dict | None = None):
    """The SearchSpace `raycse search` would run for the landscape's setting: its loss, space, published point and
    trial length, the given budget (num_samples), sampler, scheduler and seed. Validated as a space file is (once:
    the validation builds each corner's objective, which reads STS-B)."""
    key = (id(surrogate), sampler, asha, budget, json.dumps(settings or {}, sort_keys=True))
    if key not in _PLANS:
        _PLANS[key] = _parse_plan(surrogate, sampler=sampler, asha=asha, budget=budget, settings=settings)
    return dataclasses.replace(_PLANS[key], seed=seed)


def _parse_plan(surrogate, *, sampler: str, asha: bool, budget: int, settings: dict | None):
    from raycse.settings.space import parse_space

    setting = surrogate.setting
    train = setting["train"]
    raw = {
        "experiment": "raycse-landscape-replay",  # never a run: the name only has to be a valid one
        "loss": setting["loss"], "space": setting["space"], "published": setting.get("published") or {},
        "train": {"max_steps": surrogate.steps[-1], "eval_steps": surrogate.steps[0],
                  "batch_size": train.get("batch_size", 16)},
        "search": {"num_samples": budget, "sampler": {"name": sampler, **(settings or {})},
                   "scheduler": {"name": "asha" if asha else "fifo", "grace_evals": 1, "reduction_factor": 2}},
    }
    if train.get("max_len"):
        raw["train"]["max_len"] = train["max_len"]
    return parse_space(raw, where=f"landscape:{setting.get('space_file', '?')}")


def hand_grid(surrogate, budget: int) -> list[dict]:
    """The hand grid of `budget` points: FOCAL_GRIDS for focal's space, else an even grid over each non-lr
    parameter's range (log scale for log ones) with lr at its published value."""
    names = [axis.name for axis in surrogate.axes]
    if set(names) == {"tau", "m", "lr"} and budget in FOCAL_GRIDS:
        grid = FOCAL_GRIDS[budget]
    else:
        free = [axis for axis in surrogate.axes if axis.name != "lr" or "lr" not in surrogate.published]
        per = max(1, round(budget ** (1.0 / len(free))))
        grid = {axis.name: [axis.from_unit((i + 0.5) / per) for i in range(per)] for axis in free}
        grid.update({n: [surrogate.published[n]] for n in names if n not in grid})
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    return points[:budget]


def replay(surrogate, *, strategy: str, asha: bool, budget: int, slots: int, seed: int,
           settings: dict | None = None) -> Replay:
    """One search of `budget` trials, `slots` at once; `strategy` is a sampler name or 'grid'. `seed` seeds the
    sampler and, offset, the trials' training seed (so each repetition draws its own seed luck)."""
    from ray.tune.schedulers import TrialScheduler

    from raycse.driver.tune import newest_first
    from raycse.driver.tune.searcher import TaggedOptunaSearch
    from raycse.judging.ranking import TrialCurve, rank_for_confirmation
    from raycse.records import FINAL, FINISHED, OBJECTIVE, STOPPED
    from raycse.sampling import samplers as strategies

    grid = strategy == "grid"
    plan = plan_of(surrogate, sampler="random" if grid else strategy, asha=asha, budget=budget, seed=seed,
                   settings=settings)
    scheduler = newest_first.scheduler(plan)
    scheduler.set_search_properties(OBJECTIVE, "max")
    searcher = None
    if not grid:
        searcher = TaggedOptunaSearch(space=plan.define_by_run, metric=OBJECTIVE, mode="max",
                                      points_to_evaluate=plan.points_to_evaluate() or None,
                                      sampler=strategies.sampler(plan, strategy))
    queue = hand_grid(surrogate, budget) if grid else None
    training_seed = 1_000_003 + seed  # all of a search's trials share it, as raycse's base seed
    out = Replay(study=None if searcher is None else searcher._ot_study)
    events: list[tuple[float, int, str, int]] = []
    order = itertools.count()
    running: dict[str, dict] = {}
    spent = 0.0
    clock = 0.0

    def arrival(start: float, index: int) -> float:
        return start + surrogate.startup_s + surrogate.steps[index] * surrogate.step_s + (index + 1) * surrogate.eval_s

    def start() -> None:
        trial_id = f"{len(out.trials):05d}"
        config = dict(queue[len(out.trials)]) if grid else plan.params_of(searcher.suggest(trial_id))
        curve = surrogate.curve(config, training_seed)
        record = {"id": trial_id, "config": config, "curve": curve, "start": clock, "end": None, "status": None,
                  "reported": []}
        out.trials.append(record)
        running[trial_id] = record
        scheduler.on_trial_add(None, _Trial(trial_id))
        heapq.heappush(events, (arrival(clock, 0), next(order), trial_id, 0))

    def end(record: dict, status: str, result: dict) -> None:
        nonlocal spent
        scheduler.on_trial_complete(None, _Trial(record["id"]), result)
        if searcher is not None:
            searcher.on_trial_complete(record["id"], result)
        record.update(status=status, end=clock, seconds=surrogate.seconds(record["reported"][-1][0]))
        spent += record["seconds"]
        del running[record["id"]]
        ranked = rank_for_confirmation([TrialCurve(t["id"], t["status"], tuple(t["reported"]), t["id"])
                                        for t in out.trials if t["status"]], top_k=1)
        top = next(t for t in out.trials if t["id"] == ranked[0].key) if ranked else None
        out.answers.append({"ended": sum(1 for t in out.trials if t["status"]), "seconds": spent, "clock": clock,
                            "config": None if top is None else top["config"]})

    while len(out.trials) < budget and len(running) < slots:
        start()
    while events:
        clock, _, trial_id, index = heapq.heappop(events)
        record = running[trial_id]
        step, value = record["curve"][index]
        record["reported"].append((step, value))
        result = {"step": step, OBJECTIVE: value, "training_iteration": index + 1}
        decision = scheduler.on_trial_result(None, _Trial(trial_id), result)
        if decision == TrialScheduler.STOP:
            end(record, STOPPED, result)
        else:
            if searcher is not None:
                searcher.on_trial_result(trial_id, result)
            if index + 1 < len(record["curve"]):
                heapq.heappush(events, (arrival(record["start"], index + 1), next(order), trial_id, index + 1))
            else:  # the trainable's last report: its best objective, as raycse.driver.tune.trial.final_metrics
                final = {"step": step, OBJECTIVE: max(v for _, v in record["reported"]), FINAL: 1,
                         "training_iteration": index + 2}
                decision = scheduler.on_trial_result(None, _Trial(trial_id), final)
                if searcher is not None and decision != TrialScheduler.STOP:
                    searcher.on_trial_result(trial_id, final)
                end(record, FINISHED, final)
        while len(out.trials) < budget and len(running) < slots:
            start()
    return out


def mean_running(trials: list[dict]) -> float:
    """The mean number of trials running between the first start and the last end (from start/end times)."""
    begin, finish = min(t["start"] for t in trials), max(t["end"] for t in trials)
    if finish <= begin:
        return float(len(trials))
    return sum(t["end"] - t["start"] for t in trials) / (finish - begin)


def band(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (t quantile, n - 1 df)."""
    from scipy.stats import t as student

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(student.ppf(0.975, n - 1) * sd / math.sqrt(n))


# ------------------------------------------------------------------------------------------------ the benchmark
STRATEGIES = ("random", "grid", "tpe-optuna", "tpe", "prior")
BUDGETS = (4, 8, 16, 32)  # 4: the shipped CPU budget; 16: the full one
_SURROGATE = None  # the parent's fitted surrogate, inherited by forked workers


def _one(task: tuple[str, bool, int, int, int]) -> dict:
    strategy, asha, budget, rep, slots = task
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    surrogate = _SURROGATE
    search = replay(surrogate, strategy=strategy, asha=asha, budget=budget, slots=slots, seed=rep)
    cache: dict[tuple, float] = {}

    def worth(config):
        key = tuple(sorted(config.items()))
        if key not in cache:
            cache[key] = surrogate.true_objective(config)
        return cache[key]

    row = {"strategy": strategy, "asha": asha, "budget": budget, "rep": rep,
           "true": worth(search.answer()), "seconds": search.answers[-1]["seconds"],
           "finished": sum(1 for t in search.trials if t["status"] == "finished"),
           "mean_running": mean_running(search.trials), "answer": search.answer()}
    if budget == max(BUDGETS):  # the anytime curve: what the search would hand over after each trial ends
        row["anytime"] = [(a["seconds"], worth(a["config"])) for a in search.answers if a["config"]]
    return row


def label(strategy: str, asha: bool) -> str:
    return f"{strategy}+asha" if asha else strategy


def run_benchmark(surrogate, reps: int = 100, slots: int = 4, processes: int = 2,
                  strategies: tuple[str, ...] = STRATEGIES, budgets: tuple[int, ...] = BUDGETS) -> dict:
    """Every strategy, with and without ASHA, at every budget, `reps` times. Repetition r seeds the sampler and the
    trials' training seed with r for every strategy alike, so that strategies are compared on the same seed luck
    (the differences to random search are paired)."""
    import multiprocessing
    import time

    global _SURROGATE
    _SURROGATE = surrogate
    optimum_config, optimum = surrogate.optimum()
    tasks = [(strategy, asha, budget, rep, slots) for strategy in strategies for asha in (False, True)
             for budget in budgets for rep in range(reps)]
    started = time.perf_counter()
    if processes > 1:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            rows = pool.map(_one, tasks, chunksize=8)
    else:
        rows = [_one(task) for task in tasks]
    wall = time.perf_counter() - started
    by: dict[tuple, list[dict]] = {}
    for row in rows:
        by.setdefault((label(row["strategy"], row["asha"]), row["budget"]), []).append(row)
    labels = [label(s, a) for s in strategies for a in (False, True)]
    # the seconds axis: up to what the longest search (every trial to its end) spends
    horizon = max(row["seconds"] for row in rows)
    grid = [horizon * i / 40 for i in range(1, 41)]
    results = {}
    for name in labels:
        entry = {"budgets": {}, "seconds_curve": []}
        for budget in budgets:
            group = sorted(by[(name, budget)], key=lambda r: r["rep"])
            values = [r["true"] for r in group]
            mean, half = band(values)
            baseline = sorted(by[("random", budget)], key=lambda r: r["rep"])
            diff_mean, diff_half = band([r["true"] - b["true"] for r, b in zip(group, baseline)])
            entry["budgets"][str(budget)] = {
                "true_objective": round(mean, 4), "band95": round(half, 4), "regret": round(optimum - mean, 4),
                "minus_random": round(diff_mean, 4), "minus_random_band95": round(diff_half, 4),
                "gpu_seconds": round(sum(r["seconds"] for r in group) / len(group), 1),
                "finished_trials": round(sum(r["finished"] for r in group) / len(group), 2),
                "mean_running": round(sum(r["mean_running"] for r in group) / len(group), 3),
                "reps": len(group)}
        anytime = [r["anytime"] for r in by[(name, max(budgets))]]
        for x in grid:
            held = [next((v for s, v in reversed(curve) if s <= x), None) for curve in anytime]  # latest answer
            if all(v is not None for v in held):
                mean, half = band(held)
                entry["seconds_curve"].append({"seconds": round(x, 1), "true_objective": round(mean, 4),
                                               "band95": round(half, 4)})
        results[name] = entry
    return {"reps": reps, "slots": slots, "budgets": list(budgets), "wall_seconds": round(wall, 1),
            "optimum": {"config": optimum_config, "true_objective": round(optimum, 4)},
            "published": {"config": surrogate.published,
                          "true_objective": round(surrogate.true_objective(surrogate.published), 4)},
            "untouched": surrogate.untouched, "trial_seconds": round(surrogate.seconds(surrogate.steps[-1]), 2),
            "results": results}


def plot(report: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    budgets = report["budgets"]
    names = list(report["results"])
    for offset, name in enumerate(names):
        entry = report["results"][name]
        xs = [b * (1 + 0.012 * (offset - len(names) / 2)) for b in budgets]
        ys = [entry["budgets"][str(b)]["true_objective"] for b in budgets]
        err = [entry["budgets"][str(b)]["band95"] for b in budgets]
        style = "--" if name.endswith("+asha") else "-"
        line = left.errorbar(xs, ys, yerr=err, capsize=3, marker="o", linestyle=style, label=name)
        curve = entry["seconds_curve"]
        sx = [p["seconds"] / 3600 for p in curve]
        sy = [p["true_objective"] for p in curve]
        sh = [p["band95"] for p in curve]
        right.plot(sx, sy, linestyle=style, color=line[0].get_color(), label=name)
        right.fill_between(sx, [y - h for y, h in zip(sy, sh)], [y + h for y, h in zip(sy, sh)],
                           color=line[0].get_color(), alpha=0.12)
    for ax in (left, right):
        ax.axhline(report["optimum"]["true_objective"], color="black", linestyle=":", label="landscape's best")
        ax.axhline(report["published"]["true_objective"], color="grey", linestyle="-.", label="published point")
        ax.set_ylabel("true objective of the configuration handed to confirmation")
    left.set(xscale="log", xlabel="trials (budget)",
             title=f"mean and 95% band over {report['reps']} searches, {report['slots']} at once")
    left.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.set_xticks(budgets, [str(b) for b in budgets])
    right.set(xlabel="simulated trial-hours (the recording's device)", title="a 32-trial search, as it goes")
    left.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
