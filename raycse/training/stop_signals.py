"""The signals that stop a run (Ctrl-C's SIGINT, SIGTERM, SIGHUP), and how a run stops on them.

Batch schedulers and clouds stop things with SIGTERM (Slurm's `scancel` and time limit, Kubernetes' eviction,
`kill`, `timeout`), a closed ssh session with SIGHUP, a terminal with SIGINT. Each stops a raycse command the same
way, and each says so with its own exit status, 128 + the signal's number (130, 143, 129), as a shell reports it:

- the first signal stops the run where it stands: `Stopped` (a KeyboardInterrupt) is raised in the main thread, so
  every `finally` runs and the MLflow run of a training ends KILLED; during a Tune experiment Tune is asked for its
  own graceful stop instead (`graceful`), which snapshots the experiment one last time, and the search ends after it;
- the command line prints one line that says how to continue (`stopped_line`), runs its exit hooks (Ray's shutdown
  among them), and waits until every process it started has ended (`descendants`, `wait_ended`) before it exits:
  Ray's, the trials' and their workers', which can hold a GPU's memory;
- a second signal stops at once: every process the command started is killed, as `kill -9` of the whole job would
  (what a search and a training already survive), and the command exits; so does a stop still not over
  STOP_WITHIN_S after the first signal (a stop in order takes a few seconds: one that hangs has lost Ray under it).

Ray replaces a driver's SIGTERM handler when it starts (`ray.init` installs `sys.exit`, and its core worker a
handler that dumps a native stack and aborts: exit 134): `ray_starting` puts raycse's back, and keeps a signal meant
for the command's process group (`timeout`'s, a terminal's hangup) from reaching Ray's processes, so that the
driver stops them in order rather than finding them dead under it. Light on purpose (no torch, no Ray at import):
the command line installs it first.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ENDED_WITHIN_S = 10.0  # after the exit hooks, a process still running is terminated, then killed this much later
# A stop in order takes a few seconds; one still not over after this long (Ray's processes killed under the driver,
# as a job-wide signal does) stops at once, within the 30 s that Slurm (KillWait) and Kubernetes (its termination
# grace period) give by default before their SIGKILL.
STOP_WITHIN_S = 25.0
# How each command continues after a stop (the command line's last line names it). A plan (`--dry-run`) runs
# nothing: stopped, there is nothing to continue.
DRY_RUN = "--dry-run"
CONTINUE = {
    DRY_RUN: "the dry run was stopped: it ran, created and started nothing, so nothing is left to continue",
    "search": "the same command with --resume continues the search",
    "train": "the same command with --resume continues the training from its last checkpoint",
    "compare": "the same command with --resume continues the comparison",
}


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal. A KeyboardInterrupt, so that code which ends a run on Ctrl-C ends it alike."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Handling:
    """The process's signal handling: installed by the command line (`install`), or for one Tune run (`graceful`)."""

    def __init__(self) -> None:
        self.command: str | None = None   # set by `install`: the command line's own process (DRY_RUN: its plan)
        self.argv: list[str] | None = None  # the command line's arguments, set by `install`
        self.received: list[int] = []
        self.on_first: Callable[[], None] | None = None  # during a Tune run: ask Tune for its graceful stop
        self.exiting = False
        self.ttys: set[int] = set()

    def handler(self, signum: int, frame) -> None:
        if self.received:
            if self.command is None:  # the Python API's process: a second signal interrupts at once
                raise Stopped(signum)
            stop_at_once(signum)
        self.received.append(signum)
        if self.command is not None:  # a stop that cannot end in order (Ray's processes killed under it) ends anyway
            watchdog = threading.Timer(STOP_WITHIN_S, stop_at_once, args=(signum, STOP_WITHIN_S))
            watchdog.daemon = True
            watchdog.start()
        if signum == signal.SIGHUP:
            _silence_hung_up_terminal(self.ttys)
        if self.on_first is not None:
            self.on_first()
        elif not self.exiting:
            raise Stopped(signum)


_HANDLING = _Handling()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install(argv: list[str]) -> None:
    """The command line's handling of SIGINT, SIGTERM and SIGHUP for the whole command (`argv`: its arguments)."""
    _HANDLING.command = DRY_RUN if DRY_RUN in argv else next((arg for arg in argv if not arg.startswith("-")), "")
    _HANDLING.argv = list(argv)
    _HANDLING.ttys = {fd for fd in (1, 2) if os.isatty(fd)}
    for signum in SIGNALS:
        signal.signal(signum, _HANDLING.handler)


def command_line() -> list[str] | None:
    """The command line's arguments (after `raycse`), in the command line's own process; None elsewhere (the
    Python API)."""
    return None if _HANDLING.argv is None else list(_HANDLING.argv)


def received() -> int | None:
    """The signal that stopped this process's run, if one did."""
    return _HANDLING.received[0] if _HANDLING.received else None


