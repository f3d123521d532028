"""The suite's own scheduling (tests/conftest.py): a module's tests that share a module-scoped fixture form one xdist
group, so that one test process builds the fixture once. xdist marks a grouped test by a suffix of its id, which the
scheduler reads; with pytest 9.2 the suffix was silently lost, and each of those tests went out alone (two modules'
searches, 24 s and 36 s, were built twice a run). And the run's end finds any process a test left running."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def shared_by_the_module() -> int:
    return os.getpid()


def test_a_test_sharing_a_module_fixture_goes_out_with_its_module_s_group(request, shared_by_the_module):
    grouped = getattr(request.config.option, "loadgroup", False)  # set in a test process of `--dist loadgroup`
    suffix = f"@{request.path.name}"
    assert request.node.nodeid.endswith(suffix) if grouped else suffix not in request.node.nodeid


def test_the_readme_s_test_command_groups_tests():
    """pyproject's addopts: the README's `python -m pytest -q` runs the tests in groups."""
    import tomllib
    from pathlib import Path

    addopts = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["addopts"].split()
    assert addopts[addopts.index("--dist") + 1] == "loadgroup"


def test_the_run_s_end_finds_a_process_a_test_left_running_whoever_reaps_it():
    """tests/conftest.py: every process the run starts carries its mark, a grandchild whose parent has ended (reaped
    by init, as Ray's client server is) too; the run's end names those still alive."""
    import subprocess
    import sys
    import time

    from conftest import RUN_MARK, processes_left_behind

    assert os.environ[RUN_MARK]
    # a child that starts a sleeper of its own and ends at once: the sleeper is nobody's child here
    # (its output elsewhere: a sleeper holding the pipe would keep `run` waiting until it ends)
    script = ("import subprocess, sys; print(subprocess.Popen(['sleep', '60'], stdin=subprocess.DEVNULL, "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
    orphan = int(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    try:
        assert orphan in {proc.pid for proc in processes_left_behind()}
    finally:
        os.kill(orphan, 9)
    deadline = time.monotonic() + 10
    while orphan in {proc.pid for proc in processes_left_behind()}:
        assert time.monotonic() < deadline, "a killed process is still listed"
        time.sleep(0.1)
