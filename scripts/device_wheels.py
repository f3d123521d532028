"""benchmarks/device_wheels.txt, the wheels the lent GPU machine needs beyond its image, written or checked: each at the
version requirements/constraints.txt pins, so that the GPU suite runs the versions CI tests.

    python scripts/device_wheels.py            # write benchmarks/device_wheels.txt
    python scripts/device_wheels.py --check    # exit 1, writing nothing, when the file differs from what it would be

Which packages travel, and why, is stated here (CARRIED); their versions only in the constraints, which
scripts/refresh_pins.sh rewrites and then runs this script. The image's own packages (torch's CUDA build,
transformers, numpy, ...) are not carried: the suite's records name the versions it ran (torch, transformers).
tests/test_pins.py fails when the file is not what this script writes.
"""
from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
WHEELS = ROOT / "benchmarks" / "device_wheels.txt"
HEADER = """\
# What raycse needs on the lent GPU machine beyond its image (which has torch, transformers, sentence-transformers,
# numpy, scipy, pandas, pyarrow, ...), at the versions requirements/constraints.txt pins: written by
# scripts/device_wheels.py (edit the list there, never here); tests/test_pins.py fails when they differ.
# benchmarks/device_carry.py downloads them for Python 3.12; `python benchmarks/gpu_suite.py pins` compares them with
# the rehearsal's."""
# (why, the packages): in the order device_carry.py downloads them
CARRIED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ray[tune,train], optuna, mlflow-skinny (the client, tracing included: no server, no UI), plotly, and what they "
     "need that the image lacks",
     ("ray", "optuna", "colorlog", "alembic", "Mako", "SQLAlchemy", "mlflow-skinny", "opentelemetry-api",
      "opentelemetry-proto", "opentelemetry-sdk", "opentelemetry-semantic-conventions", "databricks-sdk", "google-auth",
      "pyasn1", "pyasn1_modules", "cachetools", "fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core",
      "annotated-types", "typing-inspection", "GitPython", "gitdb", "smmap", "importlib_metadata", "python-dotenv",
      "sqlparse", "tensorboardX", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "plotly")),
    ("MLflow's SQL store imports cryptography.fernet", ("cryptography", "cffi", "pycparser")),
    ("sentence-transformers' trainer needs it: benchmarks/peers.py (gpu_suite.sh's peers part) runs that trainer",
     ("accelerate",)),
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    """A pins file (`name==version` a line, `#` comments): canonical name -> version."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return pins


def render(constraints: dict[str, str]) -> str:
    """The text of device_wheels.txt for these constraints (canonical name -> version).

    Example:
        >>> "ray==2.60.0" in render(read_pins()).splitlines()
        True
    """
    missing = [name for _, names in CARRIED for name in names if canonical(name) not in constraints]
    if missing:
        raise SystemExit(f"device_wheels: error: {', '.join(missing)} not pinned in {CONSTRAINTS.relative_to(ROOT)}: "
                         "add it to raycse's requirements, or take it off CARRIED")
    lines = [HEADER]
    for why, names in CARRIED:
        lines.extend(textwrap.wrap(why, 118, initial_indent="# ", subsequent_indent="# "))
        lines.extend(f"{name}=={constraints[canonical(name)]}" for name in names)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs, writing nothing")
    args = parser.parse_args(argv)
    text = render(read_pins())
    if args.check:
        if WHEELS.read_text(encoding="utf-8") != text:
            print(f"device_wheels: {WHEELS.relative_to(ROOT)} is not what requirements/constraints.txt gives: run "
                  "python scripts/device_wheels.py", file=sys.stderr)
            return 1
        return 0
    WHEELS.write_text(text, encoding="utf-8")
    print(f"wrote {WHEELS.relative_to(ROOT)} ({sum(len(names) for _, names in CARRIED)} wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
