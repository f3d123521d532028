"""`raycse compare --dry-run`: a comparison's plan and its cost, without running it.

A comparison is one search per loss, one after the other, on the same budget (raycse/comparing.py), each judging its
winner and published point on the same fresh seeds in one look with every seed scored on the seven test tasks: the
shared judging, from whose runs the family's judgment (Holm) is made with no run of its own. So its plan is each
loss's search plan (raycse/planning/dry_run.py, as `raycse compare` runs it) and that judging; its wall clock and
GPU-hours are the searches' in sum, its disk the searches' checkpoints together (each search keeps its own). Its
spaces and options come checked as the comparison's own (raycse.arguments.search.compare_inputs, which runs
raycse.comparing.check_comparison); nothing is created.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raycse.planning.cpu_steps import said
from raycse.planning.dry_run import DryRun, duration, plan_search

if TYPE_CHECKING:
    from raycse.driver.state import SearchOptions
    from raycse.settings.space import SearchSpace



@dataclass
class ComparePlan:
    """A comparison's plan: its name and each loss's search plan (by label), in the order they run."""

    name: str
    searches: dict[str, DryRun]

    def wall_seconds(self, expected: bool = True) -> float:
        return sum(run.cost.wall_seconds(expected) for run in self.searches.values())

    def gpu_hours(self, expected: bool = True) -> float:
        return sum(run.cost.gpu_hours(expected) for run in self.searches.values())

    @property
    def disk_bytes(self) -> int | None:
        """The most the searches' checkpoints hold at once: the searches before, as they end, and the one running."""
        peak, kept = 0, 0
        for run in self.searches.values():
            if run.disk_bytes is None:
                return None
            peak, kept = max(peak, kept + run.disk_bytes), kept + run.cost.end_disk_bytes()
        return peak

    @property
    def trials(self) -> int:
        return sum(run.trials for run in self.searches.values())

def plan_comparison(spaces: list[SearchSpace], options: SearchOptions, name: str, step_ms: float | None = None,
                    gpus: int | None = None, machine_gpus=None, log: Callable[[str], None] | None = None,
                    ) -> ComparePlan:
    """The plan of `raycse compare` of these spaces (loaded) with these options and name, as
    raycse.arguments.search.compare_inputs checks them: each loss's search plan as the comparison runs it (`log`:
    the lines of a CPU step measured here, where no record fits; None prints them)."""
    from raycse.comparing import label_of, loss_experiment
    from raycse.settings.checks import INT_LIMIT, check_int, check_number

    if step_ms is not None:
        check_number("step_ms", step_ms, low=0.0, strict=True)
    if gpus is not None:
        check_int("gpus", gpus, low=0, high=INT_LIMIT)
    values = {field.name: getattr(options, field.name) for field in dataclasses.fields(options)
              if field.name != "benchmark"}  # plan_search reads the file's own scheduler
    extra = {} if machine_gpus is None else {"machine_gpus": machine_gpus}
    searches = {}
    for space in spaces:
        label = label_of(space)
        renamed = dataclasses.replace(space, experiment=loss_experiment(name, label))
        loss_values = values
        if options.resume and "://" not in options.storage_path:  # a resumed comparison starts the searches not begun
            from raycse.driver.preflight import search_location

            loss_values = {**values, "resume": search_location(renamed, options)[1]}
        searches[label] = plan_search(renamed, loss_values, step_ms=step_ms, gpus=gpus, log=log or said, **extra)
    return ComparePlan(name, searches)


def format_compare_plan(plan: ComparePlan) -> str:
    first = next(iter(plan.searches.values()))
    judge = next(stage for stage in first.stages if stage.name == "judge")
    lines = [f"Plan of the comparison {plan.name!r} ({len(plan.searches)} losses, one search each, one after the "
             "other): nothing is run, created or started.",
             f"budget: {first.budget} ({first.budget_reason}); each search: {first.resources}",
             f"step: {first.step_ms:.0f} ms ({first.rates.step.source})", "",
             f"{'loss':<12} {'trials':>6} {'expected':>9} {'at most':>9} {'GPU-h':>6} {'disk':>8}  experiment"]
    for label, run in plan.searches.items():
        cost = run.cost
        disk = f"{run.disk_bytes / 1e9:.1f} GB" if run.disk_bytes is not None else "?"
        lines.append(f"{label:<12} {run.trials:>6} {duration(cost.wall_seconds()):>9} "
                     f"{duration(cost.wall_seconds(expected=False)):>9} {cost.gpu_hours():>6.2f} {disk:>8}  "
                     f"{run.experiment}{' (refused: ' + run.refused + ')' if run.refused else ''}")
    disk = f"; disk peaks at about {plan.disk_bytes / 1e9:.1f} GB" if plan.disk_bytes is not None else ""
    lines += ["", f"Shared judging: each loss's winner and published point on the same {judge.trials // 2} fresh "
              f"seeds ({judge.seeds}), one look (no early stop across the family), every seed on the seven test "
              f"tasks: {judge.trials} runs in each search above; the family's judgment (Holm) uses them, no run of "
              "its own.",
              f"Wall clock: about {duration(plan.wall_seconds())} expected (ASHA's stops), "
              f"{duration(plan.wall_seconds(expected=False))} at most; {plan.gpu_hours():.2f} GPU-hours expected, "
              f"{plan.gpu_hours(expected=False):.2f} at most; {plan.trials} trials{disk}."]
    return "\n".join(lines)
