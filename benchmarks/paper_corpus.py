"""The papers' corpus at its size, on this machine: what the driver pays to tokenise a million sentences once for a
whole search, and what a trial pays to receive the ids.

    python benchmarks/paper_corpus.py --output benchmarks/results/paper-scale/2026-11-26-cpu2-corpus/paper-corpus.json

The corpus is `synthetic-wiki1m` (raycse/data/synthetic_corpus.py: wiki1m's 1,000,000 sentences, recombined from
the bundled sample, no download); the tokenizer is the packaged all-MiniLM-L6-v2's, which is bert-base-uncased's
vocabulary; max_len 32, the seed papers' (SimCSE's unsupervised recipe). Measured, in the order a search does them:

  corpus           reading the corpus (making the stand-in)
  tokenise         `share_tokens`, as the search's tokenize stage calls it, and the driver's peak resident memory
                   (this process's, which holds what the driver would: the sentences and the ids)
  object store     `ray.put` of the ids, as Tune's `with_parameters` hands them to every trial
  trial            a Ray worker that receives them as a trial does and reads every id: its unique memory (USS,
                   pages no other process shares) before and after, against the ids' size. The ids come out of
                   the object store's shared memory without a copy, so a trial's own memory grows by far less
                   than their size.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package (which numpy, asyncio and so Ray import): take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

MAX_LEN = 32


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def trial_memory(shared) -> dict:
    """In a Ray worker: what receiving the ids and reading every one of them costs this process."""
    import numpy as np
    import psutil

    process = psutil.Process()
    before = process.memory_full_info().uss
    checksum = sum(int(column.flat.sum(dtype=np.int64)) for column in shared.columns)  # reads every page of the ids
    after = process.memory_full_info().uss
    flat = shared.columns[0].flat
    return {"uss_before_mb": before / 2**20, "uss_after_touching_mb": after / 2**20, "checksum": checksum,
            "ids_read_only": not flat.flags.writeable, "ids_own_their_memory": bool(flat.flags.owndata)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="synthetic-wiki1m", help="a corpus raycse reads (default: %(default)s)")
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args()

    from raycse.data.corpus import read_corpus
    from raycse.data.tokens import share_tokens
    from raycse.encoder.loading import load_tokenizer, resolve_model_path

    figures: dict = {"corpus": args.corpus, "max_len": MAX_LEN, "cpus": os.cpu_count(),
                     "tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM", "(unset)")}
    started = time.perf_counter()
    sentences = read_corpus(args.corpus)
    figures["corpus_s"] = time.perf_counter() - started
    figures["sentences"] = len(sentences)
    tokenizer = load_tokenizer(resolve_model_path("minilm"), trust_remote_code=False)
    figures["rss_before_tokenise_mb"] = peak_rss_mb()
    started = time.perf_counter()
    shared = share_tokens(tokenizer, sentences, MAX_LEN, "paper-corpus")
    figures["tokenise_s"] = time.perf_counter() - started
    figures["driver_peak_rss_mb"] = peak_rss_mb()
    figures["ids_mb"] = sum(c.flat.nbytes + c.offsets.nbytes for c in shared.columns) / 2**20
    figures["tokens"] = int(sum(c.offsets[-1] for c in shared.columns))

    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        started = time.perf_counter()
        reference = ray.put(shared)
        figures["object_store_put_s"] = time.perf_counter() - started
        figures["trial"] = ray.get(ray.remote(trial_memory).remote(reference))
    finally:
        ray.shutdown()
    trial = figures["trial"]
    figures["trial_uss_growth_mb"] = trial["uss_after_touching_mb"] - trial["uss_before_mb"]
    print(f"{figures['sentences']:,} sentences ({args.corpus}) read in {figures['corpus_s']:.1f} s; tokenised "
          f"(max_len {MAX_LEN}) in {figures['tokenise_s']:.1f} s, {figures['tokens']:,} tokens, "
          f"{figures['ids_mb']:.0f} MB of ids; driver peak resident memory {figures['driver_peak_rss_mb']:.0f} MB; "
          f"ray.put {figures['object_store_put_s']:.2f} s; a trial reading every id grew by "
          f"{figures['trial_uss_growth_mb']:.0f} MB of its own memory (ids read-only views: "
          f"{trial['ids_read_only'] and not trial['ids_own_their_memory']})")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({**figures, "date": time.strftime("%Y-%m-%d")}, out, indent=2)


if __name__ == "__main__":
    main()
