#!/usr/bin/env bash
# Every GPU figure of the benchmarks/ pages, in parts that each fit one 10-minute call of the device tool:
#
#   bash benchmarks/gpu_suite.sh [--rehearse] [--random-weights] OUTDIR [PART...]
#
# PART, in order of value (default: all seven, in this order):
#   paper-full one trial of the papers' full length (benchmarks/paper_full.py): focal.yaml's paper budget, 15,625
#              steps, BERT-base's shape with random weights, the synthetic million sentences, one trial a GPU; its
#              wall clock against 15,625 x the bench row's step, its terms' shares, the disk peak, each beside the
#              dry run's forecast; then the BERT-base bench row it is held to (the paper part's)
#   paper      the papers' setting at its scale (benchmarks/paper_part.py): BERT-base's shape, random weights, the
#              synthetic million sentences, 2,000 steps a trial with 1, 2 and 4 trials sharing the GPU (one search
#              each, over two calls); each figure beside the dry run's prediction; then the BERT-base bench row its
#              one-trial step is held to
#   search     the full focal.yaml search on the real weights: search stage, choosing, sequential judging, test tasks
#   search-cold  (named only) the same search with --no-warm-workers: each stage starts its own trial processes
#   search-four  (named only) the same search at four trials a GPU (gpus_per_worker 0.25), where `auto` gives eight
#   peers      (named only) raycse against sentence-transformers' SimCSE recipe and an Optuna loop around it
#              (benchmarks/peers.py --size gpu: batch 64, length 32, an evaluation every 125 steps): MiniLM's training
#              runs and 8-trial searches, then BERT-base's training runs (its shape, random weights: timings); each
#              shape skipped once its JSON is written, so a second call finishes what the first could not
#   sampler    the default sampler against random on the full budget's search stage, sampler seeds 0, 1, 2 each
#   cached     gradient caching on BERT-base (raycse bench --cached): eager, then compiled
#   landscape  the dense landscape (benchmarks/landscape.py --preset gpu)
#   step       the step timings: concurrent MiniLM trials, the BERT-base and MiniLM rows compiled, then eager
# Each part logs to OUTDIR/PART.log, writes its JSON under OUTDIR and prints one summary line (also appended to
# OUTDIR/summary.txt). SUITE_DEADLINE seconds after the start (default 540: a 600-second call less its margin), a
# part stops where it is: the same command again on the same machine (keep OUTDIR, e.g. under /tmp) goes on from
# there (the search with --resume, the landscape from its file; a finished step, or paper search, is never run again).
# A part that cannot finish in the time left does not start: a paper search whose predicted wall clock does not fit,
# a fresh search with under $search_needs seconds left (SUITE_SEARCH_NEEDS overrides it, for a last window whose
# partial search would not be resumed anyway).
#
# --rehearse: every part on this CPU machine through the same commands, with tiny settings (below), a fake GPU in
#   Ray (RAY_OVERRIDE_RESOURCES: Ray schedules trials on it as on one GPU; torch finds no CUDA and runs on the CPU),
#   and device_env.sh's install and check of the real fp16 weights (written here by benchmarks/minilm_fp16.py; the
#   check runs on the CPU). The parts themselves then train a tiny random BERT, not MiniLM. The first search call is
#   killed once a trial has finished, and the second resumes it.
# --random-weights: MiniLM's shape with random weights where `minilm` resolves (timings only; see device_env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
rehearse=0
while [[ ${1:-} == --* ]]; do
  case $1 in
  --rehearse) rehearse=1 ;;
  --random-weights) export RAYCSE_RANDOM_WEIGHTS=1 ;;
  *) echo "gpu_suite: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${1:?usage: gpu_suite.sh [--rehearse] [--random-weights] OUTDIR [paper-full paper search sampler cached landscape step search-cold search-four peers]}; shift
parts=$*
mkdir -p "$out/state" && out=$(cd "$out" && pwd)
helpers=$PWD/benchmarks/gpu_suite.py
deadline=${SUITE_DEADLINE:-$( ((rehearse)) && echo 1800 || echo 540)}
left() { echo $((deadline - SECONDS)); }

