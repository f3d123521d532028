"""`raycse status EXPERIMENT`: where the experiment's latest search stands, read from MLflow alone.

It reads what the search writes as it goes (the parent run's plan parameters, tags and final metrics, each trial's
child run with its stage, status, configuration and best objective), so it answers while the search runs in another
process or on another machine, and writes nothing.

It reports the search's own state, stage by stage, each figure for what it is: the search stage's leading
configuration (the best dev objective of its finished trials: what ranks configurations, seed 42 alone), the
choosing means (each candidate's mean dev objective over its finished choosing seeds: what picks the winner), and,
once the search has ended, its answer, in the answer's own lines with their qualifiers (raycse/reporting/answer.py,
from the search's summary). A single judging run's dev figure is none of these: one seed's luck judges nothing
(docs/judging.md), so it is never shown as a best.

A search whose driver ended without an answer is said so, with how (the driver's own record of a stop by a signal
or a failure; or, on the driver's host, a driver process that no longer runs and recorded no end), its trials left
unfinished (not running: `--resume` continues them), and the command that continues it. The time spent is the one
figure the answer, the report and `raycse.load` give (raycse/tracking/sessions.py: every driver session to the
answer, a resumed search's included). The time left is an estimate: the trials still to run, in rounds of the trials
seen at once, at the mean duration of the trials finished so far.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from raycse.records import (
    BEST_OBJECTIVE,
    CHOOSE,
    CONFIG_KEY_TAG,
    FINISHED,
    JUDGE,
    RUNNING,
    SEARCH,
    SEARCH_TAG,
    SEED_TAG,
    STAGE_TAG,
    STAGES,
    STATUS_TAG,
    WINNER_MINUS_PUBLISHED,
    WINNER_TAG,
)
from raycse.reporting.tables import fmt_params
from raycse.tracking import sessions
from raycse.tracking.tracker import Tracker

JUDGED_AVERAGE = "avg"  # the parent run's metric: the winner's seven-task test average over its judging seeds


@dataclass
class RunningTrial:
    name: str  # the trial's run name (its Ray trial id)
    stage: str
    seed: str
    best_objective: float | None
    minutes: float  # since it started


@dataclass
class ChoosingMean:
    """A candidate of the choosing block: its mean dev objective over the choosing seeds finished so far."""

    configuration: str  # its loss family and parameters, in words
    mean: float
    n: int  # finished choosing seeds
    planned: int


@dataclass
class SearchStatus:
    """A search's state: its stage ('finished' once its parent run ended), trials done and planned by stage, the
    search stage's leading configuration so far, the choosing means, the winner once chosen, the answer once the
    search has ended, the trials running now, and the time spent and (estimated) left."""

    experiment: str
    search: str
    parent_run_id: str
    stage: str
    done: dict[str, int]
    planned: dict[str, int]
    leading: float | None  # the best dev objective of the search stage's finished trials
    leading_trial: str | None
    running: list[RunningTrial] = field(default_factory=list)
    spent_s: float = 0.0
    left_s: float | None = None
    choosing: list[ChoosingMean] = field(default_factory=list)
    winner: str | None = None  # the winner's family and parameters, once chosen
    answer: dict[str, float] = field(default_factory=dict)  # "winner" (judged figure), "versus_published"
    answer_lines: list[str] = field(default_factory=list)  # the answer as the search printed it (its summary's)
    ended: str | None = None  # how a search that no longer runs ended without an answer, in words
    resume: str | None = None  # what continues it
    unfinished: int = 0  # trials a search that no longer runs left unfinished (`--resume` continues them)


def planned_trials(params: dict[str, str]) -> dict[str, int]:
    """The trials each stage will run, from the plan the search logged on its parent run."""
    top_k, choose, judge = (int(params.get(key, 0)) for key in ("confirm_top_k", "choose_seeds", "judge_seeds"))
    return {SEARCH: int(params.get("num_samples", 0)), CHOOSE: top_k * choose if top_k > 1 else 0,
            JUDGE: 2 * judge}


def configuration_words(config_key: str | None) -> str:
    """A configuration key (JSON: the family and the parameters) as a person reads it: `focal tau=0.07, m=0.3`."""
    try:
        values = json.loads(config_key or "")
    except ValueError:
        return config_key or "?"
    if not isinstance(values, dict):
        return str(config_key)
    family = values.pop("family", "?")
    return f"{family} {fmt_params(values)}".strip()


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
    ended, resume = how_it_ended(parent)
    done = {stage: 0 for stage in STAGES}
    running, durations, stages_seen = [], [], []
    leading, leading_trial = None, None
    for run in children:
        tags, metrics = run.data.tags, run.data.metrics
        stage, status = tags.get(STAGE_TAG, SEARCH), tags.get(STATUS_TAG, RUNNING)
        stages_seen.append(stage)
        objective = metrics.get(BEST_OBJECTIVE)
        started = run.info.start_time / 1000
        if status == RUNNING and run.info.status == "RUNNING":
            running.append(RunningTrial(run.info.run_name, stage, tags.get(SEED_TAG, "?"), objective,
                                        (now - started) / 60))
            continue
        done[stage] = done.get(stage, 0) + 1
        if status == FINISHED and run.info.end_time:
            durations.append(run.info.end_time / 1000 - started)
        ranks = stage == SEARCH and status == FINISHED and objective is not None  # what ranks configurations
        if ranks and (leading is None or objective > leading):
            leading, leading_trial = objective, run.info.run_name
    params = parent.data.params
    planned = {**{stage: done.get(stage, 0) for stage in STAGES}, **planned_trials(params)}
    finished = parent.info.status == "FINISHED"
    stage = ("finished" if finished else parent.info.status.lower() if ended is None and parent.info.status != "RUNNING"
             else _current_stage(stages_seen, running))
    left = None
    if ended is None and not finished and durations:
        remaining = sum(max(planned[s] - done.get(s, 0), 0) for s in planned)
        at_once = max(len(running), 1)
        left = math.ceil(remaining / at_once) * sum(durations) / len(durations)
    winner = parent.data.tags.get(WINNER_TAG)
    return SearchStatus(experiment=experiment, search=parent.info.run_name, parent_run_id=parent.info.run_id,
                        stage=stage, done=done, planned=planned, leading=leading, leading_trial=leading_trial,
                        running=[] if ended else running, spent_s=sessions.time_spent(parent, children, now),
                        left_s=left, choosing=choosing_means(children, int(params.get("choose_seeds", 0) or 0)),
                        winner=configuration_words(winner) if winner else None,
                        answer=_answer(parent.data.metrics) if finished else {},
                        answer_lines=_answer_block(tracker, parent.info.run_id) if finished else [],
                        ended=ended, resume=resume, unfinished=len(running) if ended else 0)


def how_it_ended(parent) -> tuple[str | None, str | None]:
    """(how a search whose driver no longer runs ended without an answer, in words; what continues it), or (None,
    None) while its driver runs, once it has answered, or for a search that recorded no session (older ones)."""
    tags, status = parent.data.tags, parent.info.status
    session, ending = sessions.read_session(tags), sessions.read_ending(tags)
    if session is None or status == "FINISHED":
        return None, None
    if ending is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ending.at))
        ended = (f"stopped by {ending.signal} at {when}" if ending.how == sessions.STOPPED
                 else f"failed at {when}: {ending.reason}")
    elif status == "RUNNING" and sessions.driver_runs(session) is False:
        ended = (f"stopped: its driver (process {session.pid} on {session.host}) no longer runs, and recorded no end "
                 "(killed)")
    else:
        return None, None
    resume = (session.command + (f" (in {session.cwd})" if session.cwd else "") if session.command else
              "the same raycse.search(...) call with resume=True")
    return ended, resume


def _answer_block(tracker: Tracker, run_id: str) -> list[str]:
    """The answer's lines as the search printed them, from its summary; none where it has no summary."""
    from raycse.errors import ConfigError
    from raycse.reporting.answer import answer_block
    from raycse.reporting.load import read_summary

    try:
        return answer_block(read_summary(tracker, run_id))
    except ConfigError:
        return []


