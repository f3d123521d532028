#!/usr/bin/env bash
# The set-up of a tiny search (the GPU suite's rehearsal space: a 2-layer random BERT, 2 search trials, no
# confirmation) with the set-up stage before the change (the MLflow store opened after Ray's start) and after it (opened
# in a thread while Ray starts), alternated, 3 runs each; prints each run's time_setup_s from its MLflow parent run.
#   bash benchmarks/scripts/ab_setup_overlap.sh BEFORE_REV    # from the repository root, its venv active
set -euo pipefail
before=${1:?usage: ab_setup_overlap.sh BEFORE_REV}
root=$PWD work=$(mktemp -d)
python3 benchmarks/gpu_suite.py rehearsal "$work/space" >/dev/null
cp raycse/driver/stages/setup.py "$work/setup_new.py"
git show "$before:raycse/driver/stages/setup.py" > "$work/setup_old.py"
trap 'cp "$work/setup_new.py" "$root/raycse/driver/stages/setup.py"' EXIT
export RAY_OVERRIDE_RESOURCES='{"GPU": 1, "CPU": 2}' RAYCSE_CACHE_DIR=$work/cache
for i in 1 2 3; do
  for code in old new; do
    cp "$work/setup_$code.py" "$root/raycse/driver/stages/setup.py"
    mkdir -p "$work/$code$i" && (cd "$work/$code$i" && python -m raycse search --space "$work/space/focal.yaml" \
      --no-confirm >log 2>&1)
    python3 -c "import sqlite3; c = sqlite3.connect('$work/$code$i/mlflow.db'); print('$code $i', *(round(v, 2) for (v,)
in c.execute(\"select value from latest_metrics where key = 'time_setup_s'\")))"
  done
done
