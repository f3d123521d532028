#!/bin/bash
# seed 4 of the stopped --quick run, each side in its own process as the driver runs it (B A: recipe, raycse)
cd /tmp/peers-quick/work/train
for side in recipe raycse; do
  start=$(date +%s.%N)
  (cd $side-4 && PEERS_STARTED=$start PYTHONPATH=/work/main TOKENIZERS_PARALLELISM=false /work/main/.venv/bin/python /work/main/benchmarks/peers.py _side $side $PWD/$side-spec.json $PWD/$side-run.json >> /tmp/peers-quick/work/peers-seed4.log 2>&1)
  end=$(date +%s.%N)
  /work/main/.venv/bin/python -c "
import json,sys; r=json.load(open('$side-4/$side-run.json')); w=$end-$start
print(f\"  train {r['side']:6} seed {r['seed']}: {w:.1f} s (start-up {w-r['steps_s']-r['eval_s']-r['checkpoint_s']:.1f}, steps {r['steps_s']:.1f}, evaluations {r['eval_s']:.1f}, checkpoints {r['checkpoint_s']:.1f}), objective {r['objective']:.2f}\")" >> /tmp/peers-quick/seed4-stdout.txt
  rm -rf $side-4/out
done