def choosing_means(children, planned: int) -> list[ChoosingMean]:
    """Each choosing candidate's mean dev objective over its finished choosing runs, best first."""
    values: dict[str, list[float]] = {}
    for run in children:
        tags, objective = run.data.tags, run.data.metrics.get(BEST_OBJECTIVE)
        if tags.get(STAGE_TAG) == CHOOSE and tags.get(STATUS_TAG) == FINISHED and objective is not None:
            values.setdefault(tags.get(CONFIG_KEY_TAG, "?"), []).append(objective)
    means = [ChoosingMean(configuration_words(key), sum(v) / len(v), len(v), planned) for key, v in values.items()]
    return sorted(means, key=lambda m: -m.mean)


def _answer(metrics: dict[str, float]) -> dict[str, float]:
    """The answer the parent run records once the search has ended: the winner's seven-task test average over its
    judging seeds, and winner − published on it (paired by judging seed)."""
    found = {"winner": metrics.get(JUDGED_AVERAGE), "versus_published": metrics.get(WINNER_MINUS_PUBLISHED)}
    return {name: value for name, value in found.items() if value is not None}


def _current_stage(seen: list[str], running: list[RunningTrial]) -> str:
    if running:  # the earliest: the published point's first judging runs train in the choosing stage
        return min((r.stage for r in running), key=STAGES.index)
    if seen:
        return f"after {max(seen, key=STAGES.index)}"
    return "setup (no trial yet)"


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min {int(seconds % 60):02d} s"


