"""Search quality at equal compute: raycse's TPE + ASHA against random search and a researcher's hand grid.

Each strategy searches the same space with the same budget of training steps for its search stage (a Tune
stopper ends the stage once its trials took that many steps in all), then confirms its best configuration over
the same seeds as every other strategy, so that the comparison is of confirmed means, not of lucky single runs.

    python benchmarks/search_quality.py --setting cpu --output benchmarks/results/search-quality/2026-11-22-cpu2
    python benchmarks/search_quality.py --setting gpu --output OUT        # the full MiniLM setting (a GPU)
    python benchmarks/search_quality.py --landscape benchmarks/landscapes/focal-minilm-cls-cpu.json
        # no training: >= 100 searches per strategy replayed against a recorded landscape (search_replay.py)

Writes OUT/search_quality.json and OUT/search_quality.png: for each strategy, the best search-stage objective
found so far against the cumulative compute seconds of its trials (startup, training, evaluation, checkpoints),
and its confirmed mean ± std at the end. The strategies:

  tpe+asha  raycse's default: Optuna's TPE (seeded), the published point first, ASHA stopping weak trials early
  random    Optuna's RandomSampler (seeded), the published point first, every trial trained to the end
  grid      the grid a researcher would write by hand around the published point (SETTINGS' grid: as many
            points as the budget has trials, lr fixed at the published 3e-5, as a hand grid keeps it), no early
            stopping
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package (which numpy, asyncio and so Ray import): take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402

SETTINGS = {
    # 12.5 minutes on a 2-core CPU: batch 16, 16 steps a trial, the objective every 8 steps; 48 search steps (3 full
    # trials; ASHA may stop a trial after its first evaluation and so fit more), the best configuration and the
    # published point confirmed over 2 seeds.
    "cpu": {"space": "search_spaces/focal.yaml", "budget": "cpu", "trial_steps": 16, "trials_of_budget": 3,
            "seeds": 2, "grid": {"tau": [0.04, 0.07, 0.1], "m": [0.3], "lr": [3e-5]}},
    # the full MiniLM setting (a GPU): focal.yaml's full budget (batch 64, one epoch of the bundled sample = 186
    # steps), 16 trials' worth of steps, 3 seeds; the hand grid is 4 x 4
    "gpu": {"space": "search_spaces/focal.yaml", "budget": "full", "trial_steps": 186, "trials_of_budget": 16,
            "seeds": 3, "grid": {"tau": [0.03, 0.05, 0.07, 0.1], "m": [0.1, 0.2, 0.3, 0.5], "lr": [3e-5]}},
}
STRATEGIES = ("tpe+asha", "random", "grid")


def _benchmark_module(name: str):
    """A sibling module of benchmarks/ by path (the folder itself is kept off sys.path, see above)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", Path(_HERE) / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def landscape_main(args) -> int:
    """--landscape FILE: searches replayed against a recorded landscape's surrogate (benchmarks/search_replay.py):
    every strategy with and without ASHA, at 4, 8, 16 and 32 trials, --reps times each."""
    surrogate = _benchmark_module("surrogate").Surrogate.load(args.landscape)
    replayed = _benchmark_module("search_replay")
    report = replayed.run_benchmark(surrogate, reps=args.reps, slots=args.slots, processes=args.processes)
    report["landscape"] = args.landscape
    out = Path(args.output or f"benchmarks/results/search-quality/{date.today()}-{Path(args.landscape).stem}")
    out.mkdir(parents=True, exist_ok=True)
    print(f"{Path(args.landscape).name}: landscape's best {report['optimum']['true_objective']:.2f}, published "
          f"point {report['published']['true_objective']:.2f}, untouched {report['untouched']}; {report['reps']} "
          f"searches per cell, {report['slots']} trials at once, {report['wall_seconds']:.0f} s")
    print("true objective of the configuration handed to confirmation: mean ± 95% band (regret; minus random "
          "search, paired, ± band) [GPU-s, trials finished, mean running]")
    for name, entry in report["results"].items():
        cells = []
        for budget in report["budgets"]:
            c = entry["budgets"][str(budget)]
            cells.append(f"{budget:>2}: {c['true_objective']:.3f} ± {c['band95']:.3f} ({c['regret']:.3f}; "
                         f"{c['minus_random']:+.3f} ± {c['minus_random_band95']:.3f}) "
                         f"[{c['gpu_seconds']:.0f}, {c['finished_trials']:.1f}, {c['mean_running']:.2f}]")
        print(f"{name:>15}  " + "  ".join(cells))
    (out / "search_quality.json").write_text(json.dumps(report, indent=2) + "\n")
    replayed.plot(report, out / "search_quality.png")
    print(f"wrote {out / 'search_quality.json'} and {out / 'search_quality.png'}")
    return 0


