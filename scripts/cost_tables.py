"""Write docs/costs.md: what each shipped space file's search costs by the cost model (raycse/planning/cost_model.py),
on the full budget and, where the file states one, on the paper's (`--budget paper`), on one GPU and on eight; the
model against the two runs it was checked on; and the dry run of focal.yaml's full and paper budgets on one GPU.

    python scripts/cost_tables.py           write docs/costs.md
    python scripts/cost_tables.py --check   exit 1 when docs/costs.md is not what this script writes

A space whose step has a recorded GPU figure (its model's shape at its batch and sequence length,
raycse/planning/cost_figures.py) is planned from it, as `raycse search --dry-run` plans it. One without (DCLR's batch
128, the supervised files' batch 32) is planned with --step-ms: its shape's recorded step at batch 64 in proportion
to the rows of its batch; the table marks it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
COSTS = ROOT / "docs" / "costs.md"
GPU_COUNTS = (1, 8)
H100_RUN = "benchmarks/results/search-wall-clock/2026-11-26-h100/search.json"
CPU_RUN = "benchmarks/results/quick-start-cpu/2026-11-26-cpu2/"


def plan(path: Path, budget: str, gpus: int):
    """(the plan, how its step was had): its recorded GPU step, else its shape's at batch 64 by rows."""
    import raycse
    from raycse.errors import ConfigError
    from raycse.planning import cost_figures

    try:
        return raycse.plan(str(path), gpus=gpus, budget=budget), "recorded"
    except ConfigError as err:
        if err.key != "step_ms":
            raise
    from raycse.driver.layout import gpu_share
    from raycse.planning.model_facts import model_facts
    from raycse.settings.space import load_space

    space = load_space(path).with_budget(budget)
    shape = model_facts(space.base.model)[1]
    record = next(r for r in cost_figures.GPU_STEPS if r.shape == shape and r.batch_size == 64)
    sharing = (gpu_share(space, {"GPU": gpus}).trials if space.resources.auto_gpus
               else max(1, round(1 / space.resources.gpus_per_worker)))
    step_ms = record.ms(sharing) * space.base.batch_size / 64
    return raycse.plan(str(path), gpus=gpus, budget=budget, step_ms=step_ms), f"{shape} at batch 64 x rows"


def rows() -> list[str]:
    from raycse.errors import ConfigError
    from raycse.planning.dry_run import duration
    from raycse.settings.space import load_space
    from raycse.settings.space_files import packaged_spaces

    lines = ["| space | budget | GPUs | trials | step | wall clock, expected | at most | GPU-hours, expected | at most "
             "| disk, peak |", "|---|---|---|---|---|---|---|---|---|---|"]
    unplanned = []
    for name, path in packaged_spaces().items():
        budgets = ["full"] + (["paper"] if load_space(path).paper_budget else [])
        for budget, gpus in ((budget, gpus) for budget in budgets for gpus in GPU_COUNTS):
            try:
                run, how = plan(path, budget, gpus)
            except ConfigError as err:  # the dry run refuses it, as it would at the command line
                if gpus == GPU_COUNTS[0]:
                    unplanned.append(f"- {name}.yaml, {budget} budget: the dry run refuses it: {err}.")
                continue
            cost = run.cost
            lines.append(f"| {name}.yaml | {budget} | {gpus} | {run.trials} | {run.step_ms:.1f} ms ({how}) | "
                         f"{duration(cost.wall_seconds())} | {duration(cost.wall_seconds(expected=False))} | "
                         f"{cost.gpu_hours():.2f} | {cost.gpu_hours(expected=False):.2f} | "
                         f"{run.disk_bytes / 1e9:.1f} GB |")
    return lines + ([""] + unplanned if unplanned else [])


