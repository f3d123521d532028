"""A search's driver sessions, as its parent run records them, and its time spent: one figure wherever it is shown.

A search runs in one driver session, or in several: the first, then one per `--resume`. Each session records on the
parent run (SESSION_TAG) when its command started, the seconds of the sessions before it, and which process drives it
(host, process id, the process's start time) with its command line; a session that ends without an answer records
how (ENDED_TAG: stopped by a signal, or failed; when; the time spent by then), and ends the parent run KILLED or
FAILED. A driver killed outright (a second signal, SIGKILL, a lost machine) records no end: its parent run stays
RUNNING, and `driver_runs` tells, on the driver's own host, that its process is gone.

The time spent by a search is its sessions' wall clock summed, each from its command's start to the answer (the
record stage's end; the report page is written after it) or to its stop; the time between a stop and its `--resume`
is not counted. A session killed outright counts up to the last thing it recorded (a trial's start or end). The
printed answer, the report page, `raycse.load` (the summary's `time_total_s`) and `raycse status` (`time_spent`) all
give this one figure.
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass

from raycse.records import ENDED_TAG, SESSION_TAG, TOTAL_TIME

STOPPED, FAILED = "stopped", "failed"  # how a session ended without an answer
RUN_STATUS = {STOPPED: "KILLED", FAILED: "FAILED"}  # the parent run's MLflow status after it


@dataclass(frozen=True)
class Session:
    """One driver session of a search: its command's start (seconds since the epoch), the seconds of the sessions
    before it, its process (host, id, start time) and its command line (None: the Python API's call)."""

    started_at: float
    earlier_s: float
    host: str
    pid: int
    process_started_at: float | None
    command: str | None = None
    cwd: str | None = None

    def spent_s(self, until: float) -> float:
        """The search's time spent when this session has run until `until` (seconds since the epoch).

        Example:
            >>> Session(1000.0, 60.0, "host", 1, None).spent_s(1030.0)
            90.0
        """
        return self.earlier_s + max(0.0, until - self.started_at)


@dataclass(frozen=True)
class Ending:
    """How a session ended without an answer: STOPPED (by `signal`) or FAILED (for `reason`), when, and the
    search's time spent by then."""

    how: str
    at: float
    spent_s: float
    signal: str | None = None
    reason: str | None = None


def this_process(started_at: float, earlier_s: float, command: str | None) -> Session:
    """A session of this process, whose command started at `started_at` (seconds since the epoch)."""
    return Session(started_at=started_at, earlier_s=earlier_s, host=socket.gethostname(), pid=os.getpid(),
                   process_started_at=_process_start(os.getpid()), command=command, cwd=os.getcwd())


def read_session(tags: dict[str, str]) -> Session | None:
    """The session a parent run's tags record, or None (a search from before sessions were recorded)."""
    try:
        return Session(**json.loads(tags[SESSION_TAG]))
    except (KeyError, TypeError, ValueError):
        return None


def read_ending(tags: dict[str, str]) -> Ending | None:
    """How the parent run's last session ended without an answer, or None (it runs, or it answered)."""
    try:
        return Ending(**json.loads(tags[ENDED_TAG]))
    except (KeyError, TypeError, ValueError):
        return None


def open_session(tracker, run_id: str, started_at: float, command: str | None) -> Session:
    """Record this process's session on the parent run `run_id`, counting the sessions before it (a resumed search's:
    the time spent its last one recorded, or, for a driver killed outright, up to its last record), and forget how
    the last one ended."""
    run = tracker.run(run_id)
    tags = run.data.tags
    earlier = 0.0
    previous, ending = read_session(tags), read_ending(tags)
    if ending is not None:
        earlier = ending.spent_s
    elif previous is not None:
        earlier = previous.spent_s(last_record(run, tracker.child_runs(run_id)))
    session = this_process(started_at, earlier, command)
    tracker.set_tags(run_id, {SESSION_TAG: json.dumps(asdict(session))})
    if ending is not None:
        tracker.delete_tag(run_id, ENDED_TAG)
    return session


def record_ending(tracker, run_id: str, session: Session, how: str, signal: str | None = None,
                  reason: str | None = None, now: float | None = None) -> Ending:
    """Record that `session` ended without an answer (`how`: STOPPED by `signal`, or FAILED for `reason`), and end
    the parent run KILLED or FAILED (a `--resume` opens it again)."""
    now = time.time() if now is None else now
    ending = Ending(how=how, at=now, spent_s=session.spent_s(now), signal=signal, reason=reason)
    tracker.set_tags(run_id, {ENDED_TAG: json.dumps(asdict(ending))})
    tracker.end_run(run_id, RUN_STATUS[how])
    return ending


def last_record(run, children) -> float:
    """When the search last recorded something, in seconds since the epoch: its parent run's end, or the latest start
    or end of a trial's run (the end of one a later session marked KILLED is that session's, not counted)."""
    times = [run.info.start_time / 1000]
    for child in children:
        times.append(child.info.start_time / 1000)
        if child.info.end_time and child.info.status in ("FINISHED", "FAILED"):
            times.append(child.info.end_time / 1000)
    return max(times)


def driver_runs(session: Session) -> bool | None:
    """Whether the session's driver process still runs: checked on its own host (its process id, with the same start
    time: not a later process given the same id); None on another host, where it cannot be seen."""
    if session.host != socket.gethostname():
        return None
    started = _process_start(session.pid)
    if started is None:
        return False
    return session.process_started_at is None or abs(started - session.process_started_at) < 1.0


def time_spent(run, children, now: float | None = None) -> float:
    """The search's time spent, from its parent run `run` and its child runs: the answer's (the `time_total_s` its
    driver logged) once it finished; the sessions' so far while its driver runs; up to its stop, or its last record,
    when its driver no longer runs. A search from before sessions were recorded: its parent run's MLflow span."""
    now = time.time() if now is None else now
    metrics, tags = run.data.metrics, run.data.tags
    if run.info.status == "FINISHED" and TOTAL_TIME in metrics:
        return float(metrics[TOTAL_TIME])
    session, ending = read_session(tags), read_ending(tags)
    if session is None:
        end = run.info.end_time / 1000 if run.info.status != "RUNNING" and run.info.end_time else now
        return end - run.info.start_time / 1000
    if ending is not None:
        return ending.spent_s
    if run.info.status == "RUNNING" and driver_runs(session) is not False:
        return session.spent_s(now)
    return session.spent_s(last_record(run, children))


def _process_start(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
