"""How far along a search is, as a person watching it reads it.

On a terminal, one status line stays at the bottom of the screen while the per-trial lines scroll above it:

    search | 2/4 trials done, 1 running | best 81.56 | 3m12s elapsed | about 2m40s left in this stage

Every line the search prints goes above it: while the status line is shown, the process's stdout and stderr (and
the logging handlers that write to them: Ray's, Tune's, MLflow's) pass through `_Above`, which clears the status
line, writes the text and draws the status line again under it; a background thread redraws it every second so
that the clocks move during a long evaluation. (Output written below Python, by a library's C code straight to
the file descriptor, is not seen; Ray's own processes write to their log files.) The terminal's
scrollback thus keeps every trial line and one status line at most. (Pinned at the top instead, it would need a
scroll region, and terminals keep no scrollback of a region that does not start at the top of the screen.)

Elsewhere - a pipe, a log file, a notebook, TERM=dumb - nothing is redrawn and no escape code is written: each
trial that ends adds one plain line with the same figures.

The remaining time is the stage's (raycse/driver/time_left.py): each running trial at the pace of its own steps,
the trials still to start at the pace of those seen, each followed by the test scoring planned at its end (a
judging run on a test seed), all in the slots the stage runs. It overestimates when ASHA stops trials early, and
knows nothing of the stages still to come. The best objective is shown in the search stage only, where it ranks
configurations: elsewhere one run's dev figure decides nothing (the judging seeds' luckiest says nothing).

Who feeds it: the conductor (a stage begins: `shown`, `SearchProgress.stage`), the stages that run trials (how
many they plan: `plan_trials`) and the driver-side Tune callback (a trial reported or ended: `trial_reported`,
`trials_seen`). Tune pickles its callback with the run config, so the callback reaches the display through this
module's functions, which do nothing when no search is being shown.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from raycse.driver.time_left import StageClock
from raycse.records import BEST_OBJECTIVE, FINAL, SEARCH, STEP, TRIAL_EVAL

CLEAR_LINE = "\r\x1b[2K"  # carriage return, then erase the whole line
REDRAW_S = 1.0
DONE_STATUSES = ("TERMINATED", "ERROR")  # Tune's trial statuses of a trial that will not run again


def short_duration(seconds: float) -> str:
    """45s, 3m12s, 1h05m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class SearchProgress:
    """The figures of the status line, and the line itself; `live` draws it in place (a terminal)."""

    def __init__(self, stream: TextIO, live: bool, started_at: float | None = None, clock=time.perf_counter):
        self.stream, self.live, self.clock_fn = stream, live, clock
        self.started_at = clock() if started_at is None else started_at
        self.lock = threading.RLock()
        self.stage_name = ""
        self.learned_test: list[float] = []  # the test scorings measured, kept from stage to stage
        self._reset_trials()

    def _reset_trials(self) -> None:
        self.planned: int | None = None
        self.done: set[str] = set()
        self.running: set[str] = set()
        self.best: float | None = None
        self.mode = "max"
        self._read_all = False  # whether this stage's trials have been read once (seen)
        self.stage_clock = StageClock(learned_test=self.learned_test)
        self.tune_trials: dict = {}  # trial id -> Tune's trial (its latest result's timings)

    # ------------------------------------------------------------------------------------------ feeding
    def stage(self, name: str) -> None:
        with self.lock:
            self.stage_name = name
            self._reset_trials()
            self.draw()

    def plan(self, trials: int, mode: str = "max", tests: int | None = None) -> None:
        """The stage's trials, whether its objective is better high or low, and how many of its trials score the
        test tasks at their end (None: not said)."""
        with self.lock:
            self.planned, self.mode = trials, mode
            self.stage_clock.planned, self.stage_clock.planned_tests = trials, tests
            self.draw()

    def reported(self, trial_id: str, step: int | None, total_steps: int | None, best: float | None) -> None:
        with self.lock:
            self.running.add(trial_id)
            self.stage_clock.reported(trial_id, self.clock_now(), step, total_steps)
            self._better(best)
            self.draw()

    def clock_now(self) -> float:
        return self.clock_fn()

    def seen(self, trials, started=None, ended=None) -> None:
        """Tune's trials at a trial's start or end (`started` / `ended`: that Tune trial). The stage's first call
        reads them all (a restored stage's finished trials included); later calls read only the trial that started
        or ended, so that a search of n trials costs O(n) here, not O(n^2)."""
        with self.lock:
            before = len(self.done)
            if not self._read_all:
                self._read_all = True
                for trial in trials:
                    self._note(trial, started is trial, ended is trial)
            for trial, is_start in ((started, True), (ended, False)):
                if trial is not None:
                    self._note(trial, is_start, not is_start)
            if len(self.done) > before and not self.live:
                self.stream.write(self.text() + "\n")
                self.stream.flush()
            self.draw()

    def _note(self, trial, started: bool, ended: bool) -> None:
        now = self.clock_now()
        if trial.status in DONE_STATUSES or ended:
            if trial.trial_id not in self.done:  # one that ended before this process saw it run is not timed
                self.stage_clock.ended(trial.trial_id, now, measured=trial.trial_id in self.stage_clock.trials)
            self.done.add(trial.trial_id)
            self.running.discard(trial.trial_id)
        elif trial.status == "RUNNING" or started:
            self.running.add(trial.trial_id)
            self.tune_trials[trial.trial_id] = trial
            self.stage_clock.started(trial.trial_id, now, scores_test(trial))
        self._better((trial.last_result or {}).get(BEST_OBJECTIVE))

    def _better(self, value) -> None:
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return
        if self.best is None or (value > self.best if self.mode == "max" else value < self.best):
            self.best = float(value)

    # ------------------------------------------------------------------------------------------ the line
    def remaining(self) -> float | None:
        """Seconds left in this stage (raycse/driver/time_left.py; None: not known yet)."""
        if not self.planned:
            return None
        for trial_id, trial in self.tune_trials.items():  # the running trials' latest timings, as Tune holds them
            result = trial.last_result or {}
            if not result.get(FINAL):  # a final result's evaluation seconds include its test scoring
                self.stage_clock.timed(trial_id, result.get(STEP), result.get(TRIAL_EVAL))
        return self.stage_clock.remaining(self.clock_now())

    def text(self) -> str:
        parts = [self.stage_name or "starting"]
        if self.planned:
            running = len(self.running - self.done)
            parts.append(f"{len(self.done)}/{self.planned} trials done" + (f", {running} running" if running else ""))
        if self.best is not None and self.stage_name == SEARCH:  # where one trial's best ranks something
            parts.append(f"best {self.best:.2f}")
        parts.append(f"{short_duration(self.clock_now() - self.started_at)} elapsed")
        if self.planned:
            left = self.remaining()
            parts.append("time left: estimating" if left is None
                         else f"about {short_duration(left)} left in this stage")
        return " | ".join(parts)

    def draw(self) -> None:
        """Draw the status line in place (live only); the cursor stays at its end."""
        if not self.live:
            return
        with self.lock:
            width = shutil.get_terminal_size((100, 24)).columns - 1  # a wrapped line could not be cleared
            self.stream.write(CLEAR_LINE + self.text()[:max(width, 10)])
            self.stream.flush()

    def clear(self) -> None:
        if self.live:
            with self.lock:
                self.stream.write(CLEAR_LINE)
                self.stream.flush()