def measured_runs() -> list[str]:
    """The model fed the trials each stage ran, beside what two runs took (tests/test_costs.py holds them within a
    quarter): the H100 run from figures recorded on another day; the CPU main job with its own step and evaluation
    seconds (the very record a CPU dry run of MiniLM prices its step from)."""
    import raycse
    from raycse.planning import cost_figures
    from raycse.planning.cost_model import Figure
    from raycse.settings.space import load_space

    h100 = json.loads((ROOT / H100_RUN).read_text())
    ran = Counter(trial["stage"] for trial in h100["trials"])
    space = load_space("focal")  # as it ran: four trials a GPU, the test tasks on every trial, no warm workers
    as_it_ran = dataclasses.replace(space, test_eval="all",
                                    resources=dataclasses.replace(space.resources, gpus_per_worker=0.25))
    gpu = raycse.plan(as_it_ran, gpus=1, budget="full", warm_workers=False).cost.as_ran(dict(ran))
    summary = json.loads((ROOT / CPU_RUN / "search_summary.json").read_text())
    records = summary["trials"]
    step = sum(t["timings"]["trial_train_s"] for t in records) / sum(t["steps"] for t in records)
    runs = [r for stage in json.loads((ROOT / CPU_RUN / "trials.json").read_text())["stages"].values() for r in stage]
    dev = statistics.fmean(r["reports"][-1]["eval_s"] / len(r["reports"]) for r in runs)
    from raycse.evaluation import untouched_cache

    shipped_dir = untouched_cache.SHIPPED_DIR
    try:  # that run scored the untouched model beside its first trials: no figures were shipped then
        untouched_cache.SHIPPED_DIR = ROOT / CPU_RUN / "none-shipped"
        cpu_plan = raycse.plan("focal", gpus=0, step_ms=1000 * step)
    finally:
        untouched_cache.SHIPPED_DIR = shipped_dir
    rates = cost_figures.cpu_rates(Figure(step, "run"), Figure(dev, "run"), cpu_plan.weight_bytes, 11_914)
    cpu = dataclasses.replace(cpu_plan.cost, rates=rates, slots=2).as_ran(dict(Counter(t["stage"] for t in records)))
    lines = ["| run | trials that ran | measured | the model | stages, measured / the model |", "|---|---|---|---|---|"]
    for name, record, cost, timings in (("focal, full budget, one H100", H100_RUN, gpu, h100["timings"]),
                                        ("focal, CPU budget, 2 cores, 2026-11-26: the quick start's first recorded "
                                         "run, which scored the untouched model too (the package now ships its "
                                         "figures, and the quick start takes less)", CPU_RUN + "search_summary.json",
                                         cpu,
                                         summary["timings"])):
        stages = ", ".join(f"{stage.name} {timings[f'time_{stage.name}_s']:.0f} / "
                           f"{stage.seconds(cost.rates, cost.slots)[0]:.0f} s" for stage in cost.stages)
        counts = ", ".join(f"{stage.name} {stage.runs():.0f}" for stage in cost.stages)
        lines.append(f"| {name} ([record](../{record})) | {counts} | {timings['time_total_s']:.0f} s | "
                     f"{cost.wall_seconds():.0f} s | {stages} |")
    return lines


def transcript(budget: str) -> list[str]:
    import raycse
    from raycse.planning.dry_run import format_dry_run

    run = raycse.plan("focal", gpus=1, budget=budget)
    text = format_dry_run(run).replace(str(run.space), "focal.yaml")
    return [f"## focal.yaml, {budget} budget, one GPU: the dry run", "",
            f"`raycse search --space focal --budget {budget} --dry-run --gpus 1`:", "", "```text", text, "```", ""]


def cost_tables() -> str:
    """The page, from the shipped records alone: a `raycse bench --share` record in this machine's cache folder, which
    a search here would read first, has no place in the project's page."""
    import os
    import tempfile

    before = os.environ.get("RAYCSE_CACHE_DIR")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["RAYCSE_CACHE_DIR"] = empty
        try:
            return _page()
        finally:
            if before is None:
                os.environ.pop("RAYCSE_CACHE_DIR", None)
            else:
                os.environ["RAYCSE_CACHE_DIR"] = before


def _page() -> str:
    parts = ["# What a search costs", "",
             "Generated by `python scripts/cost_tables.py` from the cost model that `raycse search --dry-run` prints "
             "(raycse/planning/cost_model.py). A trial costs its start-up (a new worker for the first trial of each "
             "slot, a reused one after), its steps at the step time with the plan's trials sharing each GPU, its "
             "evaluations (and the seven test tasks where the file asks for them) and its checkpoint writes; a "
             "stage lays its trials on its slots and ends with its last (the next waits for it); the judging "
             "stage runs a block of seeds per look, each weighed by the chance that the looks before it did not "
             "stop the judging; ASHA stops half the trials at each rung, expected. *At most* is the fixed "
             "design's judging, with no trial stopped early. GPU-hours are the GPUs held for the wall clock. Every "
             "figure the model reads names its record (raycse/planning/cost_figures.py); a GPU plan is never timed on "
             "a CPU, and a CPU plan takes the recorded CPU step of its model's shape (raycse/planning/cpu_steps.py), "
             "measuring a few steps here only for a shape with no record. Durations past a day are in days.", "",
             "## Every shipped space file", "", *rows(), "",
             "*recorded*: the step recorded on an H100 for the model's shape, batch and length; *x rows*: no record "
             "for the batch, so the shape's batch-64 step in proportion (`--step-ms`).", "",
             "## The model against measured runs", "",
             "Fed the trials each stage ran (the judging's first look stopped the H100 run at 6 runs):", "",
             *measured_runs(), "", *transcript("full"), *transcript("paper")]
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/costs.md instead of writing it")
    args = parser.parse_args()
    text = cost_tables()
    if args.check:
        if not COSTS.exists() or COSTS.read_text(encoding="utf-8") != text:
            print(f"{COSTS} is stale: run python scripts/cost_tables.py", file=sys.stderr)
            return 1
        return 0
    COSTS.write_text(text, encoding="utf-8")
    print(f"{COSTS}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
