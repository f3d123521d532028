"""How evaluation batches are cut: STS-B dev's distinct sentences encoded by the packaged MiniLM in batches of a fixed
number of sentences, and in batches cut by padded tokens (what evaluation does:
`raycse.encoder.model.EVAL_BATCH_TOKENS`), each timed after one warm-up, with the STS-B dev figure each gives.

    python benchmarks/eval_batches.py [--threads 1] [--sentences 32 512] [--tokens 512 1024 2048 4096 16384]
                                      [--repeats 2] [--output FILE.json]

On a CUDA machine the model runs there, as a trial's evaluation does.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # benchmarks/concurrent.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sentences", type=int, nargs="*", default=[32, 512])
    parser.add_argument("--tokens", type=int, nargs="*", default=[512, 1024, 2048, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from raycse.encoder.model import Encoder, pick_device
    from raycse.evaluation.sts import build_objective

    torch.set_num_threads(args.threads)
    device = pick_device()
    encoder = Encoder.from_pretrained("minilm", pooler="avg").to(device)
    objective = build_objective("stsb_dev")
    cuts = [("sentences", n) for n in args.sentences] + [("tokens", n) for n in args.tokens]
    rows = []
    for kind, size in cuts:
        options = {"batch_size": size} if kind == "sentences" else {"tokens_per_batch": size}

        def encode(sentences, options=options):
            return encoder.encode(sentences, pooler="avg", **options)

        objective(encode)  # tokenises once (kept per process, as in a trial) and warms up
        seconds = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            figure = objective(encode)["stsb_dev"]
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        rows.append({"cut_by": kind, "size": size, "seconds": min(seconds), "stsb_dev": figure})
        print(f"{kind:>9} {size:>6}: {min(seconds):7.3f} s  STS-B dev {figure:.5f}", flush=True)
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "threads": args.threads, "sentences": len(objective.sentences), "torch": torch.__version__,
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "rows": rows}
    if args.output:
        args.output.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
