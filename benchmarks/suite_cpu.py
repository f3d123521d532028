"""Where a command's CPU goes, process by process: the test suite's, above all.

    python benchmarks/suite_cpu.py --output OUT.json -- python -m pytest -q

Runs the command and, every --interval seconds until it ends, reads every process's CPU time (user + system) from
/proc/<pid>/stat. A process's CPU is its last reading (less its first, for one already running when sampling began),
so a process that lived under one interval is missed (shell helpers, `ps`: little CPU). Prints, and writes as JSON,
the command's wall clock, the machine's CPU-seconds meanwhile (/proc/stat) and the sampled ones by kind of process:
Ray's own processes, its workers by what they ran (`ray::WarmWorker`, `ray::ImplicitFunc`: Tune's trial actors,
`ray::IDLE`: workers that ran a task or nothing), `raycse` CLI processes, the test processes, the rest.
Linux only; it costs about 1% of a core.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
# (kind, markers: in the process's name or on its command line), first match wins. A name is what /proc keeps of it:
# its first 15 characters ("ray::ImplicitFunc.train" is "ray::ImplicitFu").
KINDS = [
    ("Ray: GCS, raylet, API server, monitors", ("gcs_server", "/raylet", "dashboard/dashboard.py", "log_monitor.py",
                                                "autoscaler/_private/monitor.py", "monitor.py")),
    ("Ray: dashboard and runtime-env agents", ("ray::DashboardAgent", "ray::RuntimeEnvAgent")),
    ("Ray: trial processes (warm workers, Ray Train workers)", ("ray::WarmWorker", "ray::RayTrainWorker")),
    ("Ray: Tune's trial actors", ("ray::ImplicitFunc",)),
    ("Ray: the warm pool", ("ray::WarmPool",)),
    ("Ray: Ray Train's controllers and helpers", ("ray::TrainController", "ray::PlacementGroup", "ray::Synchronization",
                                                 "ray::DatasetManager", "ray::Preemption", "ray::Barrier")),
    ("Ray: workers that ran a task, or nothing", ("ray::IDLE",)),
    ("Ray: other workers (tasks)", ("ray::",)),
    ("raycse CLI processes", (" -m raycse ", "bin/raycse ")),
    ("test processes (pytest and its xdist workers)", ("pytest", "import sys;exec(eval(sys.stdin.readline()))")),
]


def kind_of(name: str, command: str) -> str:
    for kind, markers in KINDS:  # a Ray worker's kind is in its name ("ray::" markers), any other's in its command
        if any(name == marker[:15] or name.startswith(marker) if marker.startswith("ray::")
               else marker in name or marker in command for marker in markers):
            return kind
    return "the rest (benchmark scripts, MLflow, PostgreSQL, Chromium, ...)"


def machine_busy_s() -> float:
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


def read_process(pid: str) -> tuple[str, float, str] | None:
    """(name, CPU-seconds, start time in ticks) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return name, (int(fields[11]) + int(fields[12])) / TICK, fields[19]


def command_of(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return ""


class Sampler(threading.Thread):
    """Every process's first and last CPU reading, by (pid, start time)."""

    def __init__(self, interval: float):
        super().__init__(daemon=True)
        self.interval, self.done, self.seen = interval, threading.Event(), {}

    def run(self) -> None:
        first_pass = True
        while not self.done.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                read = read_process(pid)
                if read is None:
                    continue
                name, cpu, started = read
                entry = self.seen.setdefault((pid, started), {"first": cpu if first_pass else 0.0, "readings": 0})
                # read again while it is new (a child read between its fork and its exec has its parent's command)
                # and whenever its name changes (a Ray worker renames itself for what it runs)
                if entry["readings"] < 3 or entry["name"] != name:
                    entry["command"] = command_of(pid) or entry.get("command", "")
                entry["last"], entry["name"], entry["readings"] = cpu, name, entry["readings"] + 1
            first_pass = False
            self.done.wait(self.interval)


def summary(sampler: Sampler, wall_s: float, busy_s: float) -> dict:
    by_kind, processes = Counter(), Counter()
    for entry in sampler.seen.values():
        kind = kind_of(entry["name"], entry["command"])
        by_kind[kind] += entry["last"] - entry["first"]
        processes[kind] += 1
    return {"wall_s": round(wall_s, 1), "machine_cpu_s": round(busy_s, 1), "cores": os.cpu_count(),
            "busy_share": round(busy_s / (wall_s * (os.cpu_count() or 1)), 3),
            "sampled_cpu_s": round(sum(by_kind.values()), 1),
            "by_kind": [{"kind": kind, "processes": processes[kind], "cpu_s": round(cpu, 1)}
                        for kind, cpu in by_kind.most_common()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between two readings (default 0.5)")
    parser.add_argument("--processes", type=Path, help="also every process's row (name, command, CPU-s), as JSON lines")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --")
    sampler = Sampler(args.interval)
    sampler.start()
    busy, started = machine_busy_s(), time.monotonic()
    returncode = subprocess.call(command)
    wall_s, busy_s = time.monotonic() - started, machine_busy_s() - busy
    sampler.done.set()
    sampler.join()
    result = {"command": command, "returncode": returncode, **summary(sampler, wall_s, busy_s)}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    if args.processes:
        args.processes.write_text("".join(json.dumps({"name": e["name"], "command": e["command"],
                                                      "cpu_s": round(e["last"] - e["first"], 2)}) + "\n"
                                          for e in sampler.seen.values()))
    print(f"{' '.join(command)}: exit {returncode}, {result['wall_s']} s, {result['machine_cpu_s']} CPU-s on "
          f"{result['cores']} cores ({result['busy_share']:.0%} busy); sampled {result['sampled_cpu_s']} CPU-s:")
    for row in result["by_kind"]:
        print(f"  {row['cpu_s']:8.1f} CPU-s {row['processes']:5d} processes  {row['kind']}")
    return returncode


if __name__ == "__main__":
    raise SystemExit(main())
