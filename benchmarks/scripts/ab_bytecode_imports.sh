#!/usr/bin/env bash
# The CPU-seconds a process spends importing raycse's modules, with and without their bytecode on disk, where the
# interpreter writes none (PYTHONDONTWRITEBYTECODE=1, as on this project's machines): what tests/conftest.py's
# compiling once saves each process the suite starts. Alternated, REPS times each; run from the checkout, quiet.
# Each kind imports what that process imports (Ray and Ray Tune first, as every Ray worker has them already):
#   proxy  - Tune's trial process (raycse.driver.tune.trial)
#   driver - a `raycse search` driver (raycse.driver.run)
#   worker - a warm worker (raycse.driver.tune.warm_workers, the trainer)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
reps=${REPS:-5}
declare -A modules=([proxy]="raycse.driver.tune.trial" [driver]="raycse.driver.run"
                    [worker]="raycse.driver.tune.warm_workers, raycse.driver.tune.trial_training, raycse.training.trainer")
measure() {
  python -c "
import ray, ray.tune, time
t = time.process_time()
import $1
print(f'{time.process_time() - t:.3f}')"
}
clear() { find raycse -name __pycache__ -type d -exec rm -rf {} +; }
for kind in proxy driver worker; do
  without=() with=()
  for ((i = 0; i < reps; i++)); do
    clear; without+=("$(measure "${modules[$kind]}")")
    python -m compileall -q raycse; with+=("$(measure "${modules[$kind]}")")
  done
  echo "$kind: without bytecode ${without[*]}; with ${with[*]}"
done
clear