@contextlib.contextmanager
def ray_starting() -> Iterator[None]:
    """Around `ray.init`: the processes it starts are out of reach of a signal meant for the command's process group,
    and ignore SIGHUP; afterwards raycse's handlers replace the SIGTERM handlers Ray installed (the command line's;
    elsewhere Ray's stay).

    `timeout`, a batch script's `kill 0` or an init that forwards signals send theirs to the command's whole process
    group, and Ray's processes, started by the driver, are in it: they would die under the driver's graceful stop
    (Ray's GCS gone, the driver waits a minute for it, then aborts). So while Ray starts them, the driver stands in
    a process group of its own, which they inherit, and then goes back to its own group (for the few seconds of
    the move, a Ctrl-C at the terminal misses it). A process that leads its group (a session's first process, an
    interactive shell's job) cannot move; its group's signals come from its terminal, whose hangup Ray's processes
    ignore (inherited, as under `nohup`), and whose Ctrl-C they block (Ray's own doing)."""
    if not _main_thread():
        yield
        return
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # outside the terminal's foreground group, a write to the terminal would stop the driver (SIGTTOU) under `stty
    # tostop`: ignored, the write goes through
    terminal_output = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    group = os.getpgrp()
    moved = group != os.getpid()
    if moved:
        try:
            os.setpgid(0, 0)
        except OSError:
            moved = False
    try:
        yield
    finally:
        if moved:
            with contextlib.suppress(OSError):  # the group is gone only if every other process of it has ended
                os.setpgid(0, group)
        signal.signal(signal.SIGTTOU, terminal_output)
        signal.signal(signal.SIGHUP, hangup)
        _reinstall()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Around a library call that installs a signal handler of its own and leaves it (Ray Train's fit takes SIGINT
    for its own abort): the command line's handlers are back afterwards."""
    try:
        yield
    finally:
        _reinstall()


def _reinstall() -> None:
    if _HANDLING.command is not None and _main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _HANDLING.handler)


class GracefulStop:
    """What `graceful` yields: once the run has returned, `signum` is the signal that asked for its stop (or None)."""

    signum: int | None = None


@contextlib.contextmanager
def graceful(stop: Callable[[], None]) -> Iterator[GracefulStop]:
    """For a run that stops itself in order (a Tune experiment): the first signal calls `stop()` instead of raising.
    Outside the command line (the Python API in a main thread), the handlers are installed for this run only."""
    if not _main_thread():  # signals reach the main thread alone
        yield GracefulStop()
        return
    previous = None
    if _HANDLING.command is None:
        previous = {signum: signal.signal(signum, _HANDLING.handler) for signum in SIGNALS}
    _HANDLING.on_first = stop
    run = GracefulStop()
    try:
        yield run
    finally:
        _HANDLING.on_first = None
        run.signum = received()
        if previous is not None:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            _HANDLING.received.clear()  # the API's caller gets its Stopped; the next run starts afresh


def stopped_line(signum: int | None = None) -> str:
    """The command line's last line after a stop: `raycse: interrupted` for Ctrl-C; the signal and how to continue
    for the others."""
    signum = signum or received() or signal.SIGINT
    if signum == signal.SIGINT:
        return "raycse: interrupted"
    how = CONTINUE.get(_HANDLING.command or "")
    return f"raycse: stopped by {signal.Signals(signum).name}" + (f"; {how}" if how else "")


def exit_status(signum: int | None = None) -> int:
    """128 + the signal's number, as a shell reports a command a signal ended: 130, 143, 129."""
    return 128 + (signum or received() or signal.SIGINT)


def report_stop(err: BaseException | None) -> int:
    """Print the stop's one line (to a terminal that may have hung up) and return the exit status."""
    signum = getattr(err, "signum", None) or received() or signal.SIGINT
    with contextlib.suppress(OSError):
        print(stopped_line(signum), file=sys.stderr, flush=True)
    return exit_status(signum)


def exiting() -> None:
    """The command has its answer and is on its way out: a first signal lets the exit go on, a second one stops it
    at once."""
    _HANDLING.exiting = True


def _silence_hung_up_terminal(ttys: set[int]) -> None:
    """After a hangup, a write to the terminal fails (EIO): the output that terminal had goes to /dev/null instead,
    so that the run stops in order rather than on a failed print. A terminal that hung up no longer answers as one."""
    gone = [fd for fd in ttys if not os.isatty(fd)]
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in gone:
            os.dup2(devnull, fd)
        os.close(devnull)


# ----------------------------------------------------------------------------------- the processes a run started
def descendants() -> list:
    """Every process this one started, and theirs (Ray's processes, the trials', a DataLoader's workers), taken
    while they are still its descendants: once a parent ends, its children belong to init."""
    import psutil  # here, not at `raycse --help`

    with contextlib.suppress(psutil.Error):
        return psutil.Process().children(recursive=True)
    return []


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE  # a zombie has ended: it only awaits
    except psutil.Error:
        return False


def wait_ended(procs: list, within_s: float = ENDED_WITHIN_S) -> None:
    """Return once every one of `procs` has ended: given `within_s` seconds after the exit hooks stopped them, a
    process still running is terminated, and killed a second later if it still runs."""
    if not procs:  # nothing started
        return
    import psutil

    deadline = time.monotonic() + within_s
    for last_resort in ("terminate", "kill", None):
        while any(map(_alive, procs)) and time.monotonic() < deadline:
            time.sleep(0.05)
        running = [proc for proc in procs if _alive(proc)]
        if not running or last_resort is None:
            return
        for proc in running:
            with contextlib.suppress(psutil.Error):
                getattr(proc, last_resort)()
        deadline = time.monotonic() + 1.0


def stop_at_once(signum: int, after_s: float | None = None) -> None:
    """A second signal, or a stop still not over `after_s` seconds after the first: kill every process the command
    started, say so, and exit (a kill of the whole job, which a search and a training resume from)."""
    procs = descendants()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()
    why = (f"by a second signal ({signal.Signals(signum).name})" if after_s is None else
           f"{after_s:.0f} s after {signal.Signals(signum).name}, its stop in order not over")
    with contextlib.suppress(OSError):
        print(f"raycse: stopped at once {why}"
              + (f"; {CONTINUE[_HANDLING.command]}" if _HANDLING.command in CONTINUE else ""),
              file=sys.stderr, flush=True)
    if procs:
        wait_ended(procs, within_s=2.0)
    os._exit(128 + signum)
