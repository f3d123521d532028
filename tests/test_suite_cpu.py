"""benchmarks/suite_cpu.py: a command's CPU by kind of process, from /proc (the test suite's profile)."""
from __future__ import annotations

import json
import sys

import pytest
from benchmark_modules import load_benchmark

suite_cpu = load_benchmark("suite_cpu")


@pytest.mark.parametrize(("name", "command", "kind"), [
    ("ray::ImplicitFu", "ray::ImplicitFunc.train", "Ray: Tune's trial actors"),  # /proc keeps 15 characters
    ("ray::WarmWorker", "ray::WarmWorker.__init__", "Ray: trial processes (warm workers, Ray Train workers)"),
    ("ray::RayTrainWo", "ray::RayTrainWorker", "Ray: trial processes (warm workers, Ray Train workers)"),
    ("ray::DashboardA", "ray::DashboardAgent", "Ray: dashboard and runtime-env agents"),
    ("ray::IDLE", "ray::IDLE", "Ray: workers that ran a task, or nothing"),
    ("ray::score_unto", "ray::score_untouched", "Ray: other workers (tasks)"),
    ("gcs_server", "/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp",
     "Ray: GCS, raylet, API server, monitors"),
    ("raycse", "/venv/bin/python /venv/bin/raycse search --space focal.yaml", "raycse CLI processes"),
    ("python", "/venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))",
     "test processes (pytest and its xdist workers)"),
    ("python3", "python3 -c print('ray::IDLE')", "the rest (benchmark scripts, MLflow, PostgreSQL, Chromium, ...)"),
])
def test_a_process_is_counted_by_its_name_or_command(name, command, kind):
    assert suite_cpu.kind_of(name, command) == kind


def test_a_commands_cpu_is_sampled_process_by_process(tmp_path, capsys):
    out, rows = tmp_path / "cpu.json", tmp_path / "processes.jsonl"
    busy = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    assert suite_cpu.main(["--output", str(out), "--processes", str(rows), "--interval", "0.1", "--",
                           sys.executable, "-c", busy]) == 0
    result = json.loads(out.read_text())
    assert result["returncode"] == 0 and result["wall_s"] >= 0.6 and result["machine_cpu_s"] >= 0.6
    mine = [json.loads(line) for line in rows.read_text().splitlines() if "process_time() < end" in line]
    assert len(mine) == 1 and 0.5 <= mine[0]["cpu_s"] <= 1.5, mine  # the busy child, read until it ended
    assert sum(row["cpu_s"] for row in result["by_kind"]) == pytest.approx(result["sampled_cpu_s"], abs=0.2)
    assert "CPU-s on" in capsys.readouterr().out
