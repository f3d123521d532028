"""How long `raycse search` takes to stop in order on SIGTERM: the CPU budget's focal search, stopped at its search
stage's first evaluation; the time from the signal to the command's exit, and whether anything it started outlived it.

    python benchmarks/scripts/measure_stop.py OUT.txt [RUNS]
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil


def one_run(log) -> None:
    folder = tempfile.mkdtemp(prefix="raycse-stop-")
    command = [sys.executable, "-m", "raycse", "search", "--space", "focal", "--budget", "cpu", "--state", folder]
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines, seen, evaluated = [], {}, threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if " search " in line and " step " in line:
                evaluated.set()

    def watch():  # every process the command started, to check that none outlives it
        while proc.poll() is None:
            try:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
            time.sleep(0.2)

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=watch, daemon=True).start()
    if not evaluated.wait(timeout=900):
        proc.kill()
        raise SystemExit("no search evaluation within 900 s:\n" + "\n".join(lines[-40:]))
    running = sum(1 for line in lines if " search " in line and " step " in line)
    signalled = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=300)
    ended = time.monotonic()
    time.sleep(1)
    left = [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    log.write(f"command: {' '.join(command[1:])} (in a new empty folder)\n")
    log.write(f"signal sent {signalled - started:.1f} s after the start, at the search stage's first evaluation "
              f"line ({running} evaluation line(s) printed by then)\n")
    log.write(f"stop: SIGTERM to exit in {ended - signalled:.2f} s; exit status {code}; last line: {lines[-1]!r}\n")
    log.write(f"processes the command started: {len(seen)}; still running 1 s after its exit: {len(left)}\n")
    log.write("the output's last 8 lines:\n" + "\n".join("    " + line for line in lines[-8:]) + "\n\n")
    log.flush()


if __name__ == "__main__":
    with open(sys.argv[1], "a", encoding="utf-8") as out:
        out.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load average {os.getloadavg()}\n")
        for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1):
            one_run(out)
