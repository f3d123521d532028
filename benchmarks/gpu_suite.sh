#!/usr/bin/env bash
# The GPU figures of benchmarks/README.md, one `raycse bench` per row: bash benchmarks/gpu_suite.sh OUTDIR [PART...]
# PART: concurrent (1, 2, 4, 8 MiniLM trials on one GPU), step (the BERT-base and MiniLM rows, compiled: the
# trainer's default), eager (bf16 without torch.compile). Default: all three, in that order.
set -u
out=${1:?usage: gpu_suite.sh OUTDIR [concurrent step eager]}; shift
parts=${*:-concurrent step eager}
mkdir -p "$out"
bench() { local name=$1; shift; echo "== raycse bench $*"; python3 -m raycse bench "$@" --output "$out/$name.json"; }
for part in $parts; do
  case $part in
  concurrent)
    echo "== benchmarks/concurrent.py"
    python3 benchmarks/concurrent.py --shape minilm --batch-size 64 --steps 50 --warmup 10 --output "$out/concurrent.json"
    ;;
  step)
    bench bert-base-64 --shape bert-base --batch-size 64 --steps 50 --warmup 10 --profile "$out/bert-base-64.prof.txt"
    bench imsimcse-64 --shape bert-base --batch-size 64 --steps 50 --warmup 10 --loss imsimcse --no-eval --no-baseline
    bench dclr-64 --shape bert-base --batch-size 64 --steps 50 --warmup 10 --loss dclr --no-eval --no-baseline
    bench bert-base-512 --shape bert-base --batch-size 512 --steps 30 --warmup 10 --no-eval --profile "$out/bert-base-512.prof.txt"
    bench minilm-512 --shape minilm --batch-size 512 --steps 50 --warmup 10 --no-eval --no-baseline
    bench minilm-64 --shape minilm --batch-size 64 --steps 50 --warmup 10 --no-eval --no-baseline
    ;;
  eager)
    bench bert-base-64-eager --shape bert-base --batch-size 64 --steps 50 --warmup 10 --no-compile --no-eval --no-baseline
    bench bert-base-512-eager --shape bert-base --batch-size 512 --steps 30 --warmup 10 --no-compile --no-eval --no-baseline
    ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
