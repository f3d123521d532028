#!/usr/bin/env bash
# A whole tiny search (the GPU suite's rehearsal space: a 2-layer random BERT, 48 STS-B dev pairs, 2 search trials,
# choosing and judging, on Ray's fake GPU) by the code at BEFORE_REV and by the working tree, alternated, 3 runs each,
# each in a new folder with the untouched model's figures already cached. Prints each run's wall clock, the machine's
# busy CPU-seconds meanwhile (/proc/stat: every process of the search, Ray's included), its trials and its report
# stage's seconds (time_report_s on the MLflow parent run).
#   bash benchmarks/scripts/ab_trial_turnaround.sh BEFORE_REV    # from the repository root, venv active
set -euo pipefail
before=${1:?usage: ab_trial_turnaround.sh BEFORE_REV}
root=$PWD work=$(mktemp -d)
git worktree add -q --detach "$work/before" "$before"
trap 'git -C "$root" worktree remove --force "$work/before"' EXIT
python3 benchmarks/gpu_suite.py rehearsal "$work/space" >/dev/null
export RAY_OVERRIDE_RESOURCES='{"GPU": 1, "CPU": 2}' RAYCSE_CACHE_DIR=$work/cache HF_HUB_OFFLINE=1
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8+$9)/100}' /proc/stat; }
(cd "$work" && python -m raycse search --space "$work/space/focal.yaml" --state "$work/warm-up" >/dev/null 2>&1)
for i in 1 2 3; do
  for code in before after; do
    src=$root; [ "$code" = before ] && src=$work/before
    cpu0=$(busy) t0=$(date +%s.%N)
    (cd "$work" && PYTHONPATH=$src python -m raycse search --space "$work/space/focal.yaml" --state "$work/$code$i" \
      >"$work/$code$i.log" 2>&1)
    cpu1=$(busy) t1=$(date +%s.%N)
    python3 - "$work/$code$i/mlflow.db" "$code $i" "$(echo "$t1 - $t0" | bc)" "$(echo "$cpu1 - $cpu0" | bc)" <<'PY'
import sqlite3, sys
db, name, wall, cpu = sys.argv[1:]
c = sqlite3.connect(db)
metric = dict(c.execute("select key, value from latest_metrics where key in ('time_report_s', 'time_total_s')"))
trials = c.execute("select count(*) from tags where key = 'raycse.stage'").fetchone()[0]
print(f"{name}: {float(wall):.1f} s wall, {float(cpu):.1f} busy CPU-s, {trials} trials, "
      f"report {metric.get('time_report_s', float('nan')):.2f} s, total {metric.get('time_total_s', float('nan')):.1f} s")
PY
  done
done
