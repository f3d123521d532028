"""Aggregate throughput of 1, 2, 4 and 8 concurrent trials on one machine, each a Ray task with 1/N of the GPU.

    python benchmarks/concurrent.py                       # MiniLM, batch 64, seq 32, 1 2 4 8 trials
    python benchmarks/concurrent.py --trials 1 2 --shape tiny --batch-size 8 --steps 3 --warmup 1 --output c.json

One Ray session serves every N; each N is `raycse bench --concurrent N` (`raycse.bench.concurrent`). TARGETS:
the aggregate, as a multiple of one trial's, that N trials on an H100 should reach.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where its name would shadow the standard library's
# `concurrent` package (which asyncio, and so Ray, imports): take the folder off the path first.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402

TARGETS = {4: 3.2, 8: 4.5}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--shape", default="minilm")
    parser.add_argument("--loss", default="simcse")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray

    from raycse.bench.concurrent import format_concurrent, run_concurrent
    from raycse.bench.step import BenchOptions
    from raycse.training.ray_runtime import start_ray

    options = BenchOptions(shape=args.shape, loss=args.loss, batch_size=args.batch_size, steps=args.steps,
                           warmup=args.warmup, seq_len=args.seq_len, precision=args.precision,
                           compile=args.compile, eval=False, baseline=False).validate()
    if 1 not in args.trials:
        args.trials = [1, *args.trials]  # the scaling is relative to one trial
    start_ray()
    runs = []
    try:
        for n in sorted(set(args.trials)):
            result = run_concurrent(options, n)
            print(format_concurrent(result), flush=True)
            runs.append(result)
    finally:
        ray.shutdown()
    single = runs[0]["aggregate_sentences_per_s"]
    print(f"\n{'trials':>6}  {'aggregate sentences/s':>22}  {'x one trial':>11}  {'target':>7}")
    for r in runs:
        n, agg = r["concurrent"], r["aggregate_sentences_per_s"]
        r["scaling"] = agg / single
        target = TARGETS.get(n)
        print(f"{n:>6}  {agg:>22.1f}  {r['scaling']:>10.2f}x  {'' if target is None else f'>={target}x':>7}")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
