"""A/B in alternation of `raycse search` on one space file, each run scoring the untouched model afresh:

    python benchmarks/scripts/ab_warm_scoring.py ROUNDS SPACE OLD_CHECKOUT NEW_CHECKOUT

Each run: a new --state folder, and a cache folder holding only the kept empty MLflow store (from the first run), so
that the untouched model is scored every time; prints the machine's busy CPU-seconds (/proc/stat) around the command
and its wall clock.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time


def busy_s() -> float:
    values = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    rounds, space, old, new = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    work = tempfile.mkdtemp(prefix="raycse-ab-")
    template = os.path.join(work, "cache-template")
    for i in range(rounds):
        for name, root in ((("old", old), ("new", new)) if i % 2 == 0 else (("new", new), ("old", old))):
            state, cache = os.path.join(work, f"state-{name}-{i}"), os.path.join(work, f"cache-{name}-{i}")
            if os.path.isdir(template):
                shutil.copytree(template, cache)
            env = {**os.environ, "PYTHONPATH": root, "RAYCSE_CACHE_DIR": cache}
            busy, clock = busy_s(), time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "raycse", "search", "--space", space, "--state", state],
                                  env=env, capture_output=True, text=True, cwd=work)
            wall, busy = time.perf_counter() - clock, busy_s() - busy
            scored = done.returncode == 0 and "scoring the untouched model" in done.stdout
            print(name, i, f"{busy:.1f} CPU-s", f"{wall:.1f} s", "ok" if scored else done.stderr[-1500:], flush=True)
            if not os.path.isdir(template):  # the first run made the empty store: the later ones start from it
                shutil.copytree(cache, template, ignore=shutil.ignore_patterns("untouched"))


if __name__ == "__main__":
    main()