# ------------------------------------------------------------------------------------------------ the settings
if ((rehearse)); then
  export SUITE_REHEARSE=1 DEVICE_SITE=$out/site MINILM_FP16=$out/rehearsal/minilm-fp16
  export RAY_OVERRIDE_RESOURCES='{"GPU": 1, "CPU": 2}'
  [ -f "$MINILM_FP16/model.safetensors" ] || python3 benchmarks/minilm_fp16.py --output "$MINILM_FP16" || exit 1
  # a 2-layer BERT, 48 STS-B dev pairs, focal.yaml with 2 search trials of 4 steps, 1 choosing and 2 judging seeds
  space=$(python3 "$helpers" rehearsal "$out/rehearsal") || exit 1
  sampler_seeds="0" search_needs=0
  landscape=(--preset rehearse --space "$space" --jobs 2)
  big=tiny small=tiny b=8 B=16 steps=2 warm=1 trials="1 2" cached_steps=(--steps 1 --warmup 0)
  cached_losses=(simcse simcse)  # eager, compiled
  peer_shapes=minilm peers=(--size tiny --model "$out/rehearsal/tiny-bert" --seeds 1 --trials 2)
  kill_first_search="finished: best objective"
  paper=(--rehearse "$out/rehearsal")  # the 2-layer BERT, 6 steps of 8, 2,048 sentences, 2 trials on the fake GPU
  parts=${parts:-paper-full paper search search sampler cached landscape step}  # the search twice: killed, resumed
else
  space=$PWD/search_spaces/focal.yaml
  sampler_seeds="0 1 2"
  # a fresh search starts only with this many seconds left: 185 s on one H100 (2026-11-26), and a margin
  search_needs=${SUITE_SEARCH_NEEDS:-240}
  landscape=(--preset gpu --jobs 8)
  big=bert-base small=minilm b=64 B=512 steps=50 warm=10 trials="1 2 4 8" cached_steps=(--steps 20 --warmup 5)
  cached_losses=(simcse,focal,simcse-sup,dclr simcse,focal)  # eager, compiled (about 40 s to compile a graph)
  peer_shapes="minilm bert-base" peers=(--size gpu)
  kill_first_search=""
  paper=()
  parts=${parts:-paper-full paper search sampler cached landscape step}
fi
source benchmarks/device_env.sh || exit 1
# the real weights are checked before anything else runs (the parts that time random-weight shapes need none; the
# paper part needs only the tokenizer of what `minilm` resolves to)
if [[ " $parts " =~ \ (paper-full|paper|search|sampler|landscape|peers)\  ]]; then
  device_minilm || { echo "gpu_suite: error: the model check failed; nothing ran" >&2; exit 1; }
fi
if [[ " $parts " =~ \ (paper-full|paper|search|sampler|step|peers)\  ]]; then
  python3 -c "import ray.tune, ray.train, optuna, mlflow, sqlalchemy" || {
    echo "gpu_suite: error: Ray, Optuna or MLflow is missing: carry .whl and .gpu (a machine that went cold has lost" \
         "them; benchmarks/gpu-suite.md, the call plan)" >&2; exit 1; }
fi