class _Above:
    """A text stream whose complete lines are written above the status line (stdout and stderr while shown)."""

    def __init__(self, progress: SearchProgress, stream: TextIO):
        self._progress, self._stream, self._pending = progress, stream, ""

    def write(self, text: str) -> int:
        with self._progress.lock:
            self._pending += text
            if "\n" in self._pending:
                lines, self._pending = self._pending.rsplit("\n", 1)
                self._progress.clear()
                self._stream.write(lines + "\n")
                self._progress.draw()
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def release(self) -> None:
        """Write out a last line that had no newline yet."""
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ... of the real stream
        return getattr(self._stream, name)


_shown: SearchProgress | None = None


def is_terminal(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM", "dumb") != "dumb"


@contextlib.contextmanager
def displayed(started_at: float | None = None, stream: TextIO | None = None) -> Iterator[SearchProgress]:
    """Show a search's progress while the block runs: a live status line on a terminal, plain lines elsewhere."""
    global _shown
    stream = stream or sys.stdout
    progress = SearchProgress(stream, is_terminal(stream), started_at)
    saved = sys.stdout, sys.stderr
    handlers: list[tuple[logging.StreamHandler, TextIO]] = []
    stop = threading.Event()
    if progress.live:
        sys.stdout = _Above(progress, stream)
        if is_terminal(saved[1]):
            sys.stderr = _Above(progress, saved[1])
        handlers = _logging_handlers({saved[0]: sys.stdout, saved[1]: sys.stderr})

        def redraw():
            while not stop.wait(REDRAW_S):
                progress.draw()

        threading.Thread(target=redraw, name="raycse-status-line", daemon=True).start()
    _shown = progress
    try:
        yield progress
    finally:
        stop.set()
        _shown = None
        with progress.lock:
            progress.clear()
            for proxy in (sys.stdout, sys.stderr):
                if isinstance(proxy, _Above):
                    proxy.release()
            for handler, stream in handlers:
                handler.setStream(stream)
            sys.stdout, sys.stderr = saved


def _logging_handlers(streams: dict) -> list[tuple[logging.StreamHandler, TextIO]]:
    """Point every logging handler that writes to the real stdout or stderr at its proxy; what to restore."""
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    swapped = []
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                proxy = streams.get(handler.stream)
                if proxy is not None and proxy is not handler.stream:
                    swapped.append((handler, handler.setStream(proxy)))
    return swapped


def scores_test(trial) -> bool:
    """Whether a Tune trial is marked to score the test tasks at its end (a judging run on a test seed)."""
    from raycse.settings.space import TrialSpec

    return TrialSpec.of(getattr(trial, "config", None) or {}, 0).test


# ---------------------------------------------------------------- what the stages and the Tune callback call
def plan_trials(trials: int, mode: str = "max", tests: int | None = None) -> None:
    """A stage says how many trials it runs (`mode`: whether its objective is better high or low) and how many of
    them score the test tasks at their end (None: not said)."""
    if _shown is not None:
        _shown.plan(trials, mode, tests)


def trial_reported(trial_id: str, step: int | None, total_steps: int | None, best: float | None) -> None:
    """A trial's evaluation: the step it reached of the steps it will take, and its best objective so far."""
    if _shown is not None:
        _shown.reported(trial_id, step, total_steps, best)


def trials_seen(trials, started=None, ended=None) -> None:
    """Tune's trials of the running stage, as a trial starts or ends (that trial: `started`, `ended`)."""
    if _shown is not None:
        _shown.seen(trials, started, ended)
