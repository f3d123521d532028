#!/usr/bin/env bash
# Refreshes requirements/constraints.txt, the pinned versions that the README's install and .ci/run use: resolves
# raycse[test] afresh from the index in a new virtual environment and writes what it installed, then the GPU suite's
# wheels at the same versions (benchmarks/device_wheels.txt, scripts/device_wheels.py).
# Run it from anywhere, then run the whole test suite on the new pins before committing them:
#   bash scripts/refresh_pins.sh && python -m pip install -c requirements/constraints.txt torch==2.13.0 -e '.[test]' \
#     && python -m pytest -q
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[test]'
{
  echo "# Pinned versions for the README's install and .ci/run: pip install -c requirements/constraints.txt ..."
  echo "# raycse's own requirements (pyproject.toml) stay ranges; these pins only make a test install reproducible."
  echo "# Written by scripts/refresh_pins.sh on $(date -u +%Y-%m-%d) with $("$scratch/venv/bin/python" -V) on $(uname -m);"
  echo "# tests/test_pins.py fails when an installed package differs from its pin. Local version labels (+cpu) are"
  echo "# dropped, so that torch==2.13.0 admits the CPU and the CUDA build alike."
  # --all: setuptools too (torch needs it at run time); pip itself is whatever the venv came with
  "$scratch/venv/bin/python" -m pip freeze --all --exclude-editable --disable-pip-version-check \
    | grep -v '^pip==' | sed -E 's/\+[A-Za-z0-9.]+$//' | LC_ALL=C sort -f
} > requirements/constraints.txt.new
mv requirements/constraints.txt.new requirements/constraints.txt
echo "wrote requirements/constraints.txt ($(grep -c '==' requirements/constraints.txt) pins)"
"$python" scripts/device_wheels.py  # the GPU machine's wheels, at the same versions