# ------------------------------------------------------------------------------------------------- the helpers
failed=0
run() {  # run NAME COMMAND...: COMMAND's output to OUTDIR/NAME.log, stopped at the deadline (124); its tail if it fails
  local name=$1; shift
  (($(left) > 0)) || return 124  # (timeout 0 would mean no limit)
  echo "== $*" >>"$out/$name.log"
  timeout --kill-after=10 "$(left)" "$@" >>"$out/$name.log" 2>&1 && return 0
  local rc=$?
  ((rc == 124 || rc == 137)) && { echo "gpu_suite: $name stopped at the deadline: $*" >>"$out/$name.log"; return 124; }
  echo "gpu_suite: $name failed ($rc): $*" >&2; tail -n 25 "$out/$name.log" >&2
  failed=1; return "$rc"
}
supervised() {  # supervised NAME [--kill-when TEXT] COMMAND...: killed (its process group) at the deadline, 124
  local name=$1; shift
  python3 "$helpers" supervise --deadline "$(left)" --log "$out/$name.log" "$@" >/dev/null
}
search() {  # search STATE ARGS...: a raycse search with all its state in STATE, resumed when STATE holds one
  local state=$1; shift
  local resume=()
  if compgen -G "$state/ray_results/*/tuner.pkl" >/dev/null; then resume=(--resume); else rm -rf "$state"; fi
  mkdir -p "$state"
  (cd "$state" && "$@" --state "$state" "${resume[@]}")  # the report page goes to STATE/report
}
bench() {  # bench NAME ARGS...: one `raycse bench` row into OUTDIR/NAME.json, unless it is there already
  local name=$1; shift
  [ -s "$out/$name.json" ] || run step python3 -m raycse bench "$@" --output "$out/$name.json"
}
# the BERT-base batch-64 rows, compiled and eager: the step part's, and the paper part's yardstick
step-bert-base-64() {
  bench step-bert-base-64 --shape "$big" --batch-size "$b" --steps "$steps" --warmup "$warm" --profile "$out/bert-base-64.prof.txt"
}
step-bert-base-64-eager() {
  bench step-bert-base-64-eager --shape "$big" --batch-size "$b" --steps "$steps" --warmup "$warm" --no-compile --no-eval --no-baseline
}
summary() { python3 "$helpers" summary "$1" "$out"; }

