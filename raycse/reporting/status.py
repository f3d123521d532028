"""`raycse status EXPERIMENT`: where the experiment's latest search stands, read from MLflow alone.

It reads what the search writes as it goes (the parent run's plan parameters, each trial's child run with its stage,
status and best objective), so it answers while the search runs in another process or on another machine, and
writes nothing. The time left is an estimate: the trials still to run, in rounds of the trials seen at once, at the
mean duration of the trials finished so far.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from raycse.records import (
    BEST_OBJECTIVE,
    CHOOSE,
    FINISHED,
    JUDGE,
    RUNNING,
    SEARCH,
    SEARCH_TAG,
    SEED_TAG,
    STAGE_TAG,
    STAGES,
    STATUS_TAG,
)
from raycse.tracking.tracker import Tracker


@dataclass
class RunningTrial:
    name: str  # the trial's run name (its Ray trial id)
    stage: str
    seed: str
    best_objective: float | None
    minutes: float  # since it started


@dataclass
class SearchStatus:
    """A search's state: its stage ('finished' once its parent run ended), trials done and planned by stage, the
    best objective any trial reached so far, the trials running now, and the time spent and (estimated) left."""

    experiment: str
    search: str
    parent_run_id: str
    stage: str
    done: dict[str, int]
    planned: dict[str, int]
    best_objective: float | None
    best_trial: str | None
    running: list[RunningTrial] = field(default_factory=list)
    spent_s: float = 0.0
    left_s: float | None = None


def planned_trials(params: dict[str, str]) -> dict[str, int]:
    """The trials each stage will run, from the plan the search logged on its parent run."""
    top_k, choose, judge = (int(params.get(key, 0)) for key in ("confirm_top_k", "choose_seeds", "judge_seeds"))
    return {SEARCH: int(params.get("num_samples", 0)), CHOOSE: top_k * choose if top_k > 1 else 0,
            JUDGE: 2 * judge}


def search_status(tracking_uri: str, experiment: str, now: float | None = None) -> SearchStatus:
    """The latest search of `experiment` as its store holds it now."""
    from raycse.errors import ConfigError

    tracker = Tracker.existing(tracking_uri, experiment)
    parents = tracker.runs(f"tags.`{SEARCH_TAG}` LIKE '%'", max_results=1, order_by=["attributes.start_time DESC"])
    if not parents:
        raise ConfigError(f"experiment {experiment!r} has no search yet (no run tagged {SEARCH_TAG})")
    parent = parents[0]
    now = time.time() if now is None else now
    children = tracker.child_runs(parent.info.run_id)
    done = {stage: 0 for stage in STAGES}
    running, durations, best, best_trial, stages_seen = [], [], None, None, []
    for run in children:
        tags, metrics = run.data.tags, run.data.metrics
        stage, status = tags.get(STAGE_TAG, SEARCH), tags.get(STATUS_TAG, RUNNING)
        stages_seen.append(stage)
        objective = metrics.get(BEST_OBJECTIVE)
        if objective is not None and (best is None or objective > best):
            best, best_trial = objective, run.info.run_name
        started = run.info.start_time / 1000
        if status == RUNNING and run.info.status == "RUNNING":
            running.append(RunningTrial(run.info.run_name, stage, tags.get(SEED_TAG, "?"), objective,
                                        (now - started) / 60))
        else:
            done[stage] = done.get(stage, 0) + 1
            if status == FINISHED and run.info.end_time:
                durations.append(run.info.end_time / 1000 - started)
    planned = planned_trials(parent.data.params)
    planned = {**{stage: done.get(stage, 0) for stage in STAGES}, **planned}
    finished = parent.info.status != "RUNNING"
    stage = "finished" if finished and parent.info.status == "FINISHED" else parent.info.status.lower() \
        if finished else _current_stage(stages_seen, running)
    left = None
    if not finished and durations:
        remaining = sum(max(planned[s] - done.get(s, 0), 0) for s in planned)
        at_once = max(len(running), 1)
        left = math.ceil(remaining / at_once) * sum(durations) / len(durations)
    end = parent.info.end_time / 1000 if finished and parent.info.end_time else now
    return SearchStatus(experiment=experiment, search=parent.info.run_name, parent_run_id=parent.info.run_id,
                        stage=stage, done=done, planned=planned, best_objective=best, best_trial=best_trial,
                        running=running, spent_s=end - parent.info.start_time / 1000, left_s=left)


def _current_stage(seen: list[str], running: list[RunningTrial]) -> str:
    if running:
        return max((r.stage for r in running), key=STAGES.index)
    if seen:
        return f"after {max(seen, key=STAGES.index)}"
    return "setup (no trial yet)"


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min {int(seconds % 60):02d} s"


def format_status(status: SearchStatus) -> str:
    trials = ", ".join(f"{stage} {status.done.get(stage, 0)}/{planned}" for stage, planned in status.planned.items()
                       if planned or status.done.get(stage))
    best = "none yet" if status.best_objective is None else f"{status.best_objective:.2f} ({status.best_trial})"
    left = "unknown until a trial finishes" if status.left_s is None else f"about {_duration(status.left_s)}"
    lines = [f"Search {status.search!r} of experiment {status.experiment!r} (parent run {status.parent_run_id})",
             f"stage: {status.stage}",
             f"trials done/planned: {trials}",
             f"best objective so far: {best}",
             f"running: {len(status.running)}"]
    lines += [f"  {r.name}  {r.stage} seed {r.seed}, {r.minutes:.1f} min, best so far "
              f"{'-' if r.best_objective is None else f'{r.best_objective:.2f}'}" for r in status.running]
    lines.append(f"time spent: {_duration(status.spent_s)}" + ("" if status.stage == "finished" else f"; left: {left}"))
    return "\n".join(lines)
