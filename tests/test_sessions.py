"""A search's driver sessions on its parent run (raycse/tracking/sessions.py), as `raycse status` reads them: a search
stopped by a signal, or whose driver no longer runs, reads as stopped, with the command that continues it and no trial
"running"; and its time spent is one figure: the sessions' seconds to the answer, summed, in `raycse status`, the
printed answer's timings, the report page's table and `raycse.load`, a resumed search's two sessions included.

Each store here is a real MLflow store written through the Tracker as the driver writes it; the end-to-end case (a
real search stopped by SIGTERM, read by `raycse status`, then resumed) is tests/test_stop_signals.py's."""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raycse
from raycse.cli import main
from raycse.records import (
    EARLIER_SESSIONS,
    ENDED_TAG,
    RUNNING,
    SEARCH,
    SEARCH_TAG,
    SEED_TAG,
    SESSION_TAG,
    STAGE_TAG,
    STATUS_TAG,
    TOTAL_TIME,
)
from raycse.reporting.status import format_status
from raycse.tracking import sessions
from raycse.tracking.tracker import Tracker

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "benchmarks" / "results" / "quick-start-cpu/2026-11-26-cpu2" / "search_summary.json"
RESUME = "raycse search --space focal --tracking-uri sqlite:///mlflow.db --resume"


def _search(uri: str, trials: int = 2) -> tuple[Tracker, str]:
    """A search's parent run in its search stage: `trials` search trials running."""
    tracker = Tracker(uri, "raycse-focal")
    parent = tracker.start_run("raycse-focal", tags={SEARCH_TAG: "raycse-focal"})
    tracker.log_params(parent, {"num_samples": 4, "confirm_top_k": 1, "choose_seeds": 0, "judge_seeds": 2})
    for number in range(trials):
        tracker.start_run(f"t{number}", parent_run_id=parent, tags={STAGE_TAG: SEARCH, SEED_TAG: "42",
                                                                    STATUS_TAG: RUNNING})
    return tracker, parent


def test_a_search_stopped_by_a_signal_reads_as_stopped_with_the_command_that_continues_it(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker, parent = _search(uri)
    started = time.time() - 300
    session = sessions.open_session(tracker, parent, started, RESUME)
    assert (session.earlier_s, session.pid, session.host) == (0.0, os.getpid(), socket.gethostname())
    running = raycse.status("raycse-focal", tracking_uri=uri)
    assert running.ended is None and len(running.running) == 2 and running.spent_s == pytest.approx(300, abs=5)

    sessions.record_ending(tracker, parent, session, sessions.STOPPED, signal="SIGTERM", now=started + 100)
    assert tracker.run(parent).info.status == "KILLED"
    status = raycse.status("raycse-focal", tracking_uri=uri)
    assert status.stage == SEARCH and status.ended.startswith("stopped by SIGTERM at ")
    assert status.running == [] and status.unfinished == 2 and status.left_s is None
    assert status.spent_s == pytest.approx(100) and status.resume == f"{RESUME} (in {session.cwd})"
    assert main(["status", "raycse-focal", "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    assert "stage: search; stopped by SIGTERM at " in printed
    assert f"to continue: {RESUME} (in {session.cwd})" in printed
    assert "unfinished: 2 trial(s), not running (--resume continues them)" in printed
    assert "running:" not in printed and "left:" not in printed and "time spent: 1 min 40 s" in printed


def test_a_search_whose_driver_no_longer_runs_reads_as_stopped(tmp_path):
    """A driver killed outright (SIGKILL, a second signal) records no end: on its host, its process is gone."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker, parent = _search(uri, trials=1)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)
    started = tracker.run(parent).info.start_time / 1000 - 60
    killed = sessions.Session(started_at=started, earlier_s=0.0, host=socket.gethostname(), pid=pid,
                              process_started_at=started, command=None, cwd=None)
    tracker.set_tags(parent, {SESSION_TAG: json.dumps(dataclasses.asdict(killed))})
    assert sessions.driver_runs(killed) is False
    assert sessions.driver_runs(dataclasses.replace(killed, host="another-host")) is None  # cannot be seen from here
    status = raycse.status("raycse-focal", tracking_uri=uri)
    assert status.ended == (f"stopped: its driver (process {pid} on {socket.gethostname()}) no longer runs, and "
                            "recorded no end (killed)")
    assert status.resume == "the same raycse.search(...) call with resume=True" and status.running == []
    last_trial = max(run.info.start_time for run in tracker.child_runs(parent)) / 1000
    assert status.spent_s == pytest.approx(last_trial - started)  # up to its last record
    text = format_status(status)
    assert "running:" not in text and "unfinished: 1 trial(s)" in text


def test_the_time_spent_is_one_figure_across_two_sessions(tmp_path, capsys):
    """A search stopped after 100 s and resumed: the second session counts the first (its `earlier_s`), the driver's
    timings put them in one total to the answer (the report page after it), and `raycse status`, the printed timings,
    the report page's table and `raycse.load` all give that total."""
    from raycse.driver.state import PhaseClock, SearchState
    from raycse.reporting.page import _Page, _timings
    from raycse.reporting.tables import format_timings
    from raycse.settings.space import load_space

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker, parent = _search(uri, trials=0)
    first = sessions.open_session(tracker, parent, time.time() - 1000, RESUME)
    sessions.record_ending(tracker, parent, first, sessions.STOPPED, signal="SIGINT", now=first.started_at + 100)
    tracker.reopen_run(parent)  # --resume
    second = sessions.open_session(tracker, parent, time.time() - 30, RESUME)
    assert second.earlier_s == pytest.approx(100) and ENDED_TAG not in tracker.tags(parent)
    assert raycse.status("raycse-focal", tracking_uri=uri).spent_s == pytest.approx(130, abs=2)

    # the driver's clock in the second session: its phases to the answer, the report page after it
    space = load_space("focal").with_cpu_budget()
    state = SearchState(loaded_space=space, options=None, space=space, cluster={"CPU": 2.0}, session=second,
                        clock=PhaseClock(time.perf_counter() - 30))
    for phase in ("setup", "search", "record"):
        with state.clock.phase(phase):
            pass
    state.clock.answered()
    with state.clock.phase("report"):
        time.sleep(0.01)
    timings = state.timings()
    phases = sum(seconds for key, seconds in timings.items() if key.startswith("time_") and key != TOTAL_TIME)
    assert timings[EARLIER_SESSIONS] == pytest.approx(100) and phases == pytest.approx(timings[TOTAL_TIME])
    assert timings["after_answer_report_s"] >= 0.01 and "time_report_s" not in timings
    assert timings[TOTAL_TIME] == pytest.approx(130, abs=2)

    summary = {**json.loads(RECORDED.read_text()), "timings": timings}
    tracker.log_dict(parent, summary, "search_summary.json")
    tracker.log_metrics(parent, timings)
    tracker.end_run(parent, "FINISHED")
    total = timings[TOTAL_TIME]
    assert raycse.status("raycse-focal", tracking_uri=uri).spent_s == total
    assert raycse.load("raycse-focal", tracking_uri=uri).timings[TOTAL_TIME] == total
    line = format_timings(raycse.load("raycse-focal", tracking_uri=uri).timings)
    assert line.startswith(f"Time: {total:.0f} s in all to the answer (earlier sessions 100 s, setup 30 s, search 0 s, "
                           "record 0 s), then the report 0 s. Trials, summed:"), line
    page = _Page(tmp_path)
    _timings(page, timings)
    assert f"<td>total</td><td>{total:.1f}</td>" in "".join(page.parts).replace("\n", "")
