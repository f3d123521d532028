"""The distribution of in-batch negative similarities: where DCLR's threshold phi can act.

DCLR drops a negative j of anchor i when its complementary model gives s(c_i, c_j) >= phi. Whether a phi removes
anything depends on the model and the pooler: this prints the percentiles of the off-diagonal cosines over random
batches of the corpus, as DCLR's training sees them, and the fraction phi would remove for a few phi.

    python scripts/negative_similarities.py --model minilm --pooler avg
    python scripts/negative_similarities.py --model runs/simcse/best --batch-size 128 --output sims.json

search_spaces/dclr.yaml's phi range comes from this (README, "DCLR's phi").
"""
from __future__ import annotations

import argparse
import json

import torch

from raycse.data.corpus import GlobalBatches, read_corpus
from raycse.encoder.model import Encoder, encode_fn
from raycse.losses import cos_sim

PERCENTILES = (50, 75, 90, 95, 99, 99.9)


def negative_similarities(model: str, pooler: str, batch_size: int, batches: int, corpus: str, seed: int) -> dict:
    encoder = Encoder.from_pretrained(model, pooler=pooler)
    encode = encode_fn(encoder, pooler)
    stream = GlobalBatches(read_corpus(corpus), batch_size, seed).epoch(0)
    values = []
    for _, batch in zip(range(batches), stream):
        sims = cos_sim(encode(batch), encode(batch))
        values.append(sims[~torch.eye(len(batch), dtype=torch.bool)])
    flat = torch.cat(values).double()
    quantiles = torch.quantile(flat, torch.tensor([p / 100 for p in PERCENTILES], dtype=torch.double))
    return {
        "model": model, "pooler": pooler, "batch_size": batch_size, "batches": batches, "pairs": flat.numel(),
        "mean": float(flat.mean()),
        "percentiles": {str(p): float(q) for p, q in zip(PERCENTILES, quantiles)},
        "removed_at_phi": {f"{phi:.2f}": float((flat >= phi).double().mean())
                           for phi in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--pooler", default="avg")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--corpus", default="wiki-sample")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    result = negative_similarities(args.model, args.pooler, args.batch_size, args.batches, args.corpus, args.seed)
    print(json.dumps(result, indent=2))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
