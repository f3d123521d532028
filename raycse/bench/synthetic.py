"""What `raycse bench` times its steps on: randomly initialised BERT-shaped encoders (the packaged MiniLM's tokenizer,
no download) and synthetic batches of whole vocabulary words, every sentence exactly `seq_len` tokens."""
from __future__ import annotations

import random

from raycse.settings.gpu_share import SHAPES

MAX_POSITIONS = 512


def bert_config(shape: str, vocab_size: int, attn_implementation: str):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, max_position_embeddings=MAX_POSITIONS,
                      attn_implementation=attn_implementation, **SHAPES[shape])


def bench_tokenizer():
    from transformers import AutoTokenizer

    from raycse.encoder.loading import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path("minilm"))


def make_encoder(shape: str, tokenizer, attn_implementation: str, seed: int, pooler: str = "cls"):
    """A randomly initialised `Encoder` of `shape`; the same seed gives the same weights for either attention."""
    import torch
    from transformers import BertModel

    from raycse.encoder.model import Encoder

    torch.manual_seed(seed)
    backbone = BertModel(bert_config(shape, len(tokenizer), attn_implementation))
    if backbone.config._attn_implementation != attn_implementation:
        raise RuntimeError(f"asked for {attn_implementation} attention, got {backbone.config._attn_implementation}")
    return Encoder(backbone.float(), tokenizer, pooler)


def synthetic_data(tokenizer, batch_size: int, seq_len: int, supervised: bool, count: int, seed: int):
    """`GlobalBatches` of `count` batches of `batch_size` sentences (triplets when supervised), each sentence exactly
    `seq_len` tokens: the batches the trainer would draw from such a corpus."""
    from raycse.data.corpus import GlobalBatches

    rng = random.Random(seed)
    words = sorted(w for w in tokenizer.get_vocab() if w.isascii() and w.isalpha() and w.islower() and len(w) >= 3)

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(seq_len - 2))

    batches = []
    for _ in range(count):
        if supervised:
            batches.append([(sentence(), sentence(), sentence()) for _ in range(batch_size)])
        else:
            batches.append([sentence() for _ in range(batch_size)])
    sample = [s for row in batches[0] for s in (row if supervised else (row,))]
    lengths = {len(ids) for ids in tokenizer(sample)["input_ids"]}
    if lengths != {seq_len}:
        raise RuntimeError(f"synthetic sentences tokenise to lengths {sorted(lengths)}, not {seq_len}")
    return GlobalBatches([row for batch in batches for row in batch], batch_size, seed)