def format_status(status: SearchStatus) -> str:
    trials = ", ".join(f"{stage} {status.done.get(stage, 0)}/{planned}" for stage, planned in status.planned.items()
                       if planned or status.done.get(stage))
    leading = ("no search trial finished yet" if status.leading is None else
               f"{status.leading:.2f} ({status.leading_trial}), the best dev objective of its finished trials")
    left = "unknown until a trial finishes" if status.left_s is None else f"about {_duration(status.left_s)}"
    lines = [f"Search {status.search!r} of experiment {status.experiment!r} (parent run {status.parent_run_id})",
             f"stage: {status.stage}" + (f"; {status.ended}" if status.ended else ""),
             f"trials done/planned: {trials}",
             f"search stage (ranks configurations on dev, one seed): leading {leading}"]
    if status.choosing:
        lines.append("choosing means (dev, over the choosing seeds finished so far; the best mean wins):")
        lines += [f"  {m.mean:.2f} (n = {m.n} of {m.planned})  {m.configuration}" for m in status.choosing]
    if status.winner:
        lines.append(f"winner: {status.winner}")
    lines += _answer_lines(status)
    if status.ended:
        lines.append(f"unfinished: {status.unfinished} trial(s), not running (--resume continues them)")
        lines.append(f"time spent: {_duration(status.spent_s)}")
        lines.append(f"to continue: {status.resume}")
        return "\n".join(lines)
    lines.append(f"running: {len(status.running)}")
    lines += [f"  {r.name}  {r.stage} seed {r.seed}, {r.minutes:.1f} min" for r in status.running]
    lines.append(f"time spent: {_duration(status.spent_s)}" + ("" if status.stage == "finished" else f"; left: {left}"))
    return "\n".join(lines)


def _answer_lines(status: SearchStatus) -> list[str]:
    if status.answer_lines:  # the answer's own lines, qualifiers and all
        return [f"answer (the judging seeds), as the search gave it; the verdict: raycse report {status.experiment}",
                *(f"  {line}" for line in status.answer_lines)]
    if status.answer:
        figures = []
        if "winner" in status.answer:
            figures.append(f"the winner {status.answer['winner']:.2f} on the seven-task test average")
        if "versus_published" in status.answer:
            figures.append(f"winner − published {status.answer['versus_published']:+.2f}")
        return [f"answer (the judging seeds): {'; '.join(figures)}; its search summary, which qualifies them (n, "
                "interval, verdict), is missing"]
    if status.planned.get(JUDGE):
        return ["answer: when the judging runs end (the winner and the published point on the seven-task test "
                "average, judging seeds)"]
    return []
