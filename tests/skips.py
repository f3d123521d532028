"""A test that needs something the machine may lack skips without it, except in CI, where the lack is a failure:
.ci/run installs everything the suite needs, so a skip there would hide a test that no longer runs."""
from __future__ import annotations

import importlib
import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail with it when CI is set."""
    if in_ci():
        pytest.fail(f"CI is set, and yet {reason}")
    pytest.skip(reason)


def require_module(name: str, hint: str):
    """The module, imported; skipped (failed in CI) when it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        unavailable(f"{name} cannot be imported ({err}); {hint}")