def run_strategy(strategy: str, setting: dict, out: Path, tracking_uri: str) -> dict:
    from raycse.driver.run import run_search
    from raycse.driver.state import BenchmarkHook, SearchOptions
    from raycse.judging.confirmation_plan import ConfirmPlan
    from raycse.settings.space import load_space

    space = load_space(setting["space"])
    if setting["budget"] == "cpu":
        space = space.with_cpu_budget()  # the file's CPU budget first, so that the settings below win over it
    # no test tasks (the comparison is of dev objectives), trials until the step budget is spent, one configuration
    # confirmed
    space = dataclasses.replace(space, experiment=f"{space.experiment}-{strategy}", cpu_budget=None,
                                confirm=ConfirmPlan(1, setting["seeds"]), test_eval="none", num_samples=64)
    options = SearchOptions(
        tracking_uri=tracking_uri, storage_path=str(out / "ray_results"), budget=setting["budget"],
        optuna_storage=f"sqlite:///{(out / 'optuna.db').resolve()}",
        benchmark=BenchmarkHook(
            sampler={"tpe+asha": "tpe", "random": "random", "grid": None}[strategy],
            grid=setting["grid"] if strategy == "grid" else None,
            scheduler="asha" if strategy == "tpe+asha" else "fifo",
            grace_evals=1 if strategy == "tpe+asha" else None,  # ASHA may stop a trial at its first evaluation
            # the grid's size is its budget (GRIDS hold trials_of_budget points); the samplers stop at the same steps
            max_total_steps=None if strategy == "grid" else setting["trial_steps"] * setting["trials_of_budget"]))
    started = time.perf_counter()
    outcome = run_search(space, options, log=lambda line: None)
    wall = time.perf_counter() - started
    searched = sorted((t for t in outcome.trials if t.stage == "search"), key=lambda t: t.ended_at)
    curve, best, seconds = [], None, 0.0
    for trial in searched:
        seconds += sum(trial.timings.values())
        if trial.best_objective is not None:
            best = trial.best_objective if best is None else max(best, trial.best_objective)
        curve.append({"compute_seconds": seconds, "best_objective": best, "trial_steps": trial.steps})
    confirm_seconds = sum(sum(t.timings.values()) for t in outcome.trials if t.stage == "confirm")
    winner = outcome.winner
    return {
        "strategy": strategy, "trials": len(searched), "search_steps": sum(t.steps for t in searched),
        "curve": curve, "best_search_objective": best,
        "confirmed": None if winner is None else {
            "params": winner.params, "mean": winner.summary.mean, "std": winner.summary.std, "n": winner.summary.n,
            "values": winner.values, "is_published": winner.is_published},
        "compute_seconds": seconds + confirm_seconds, "wall_seconds": wall,
        "baseline_objective": outcome.baseline.get("objective"),
        "timings": outcome.timings,  # the search's own phases and trial sums, as its parent run records them
    }


def plot(results: list[dict], path: Path, setting: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for result in results:
        xs = [point["compute_seconds"] for point in result["curve"]]
        ys = [point["best_objective"] for point in result["curve"]]
        line, = ax.step(xs, ys, where="post", marker="o", label=f"{result['strategy']} (search, best so far)")
        confirmed = result["confirmed"]
        if confirmed:
            ax.errorbar([result["compute_seconds"]], [confirmed["mean"]], yerr=[confirmed["std"] or 0.0], fmt="s",
                        color=line.get_color(), capsize=4,
                        label=f"{result['strategy']} confirmed: {confirmed['mean']:.2f} ± {confirmed['std'] or 0:.2f} "
                              f"(n={confirmed['n']})")
    baseline = results[0].get("baseline_objective")
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle="--", label=f"untouched model {baseline:.2f}")
    ax.set(xlabel="cumulative compute seconds (trials)", ylabel="STS-B dev Spearman x100",
           title=f"Search quality at equal training steps ({setting} setting)")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=list(SETTINGS), default="cpu")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--output", default=None, help="a directory for the JSON, the PNG and the runs' state")
    parser.add_argument("--landscape", default=None, help="replay searches against this recorded landscape's "
                        "surrogate instead of training (benchmarks/landscapes/*.json)")
    parser.add_argument("--reps", type=int, default=100, help="--landscape: searches per strategy and budget")
    parser.add_argument("--slots", type=int, default=4, help="--landscape: trials at once")
    parser.add_argument("--processes", type=int, default=2, help="--landscape: worker processes")
    args = parser.parse_args(argv)
    if args.landscape:
        return landscape_main(args)
    if not args.output:
        parser.error("--output is required without --landscape")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    setting = SETTINGS[args.setting]
    results = []
    for strategy in args.strategies:
        result = run_strategy(strategy, setting, out, f"sqlite:///{out / 'mlflow.db'}")
        results.append(result)
        confirmed = result["confirmed"] or {}
        print(f"{strategy:>9}: {result['trials']} trials, {result['search_steps']} search steps, best search "
              f"{result['best_search_objective']:.2f}; confirmed {confirmed.get('mean', float('nan')):.2f} ± "
              f"{confirmed.get('std') or 0:.2f} (n={confirmed.get('n')}); {result['compute_seconds']:.0f} compute s, "
              f"{result['wall_seconds']:.0f} s wall ("
              + ", ".join(f"{k[5:-2]} {v:.0f} s" for k, v in result["timings"].items()
                          if k.startswith("time_") and k != "time_total_s") + ")", flush=True)
    (out / "search_quality.json").write_text(json.dumps({"setting": args.setting, **setting, "results": results},
                                                        indent=2) + "\n")
    plot(results, out / "search_quality.png", args.setting)
    print(f"wrote {out / 'search_quality.json'} and {out / 'search_quality.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
