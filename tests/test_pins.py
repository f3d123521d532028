"""The test install is pinned (requirements/constraints.txt, which the README's install and .ci/run pass to pip), and
the commands the tests start are this interpreter's: a release upstream cannot change what a fresh install of today's
code runs, and a venv need not be activated for its tests to pass."""
from __future__ import annotations

import importlib.metadata as metadata
import shutil
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
DEVICE_WHEELS = ROOT / "benchmarks" / "device_wheels.txt"
REFRESH = "bash scripts/refresh_pins.sh"


def pins() -> dict[str, Version]:
    """Package name (canonical) → pinned version, from the constraints file."""
    pinned: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        assert version, f"{CONSTRAINTS.name}: {line!r} is not a name==version pin"
        key = canonicalize_name(name)
        assert key not in pinned, f"{CONSTRAINTS.name}: {name} pinned twice"
        pinned[key] = Version(version)
    return pinned


def dependency_closure(root: str) -> dict[str, str]:
    """Every distribution that `pip install root` needs here, transitively, with the markers evaluated for this
    interpreter and the extras asked for on the way: canonical name → the requirement that first brought it in."""
    needed: dict[str, str] = {}
    queue = [(Requirement(root), "the README's install")]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        requirement, parent = queue.pop()
        key = canonicalize_name(requirement.name)
        if (key, frozenset(requirement.extras)) in seen:
            continue
        seen.add((key, frozenset(requirement.extras)))
        needed.setdefault(key, parent)
        distribution = metadata.distribution(requirement.name)
        for line in distribution.requires or []:
            child = Requirement(line)
            extras = requirement.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                queue.append((child, f"{distribution.metadata['Name']} ({line})"))
    return needed


def test_every_package_the_test_install_needs_is_pinned_and_installed_at_its_pin():
    pinned = pins()
    needed = dependency_closure("raycse[test]")
    needed.pop("raycse")
    assert len(needed) > 50, sorted(needed)  # the walk reached past raycse's own requirements
    unpinned = sorted(f"{name} (needed by {why})" for name, why in needed.items() if name not in pinned)
    assert not unpinned, f"not pinned in {CONSTRAINTS.name}: {unpinned}; refresh the pins: {REFRESH}"
    drifted = sorted(f"{name} {metadata.version(name)} (pinned {pinned[name]})" for name in needed
                     if Version(Version(metadata.version(name)).public) != pinned[name])
    assert not drifted, (f"installed versions differ from {CONSTRAINTS.name}: {drifted}; install with "
                         "`pip install -c requirements/constraints.txt torch==2.13.0 -e '.[test]'`, or refresh the "
                         f"pins: {REFRESH}")


def test_the_gpu_machine_s_wheels_are_the_pinned_versions():
    """benchmarks/device_wheels.txt (what the GPU suite carries to the lent machine) pins each package at the version
    the constraints pin, so that a GPU figure comes from the code CI tests (the image's own torch aside); and it is
    exactly what scripts/device_wheels.py writes from them."""
    from benchmark_modules import load_script

    pinned = pins()
    carried = {}
    for line in DEVICE_WHEELS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            carried[canonicalize_name(name)] = Version(version)
    assert {"ray", "optuna", "mlflow-skinny", "cryptography", "pydantic"} <= set(carried), sorted(carried)
    differ = sorted(f"{name} {version} carried, {pinned.get(name, 'none')} pinned" for name, version in carried.items()
                    if pinned.get(name) != version)
    assert not differ, f"{DEVICE_WHEELS.name} differs from {CONSTRAINTS.name}: {differ}; run scripts/device_wheels.py"
    device_wheels = load_script("device_wheels")
    assert DEVICE_WHEELS.read_text(encoding="utf-8") == device_wheels.render(device_wheels.read_pins()), \
        "run python scripts/device_wheels.py"


def test_raycse_itself_asks_for_ranges_not_pins():
    """The pins are for the test install; raycse's own requirements stay ranges, so it installs beside other
    packages."""
    requirements = [Requirement(line) for line in metadata.distribution("raycse").requires or []]
    exact = [str(r) for r in requirements if any(spec.operator in ("==", "===") for spec in r.specifier)]
    assert not exact, exact


@pytest.mark.parametrize("command", ["ray", "raycse", "mlflow", "python3"])
def test_the_commands_tests_start_are_this_interpreters(command):
    """tests/conftest.py puts this interpreter's scripts folder first on PATH."""
    found = shutil.which(command)
    assert found is not None and Path(found).parent == Path(sysconfig.get_path("scripts")), found
