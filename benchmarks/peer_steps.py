"""Where does a training step's time go, raycse's against sentence-transformers' SimCSE recipe? The step alone,
both sides in one process on the same batches, alternated block by block (A B C, C B A, ...), so that the load of
the machine falls on all of them alike.

- raycse: the trainer's own step (`StepRunner.step` on the loader's `TokenizedBatch`, tokenising counted), as
  `raycse train --loss simcse --pooler avg` runs it: one forward of the 2N rows, AdamW as the trainer builds it.
- raycse, foreach AdamW: the same with `torch.optim.AdamW`'s default implementation (a loop of per-tensor ops),
  which the trainer used on the CPU before it fused there too.
- recipe: what SentenceTransformerTrainer does in a step of the recipe: its collator's tokenising (anchor and
  positive apart), MultipleNegativesRankingLoss (scale 1/tau: two forward passes of N rows), backward, clipping at
  1.0, fused AdamW (its default `adamw_torch_fused`), the linear schedule.

    python benchmarks/peer_steps.py [--batch-size 32] [--max-len 32] [--blocks 6] [--steps-per-block 3]

It prints, per side, the median and the quartiles of a step's milliseconds over its timed steps (the first block of
each side is a warm-up, not counted), and writes the JSON with --output.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # benchmarks/concurrent.py

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(_HERE).parent


def raycse_side(model: str, batch_size: int, max_len: int, lr: float, steps: int, fused: bool | None):
    import torch

    from raycse.encoder.model import Encoder
    from raycse.losses import build_loss
    from raycse.settings.config import TrainConfig
    from raycse.training.step_runner import StepRunner

    config = TrainConfig(model=model, loss="simcse", batch_size=batch_size, max_len=max_len, pooler="avg",
                         precision="fp32", lr=lr, seed=1)
    torch.manual_seed(1)
    encoder = Encoder.from_pretrained(model, pooler="avg").train()
    runner = StepRunner(encoder, build_loss("simcse"), config, torch.device("cpu"), steps)
    if fused is not None:  # the optimiser replaced by one of the given kind
        runner.optimizer = torch.optim.AdamW(runner.parameters, lr=lr, weight_decay=config.weight_decay, fused=fused)
        runner.scheduler = torch.optim.lr_scheduler.LambdaLR(runner.optimizer, lambda s: max(0.0, 1.0 - s / steps))

    def step(sentences: list[str]) -> None:
        runner.step(runner.tokenize(sentences))

    return step


def recipe_side(model_path: str, batch_size: int, max_len: int, lr: float, tau: float, steps: int):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import losses

    torch.manual_seed(1)
    model = SentenceTransformer(model_path, device="cpu")
    model.max_seq_length = max_len
    model.train()
    tokenize = getattr(model, "preprocess", model.tokenize)
    loss = losses.MultipleNegativesRankingLoss(model, scale=1.0 / tau)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))

    def step(sentences: list[str]) -> None:
        features = [tokenize(sentences), tokenize(sentences)]  # the collator: one column at a time
        value = loss(features, None)
        value.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--tau", type=float, default=0.05)
    parser.add_argument("--blocks", type=int, default=6, help="blocks a side, the first one a warm-up")
    parser.add_argument("--steps-per-block", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from raycse.data.corpus import read_corpus
    from raycse.encoder.loading import resolve_model_path

    path = str(resolve_model_path(args.model))
    steps = args.blocks * args.steps_per_block
    sentences = read_corpus("wiki-sample", max_sentences=steps * args.batch_size)
    batches = [sentences[i * args.batch_size:(i + 1) * args.batch_size] for i in range(steps)]
    sides = {"raycse": raycse_side(path, args.batch_size, args.max_len, args.lr, steps, fused=None),
             "raycse-foreach-adamw": raycse_side(path, args.batch_size, args.max_len, args.lr, steps, fused=False),
             "recipe": recipe_side(path, args.batch_size, args.max_len, args.lr, args.tau, steps)}
    timed: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for block in range(args.blocks):
        for name in (order if block % 2 == 0 else order[::-1]):
            for k in range(args.steps_per_block):
                batch = batches[block * args.steps_per_block + k]
                begun = time.perf_counter()
                sides[name](batch)
                if block > 0:
                    timed[name].append(1000 * (time.perf_counter() - begun))
    figures = {}
    for name, ms in timed.items():
        q1, median, q3 = statistics.quantiles(ms, n=4)
        figures[name] = {"median_ms": median, "q1_ms": q1, "q3_ms": q3, "steps": len(ms), "ms": ms}
        print(f"{name:20} median {median:7.1f} ms a step (quartiles {q1:.1f}, {q3:.1f}; {len(ms)} steps)")
    base = figures["recipe"]["median_ms"]
    for name in ("raycse", "raycse-foreach-adamw"):
        print(f"recipe / {name}: {base / figures[name]['median_ms']:.3f}")
    record = {"question": "where does a training step's time go, raycse's against the recipe's?",
              "command": "python benchmarks/peer_steps.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "device": f"cpu ({os.cpu_count()} cores)", "torch_threads": torch.get_num_threads(),
              "load_average_at_start": os.getloadavg(), "setting": vars(args) | {"output": str(args.output)},
              "sides": figures}
    if args.output:
        args.output.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
