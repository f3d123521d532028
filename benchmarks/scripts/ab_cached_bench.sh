#!/usr/bin/env bash
# `raycse bench --cached` on the tiny shape, one loss (its four configurations), by the code at BEFORE_REV and by the
# working tree, alternated, 3 runs each; each run's wall clock and the machine's busy CPU-seconds meanwhile (/proc/stat:
# the command and every process it started). Run from outside the checkout (below: a temporary folder), so that
# PYTHONPATH, not the working directory, picks the code.
#   bash benchmarks/scripts/ab_cached_bench.sh BEFORE_REV    # from the repository root, venv active
set -euo pipefail
before=${1:?usage: ab_cached_bench.sh BEFORE_REV}
root=$PWD work=$(mktemp -d)
git worktree add -q --detach "$work/before" "$before"
trap 'git -C "$root" worktree remove --force "$work/before"' EXIT
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8+$9)/100}' /proc/stat; }
cd "$work"
for i in 1 2 3; do
  for code in before after; do
    src=$root; [ "$code" = before ] && src=$work/before
    cpu0=$(busy) t0=$(date +%s.%N)
    PYTHONPATH=$src python -m raycse bench --cached --shape tiny --loss simcse --batch-size 8 --cached-batch-size 16 \
      --steps 1 --warmup 0 --no-compile --output "$work/$code$i.json" >/dev/null 2>&1
    cpu1=$(busy) t1=$(date +%s.%N)
    echo "$code $i: $(echo "$t1 - $t0" | bc) s wall, $(echo "$cpu1 - $cpu0" | bc) busy CPU-s"
  done
done
