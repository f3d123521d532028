"""`raycse` and `python -m raycse`: the command line (raycse.cli), then an exit that skips the interpreter's teardown.

Freeing torch's, Ray's and MLflow's modules object by object took 1.5 to 3 s after the answer was printed; the
operating system frees the memory at once. All that Python does on its way out still runs first, and the exit waits
until every process the command started has ended (raycse/training/stop_signals.py, which also makes SIGTERM and
SIGHUP stop the command as Ctrl-C does).
"""
import atexit
import contextlib
import gc
import os
import sys
import threading


def run() -> None:
    from raycse.cli import main
    from raycse.training import stop_signals

    stop_signals.install(sys.argv[1:])  # Ctrl-C, SIGTERM and SIGHUP stop the command alike
    code = main()
    gc.freeze()  # on the way out, no full collection scans all the command made (0.4 s on 2 CPU cores)
    stop_signals.exiting()
    started = stop_signals.descendants()  # Ray's processes, the trials' and their workers', while still ours
    # what the interpreter's exit runs before its teardown, in its order: the threads' exit hooks (thread pools'
    # workers stop), the wait for the other threads, then the exit hooks (Ray's shutdown, logging's flush,
    # temporary folders)
    threading._shutdown()
    atexit._run_exitfuncs()
    stop_signals.wait_ended(started)  # nothing the command started outlives it (a trial's process can hold a GPU)
    with contextlib.suppress(OSError):  # a terminal that hung up
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