# --------------------------------------------------------------------------------------------------- the parts
for part in $parts; do
  echo "== $part ($(left) s left)"
  case $part in
  paper-full)  # one trial of 15,625 steps, skipped once measured; one cut off at the deadline runs again
    if (($(left) > 0)); then
      python3 benchmarks/paper_full.py "$out" --deadline "$(left)" "${paper[@]}" >/dev/null
      rc=$?
      ((rc == 0 || rc == 124)) || { failed=1; echo "gpu_suite: paper-full failed ($rc)" >&2; tail -n 25 "$out/paper-full.log" >&2; }
    fi
    # its yardstick: `raycse bench`'s row of the same shape, batch and precision (the paper part's, made once)
    row=$(python3 "$helpers" paper-row "$out" --part paper-full)
    [ -n "$row" ] && "$row"
    summary paper-full
    ;;
  paper)  # one search for each sharing, each skipped once measured; one cut off at the deadline runs again
    if (($(left) > 0)); then
      python3 benchmarks/paper_part.py "$out" --deadline "$(left)" "${paper[@]}" >/dev/null
      rc=$?
      ((rc == 0 || rc == 124)) || { failed=1; echo "gpu_suite: paper failed ($rc)" >&2; tail -n 25 "$out/paper.log" >&2; }
    fi
    # `raycse bench`'s row of the fewest-trials search's shape, batch and precision, compiled as its trial was (the
    # step part then skips it): a step inside a trial should take at most 1.15 times the bench's
    row=$(python3 "$helpers" paper-row "$out")
    [ -n "$row" ] && "$row"
    summary paper
    ;;
  search|search-cold|search-four)  # the same search with --no-warm-workers, or at four trials a GPU
    [ -s "$out/$part.json" ] && { summary "$part"; continue; }
    if [ ! -e "$out/state/$part" ] && (($(left) < search_needs)); then  # a later call on this machine resumes one
      echo "gpu_suite: $part not started: $(left) s left, it needs about $search_needs s" | tee -a "$out/$part.log"
      summary "$part"; continue
    fi
    kill=()  # the rehearsal's first search call: killed once a trial has finished, so that the next one resumes
    [ -n "$kill_first_search" ] && [ ! -e "$out/state/$part.killed" ] && kill=(--kill-when "$kill_first_search")
    cold=(); [ "$part" = search-cold ] && cold=(--no-warm-workers)
    part_space=$space
    if [ "$part" = search-four ]; then
      part_space=$out/state/focal-four.yaml
      python3 "$helpers" space "$space" --gpus-per-worker 0.25 --output "$part_space"
    fi
    search "$out/state/$part" supervised "$part" "${kill[@]}" -- python3 -m raycse search --space "$part_space" "${cold[@]}"
    rc=$?
    ((rc == 124)) && ((${#kill[@]})) && : >"$out/state/$part.killed"
    ((rc == 0 || rc == 124)) || { failed=1; tail -n 25 "$out/$part.log" >&2; }
    summary "$part"
    ;;
  sampler)
    python3 "$helpers" space "$space" --test-eval none --output "$out/state/focal-default.yaml"
    python3 "$helpers" space "$space" --test-eval none --sampler random --output "$out/state/focal-random.yaml"
    for seed in $sampler_seeds; do
      for sampler in default random; do  # alternated, so that a part cut short still compares the two
        state=$out/state/sampler-$sampler-$seed
        [ -e "$state/done" ] && continue
        (($(left) > 60)) || break 2
        search "$state" supervised sampler -- python3 -m raycse search --space "$out/state/focal-$sampler.yaml" \
          --experiment "focal-$sampler-$seed" --seed "$seed" --no-confirm
        rc=$?
        ((rc == 0)) && : >"$state/done"
        ((rc == 0 || rc == 124)) || { failed=1; tail -n 25 "$out/sampler.log" >&2; }
      done
    done
    summary sampler
    ;;
  cached)
    for i in 0 1; do
      mode=$( ((i == 0)) && echo eager || echo compiled )
      [ -s "$out/cached-$mode.json" ] && continue
      run cached python3 -m raycse bench --cached --shape "$big" --loss "${cached_losses[$i]}" --batch-size "$b" \
        --cached-batch-size "$B" "${cached_steps[@]}" $( ((i == 0)) && echo --no-compile) --output "$out/cached-$mode.json"
    done
    summary cached
    ;;
  landscape)  # it starts no run after --deadline seconds; the same command again goes on from its file
    run landscape python3 benchmarks/landscape.py "${landscape[@]}" --deadline $(($(left) - 90)) \
      --output "$out/landscape.json"
    [ -s "$out/landscape.json" ] && summary landscape
    ;;
  step)
    [ -s "$out/step-concurrent.json" ] || run step python3 benchmarks/concurrent.py --shape "$small" --batch-size "$b" \
      --steps "$steps" --warmup "$warm" --trials $trials --output "$out/step-concurrent.json"
    step-bert-base-64
    bench step-imsimcse-64 --shape "$big" --batch-size "$b" --steps "$steps" --warmup "$warm" --loss imsimcse --no-eval --no-baseline
    bench step-dclr-64 --shape "$big" --batch-size "$b" --steps "$steps" --warmup "$warm" --loss dclr --no-eval --no-baseline
    bench step-bert-base-512 --shape "$big" --batch-size "$B" --steps "$steps" --warmup "$warm" --no-eval --profile "$out/bert-base-512.prof.txt"
    bench step-minilm-512 --shape "$small" --batch-size "$B" --steps "$steps" --warmup "$warm" --no-eval --no-baseline
    bench step-minilm-64 --shape "$small" --batch-size "$b" --steps "$steps" --warmup "$warm" --no-eval --no-baseline
    step-bert-base-64-eager
    bench step-bert-base-512-eager --shape "$big" --batch-size "$B" --steps "$steps" --warmup "$warm" --no-compile --no-eval --no-baseline
    summary step
    ;;
  peers)  # the training runs of each shape (MiniLM's with the searches: the issue's "search takes <= 1/3")
    for shape in $peer_shapes; do
      [ -s "$out/peers-$shape.json" ] && continue
      what=(train search); [ "$shape" = bert-base ] && what=(train)
      run peers python3 benchmarks/peers.py "${peers[@]}" --shape "$shape" --parts "${what[@]}" \
        --work "$out/state/peers-$shape" --output "$out/peers-$shape.json" || break
    done
    summary peers
    ;;
  *) echo "gpu_suite: unknown part $part (paper-full paper search sampler cached landscape step peers)" >&2; exit 2 ;;
  esac
done
echo "== done in ${SECONDS} s; summary lines in $out/summary.txt"
exit "$failed"
