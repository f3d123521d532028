"""`raycse bench`: its flags and what it runs (the step benchmark, N concurrent trials, the trials a GPU should take, or
gradient caching's cost)."""
from __future__ import annotations

import argparse
import sys

CONCURRENT_LIMIT = 64  # `raycse bench --concurrent N`: trials sharing one machine


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """`raycse bench`'s flags, each with its default."""
    from raycse.bench.options import BENCH_PRECISIONS
    from raycse.bench.step import BenchOptions
    from raycse.bench.synthetic import SHAPES

    d = BenchOptions()
    p.add_argument("--shape", default=d.shape, choices=list(SHAPES), help="random-weight BERT shape (default: "
                   "%(default)s)")
    p.add_argument("--loss", default=None, metavar="LOSS", help=f"any loss `raycse train --loss` takes (default: "
                   f"{d.loss}); with --cached also a comma-separated list or 'all' (its default)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, metavar="N",
                   help="corpus rows (sentences) per step (default: %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, metavar="N", help="timed steps (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=d.warmup, metavar="N",
                   help="untimed steps first (default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, metavar="TOKENS",
                   help="tokens per sentence, [CLS] and [SEP] included (default: %(default)s)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="torch.compile the encoder with CUDA graphs, as the trainer does (CUDA only) (default: on)")
    p.add_argument("--precision", default=d.precision, choices=list(BENCH_PRECISIONS), help="autocast precision of the "
                   "timed step (default: %(default)s)")
    p.add_argument("--no-eval", action="store_true", help="skip timing the STS-B dev evaluation (default: off)")
    p.add_argument("--no-baseline", action="store_true", help="skip timing the naive fp32 step (default: off)")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="also profile a few raycse steps (torch.profiler): operator table to FILE (default: none)")
    p.add_argument("--concurrent", type=int, default=None, metavar="N",
                   help="instead: aggregate sentences/s of N concurrent trials, Ray tasks with 1/N GPU each "
                   "(default: none)")
    p.add_argument("--share", action="store_true",
                   help="instead: how many trials of this shape, batch and length to put on one GPU: 1, 2, 4, ... "
                        "concurrent trials, doubled while the GPU's steps a second rise by a tenth or more; kept where "
                        "`gpus_per_worker: auto` reads it (default: off)")
    p.add_argument("--share-most", type=int, default=8, metavar="N",
                   help="with --share: the most trials a GPU to measure (default: %(default)s)")
    p.add_argument("--cached", action="store_true",
                   help="instead: gradient caching's cost per loss, each configuration in its own process: uncached "
                        "--batch-size, uncached --cached-batch-size, cached in chunks of --batch-size, and keyed "
                        "dropout in one chunk (step time, peak memory) (default: off)")
    p.add_argument("--cached-batch-size", type=int, default=512, metavar="N",
                   help="with --cached: the large batch (default: %(default)s)")
    p.add_argument("--output", default=None, metavar="FILE", help="write the figures as JSON here (default: none)")


def run_bench_command(args) -> int:
    """Run what the flags ask for and print its table; 0 when done."""
    from raycse.bench.concurrent import format_concurrent, format_share, run_concurrent, run_share
    from raycse.bench.step import BenchOptions, format_step_row, run_bench
    from raycse.files import write_json_atomic
    from raycse.settings.checks import check_int, check_writable_file

    for name in ("output", "profile"):
        if getattr(args, name) is not None:
            check_writable_file(name, getattr(args, name))
    if args.cached:
        return _cmd_bench_cached(args)
    options = BenchOptions(shape=args.shape, loss=args.loss or BenchOptions.loss, batch_size=args.batch_size,
                           steps=args.steps, warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
                           precision=args.precision, eval=not args.no_eval, baseline=not args.no_baseline,
                           profile=args.profile).validate()
    if args.concurrent is not None:
        check_int("concurrent", args.concurrent, low=1, high=CONCURRENT_LIMIT)
    if args.share:
        check_int("share_most", args.share_most, low=1, high=CONCURRENT_LIMIT)
        results = run_share(options, args.share_most)
        print(format_share(results))
    elif args.concurrent is not None:
        results = run_concurrent(options, args.concurrent)
        print(format_concurrent(results))
    else:
        results = run_bench(options)
        print(format_step_row(results))
    if args.output:
        write_json_atomic(args.output, results)
    return 0


def _cmd_bench_cached(args) -> int:
    from raycse.bench.cached import CachedBenchOptions, format_cached, parse_losses, run_cached_bench
    from raycse.files import write_json_atomic

    options = CachedBenchOptions(shape=args.shape, losses=parse_losses(args.loss or "all"),
                                 batch_size=args.batch_size, cached_batch_size=args.cached_batch_size,
                                 steps=args.steps, warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
                                 precision=args.precision).validate()
    results = run_cached_bench(options, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_cached(results))
    if args.output:
        write_json_atomic(args.output, results)
    return 0
