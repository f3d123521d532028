"""`raycse` and `python -m raycse`: the command line (raycse.cli), then an exit that skips the interpreter's teardown.

Freeing torch's, Ray's and MLflow's modules object by object took 1.5 to 3 s after the answer was printed; the
operating system frees the memory at once. All that Python does on its way out still runs first.
"""
import atexit
import os
import sys
import threading


def run() -> None:
    from raycse.cli import main

    code = main()
    # what the interpreter's exit runs before its teardown, in its order: the threads' exit hooks (thread pools'
    # workers stop), the wait for the other threads, then the exit hooks (Ray's shutdown, logging's flush,
    # temporary folders)
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
