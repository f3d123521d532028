"""The suite's own scheduling (tests/conftest.py): a module's tests that share a module-scoped fixture form one xdist
group, so that one test process builds the fixture once. xdist marks a grouped test by a suffix of its id, which the
scheduler reads; with pytest 9.2 the suffix was silently lost, and each of those tests went out alone (two modules'
searches, 24 s and 36 s, were built twice a run)."""
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
