"""A search's per-trial fixed costs, each measured without and with what raycse shares, in one run.

    python benchmarks/trial_overheads.py --output benchmarks/results/fixed-costs/2026-11-22-cpu2/trial-overheads.json

  corpus tokens    every batch of one epoch (bundled corpus, batch 64): tokenised by each trial, against padded
                   from the ids the driver made once (raycse.data.tokens; the one-time cost is reported too)
  eval tokens      the STS-B dev and test sentences a trial encodes: tokenised by a fresh encoder, against a later
                   trial's encoder in the same worker and a judging run's best checkpoint saved and reloaded there
                   (the evaluation batches a process keeps: raycse/encoder/eval_batches.py)
  model load       Encoder.from_pretrained of the packaged MiniLM: from disk, against the worker's earlier load
  worker start     N short Tune trials that import the trainer: a new Ray worker per trial (reuse_actors=False),
                   against Tune reusing its workers (reuse_actors=True, as raycse's search does)

Compilation is not here: it happens on CUDA only (benchmarks/step-speed.md gives the GPU figures).
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
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def timed(fn, repeat: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat


def corpus_tokens() -> dict:
    from raycse.data.corpus import GlobalBatches, load_examples
    from raycse.data.tokens import data_fingerprint, share_tokens
    from raycse.encoder.loading import load_tokenizer, resolve_model_path
    from raycse.settings.config import TrainConfig
    from raycse.training.batches import BatchTokenizer

    config = TrainConfig()
    tokenizer = load_tokenizer(resolve_model_path(config.model), False)
    sentences = load_examples(config)
    plain = BatchTokenizer(tokenizer, config.max_len, first_rows=False)
    raw_batches = list(GlobalBatches(sentences, 64, 0).epoch(0))
    share_s = timed(lambda: share_tokens(tokenizer, sentences, config.max_len, data_fingerprint(config)))
    shared = share_tokens(tokenizer, sentences, config.max_len, data_fingerprint(config))
    from_ids = BatchTokenizer(tokenizer, config.max_len, first_rows=False, shared=shared)
    index_batches = list(GlobalBatches(list(range(len(sentences))), 64, 0).epoch(0))
    return {"batches": len(raw_batches), "tokenise_each_trial_s": timed(lambda: [plain(b) for b in raw_batches]),
            "pad_shared_ids_s": timed(lambda: [from_ids(b) for b in index_batches]), "share_once_s": share_s}


def eval_tokens_and_model_load() -> dict:
    from raycse.encoder import eval_batches, model
    from raycse.encoder import loading as model_loading
    from raycse.evaluation.sts import SPLIT_OF_RESULT, concatenate, load_sts_task

    sentences = list(dict.fromkeys(s for key in SPLIT_OF_RESULT for pairs in [concatenate(
        load_sts_task(SPLIT_OF_RESULT[key]).values())] for s in (*pairs.sentences1, *pairs.sentences2)))
    model_loading._LOADED_CACHE.clear()
    eval_batches.clear_cache()
    load_cold = timed(lambda: model.Encoder.from_pretrained("minilm", pooler="avg"))
    load_warm = timed(lambda: model.Encoder.from_pretrained("minilm", pooler="avg"))
    first = model.Encoder.from_pretrained("minilm", pooler="avg")
    tokenise_cold = timed(lambda: eval_batches.evaluation_batches(first.tokenizer, sentences, 128, 128, None))
    second = model.Encoder.from_pretrained("minilm", pooler="avg")  # the next trial's encoder, same worker
    tokenise_warm = timed(lambda: eval_batches.evaluation_batches(second.tokenizer, sentences, 128, 128, None))
    with tempfile.TemporaryDirectory() as folder:  # a judging run's best checkpoint: the tokenizer saved, read back
        first.save(Path(folder) / "best", "avg")
        reloaded = model.Encoder.from_pretrained(str(Path(folder) / "best"), pooler="avg")
        tokenise_reloaded = timed(
            lambda: eval_batches.evaluation_batches(reloaded.tokenizer, sentences, 128, 128, None))
    return {"eval_sentences": len(sentences), "eval_tokenise_fresh_s": tokenise_cold,
            "eval_tokenise_next_trial_s": tokenise_warm, "eval_tokenise_reloaded_checkpoint_s": tokenise_reloaded,
            "model_load_from_disk_s": load_cold,
            "model_load_next_trial_s": load_warm}


def _short_trial(config):
    from ray import tune

    import raycse.training.trainer  # noqa: F401 - what every trial imports: torch, transformers, the package

    tune.report({"done": 1})


def worker_start(trials: int) -> dict:
    from ray import tune

    from raycse.training.ray_runtime import start_ray

    start_ray()
    figures = {}
    for reuse in (False, True):
        tuner = tune.Tuner(tune.with_resources(_short_trial, {"CPU": 1}), param_space={"i": tune.grid_search(
            list(range(trials)))}, tune_config=tune.TuneConfig(reuse_actors=reuse, max_concurrent_trials=1),
            run_config=tune.RunConfig(verbose=0, storage_path=f"/tmp/raycse-overheads-{os.getpid()}"))
        figures[f"{trials}_trials_reuse_actors_{reuse}_s"] = timed(tuner.fit)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4, help="short trials for the worker-start figure")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    import platform

    import torch

    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                          f"{torch.get_num_threads()} torch threads", "torch": torch.__version__}
    for part in (corpus_tokens, eval_tokens_and_model_load, lambda: worker_start(args.trials)):
        results.update(part())
        print(json.dumps(results, indent=2), flush=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
