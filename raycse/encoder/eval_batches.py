"""Evaluation batches: a sentence list tokenised once, longest first, cut into batches, and kept for the next trial.

`Encoder.encode` takes its batches from `evaluation_batches`. The sentences are tokenised in one call; each batch is
then padded from those ids (`tokenizer.pad`: the tensors a second tokenising would give, at a quarter of its cost)
to the longest sentence in it. Sorting by token count pads STS-B dev's 47,750 tokens to 48,715 where sorting by
characters, 128 a batch, padded them to 69,410.

The batches are kept per process (`CACHE_SIZE` lists), because a process evaluates the same sentences again and
again: a trial's objective at every evaluation, the seven test sets in every judging run that a warm worker trains
one after another. The key is the tokenizer's content, not its folder: a judging run's test figures come from its
best checkpoint reloaded from a folder of its own, whose tokenizer is the model's, saved and read back: keyed by
folder, every judging run would tokenise the seven test sets' 26,973 sentences again (on a GPU shared by 4-8 trials,
about half of what its evaluation takes).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import weakref

import torch
from torch import Tensor

CACHE_SIZE = 4  # the objective's dev sentences and the seven test sets, for a couple of tokenizers
_CACHE: dict[tuple, tuple[Tensor, list[dict[str, Tensor]]]] = {}


def evaluation_batches(tokenizer, sentences: list[str], max_len: int, batch_size: int,
                       tokens_per_batch: int | None, pin: bool = False) -> tuple[Tensor, list[dict[str, Tensor]]]:
    """The padded batches that encode `sentences`, longest first, and the row order they hold them in.

    Args:
        tokenizer: a Hugging Face tokenizer.
        sentences: the sentences, in the caller's order.
        max_len: tokens kept of a sentence (truncation).
        batch_size: sentences a batch, unless `tokens_per_batch` is given.
        tokens_per_batch: padded tokens a batch: as many sentences as fit (one at least).
        pin: pin each batch's memory (for copies to a CUDA device).

    Returns:
        (order, batches): `order[i]` is the input index of the i-th row over all batches, which hold
        `tokenizer(...)`'s tensors padded to the longest sentence of each batch.

    Example:
        >>> order, batches = evaluation_batches(tokenizer, ["a b c", "a"], 32, 128, None)
        >>> order.tolist(), batches[0]["input_ids"].shape[0]
        ([0, 1], 2)
    """
    key = (tokenizer_fingerprint(tokenizer), tuple(sentences), max_len, batch_size, tokens_per_batch, pin)
    if key in _CACHE:
        return _CACHE[key]
    encoded = tokenizer(sentences, truncation=True, max_length=max_len) if sentences else {"input_ids": []}
    token_counts = [len(ids) for ids in encoded["input_ids"]]
    longest_first = sorted(range(len(sentences)), key=lambda i: token_counts[i], reverse=True)
    batches = []
    for rows in batch_rows(longest_first, token_counts, batch_size, tokens_per_batch):
        batch = dict(tokenizer.pad({name: [column[i] for i in rows] for name, column in encoded.items()},
                                   return_tensors="pt"))
        batches.append({name: tensor.pin_memory() for name, tensor in batch.items()} if pin else batch)
    if len(_CACHE) >= CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]  # the oldest
    _CACHE[key] = (torch.tensor(longest_first, dtype=torch.long), batches)
    return _CACHE[key]


def tokenizer_fingerprint(tokenizer) -> str:
    """What a tokenizer turns sentences into, as a digest: a fast tokenizer's whole backend (its vocabulary,
    normaliser and special tokens) and the settings the Python side pads and truncates with; a slow one's folder.

    Example:
        >>> tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(AutoTokenizer.from_pretrained(saved_copy))
        True
    """
    settings = (type(tokenizer).__name__, len(tokenizer), tokenizer.padding_side, tokenizer.truncation_side,
                tokenizer.pad_token_id, getattr(tokenizer, "pad_token_type_id", 0), tuple(tokenizer.model_input_names))
    return hashlib.sha256(f"{settings!r}\n{_content_digest(tokenizer)}".encode()).hexdigest()


# A backend's digest, kept per tokenizer object while its size stays the same (added tokens change it): serialising
# the backend takes tens of milliseconds, and a trial evaluates every few seconds
_CONTENT_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _content_digest(tokenizer) -> str:
    size = len(tokenizer)
    with contextlib.suppress(TypeError):  # an object that takes no weak reference is digested each time
        kept = _CONTENT_DIGESTS.get(tokenizer)
        if kept is not None and kept[0] == size:
            return kept[1]
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None:
        # less the truncation and padding that the last call left set: every call sets its own
        content = json.dumps({k: v for k, v in json.loads(backend.to_str()).items()
                              if k not in ("truncation", "padding")}, sort_keys=True)
    else:
        content = str(tokenizer.name_or_path)
    digest = hashlib.sha256(content.encode()).hexdigest()
    with contextlib.suppress(TypeError):
        _CONTENT_DIGESTS[tokenizer] = (size, digest)
    return digest


def batch_rows(longest_first: list[int], token_counts: list[int], batch_size: int,
               tokens_per_batch: int | None) -> list[list[int]]:
    """The rows of each evaluation batch, longest sentences first: `batch_size` sentences a batch, or, with
    `tokens_per_batch`, as many as fit that many padded tokens (a batch pads to its first, longest sentence).

    Example:
        >>> batch_rows([2, 0, 1], [3, 1, 5], batch_size=128, tokens_per_batch=6)
        [[2], [0, 1]]
    """
    batches, start = [], 0
    while start < len(longest_first):
        longest = token_counts[longest_first[start]]
        size = batch_size if tokens_per_batch is None else max(1, tokens_per_batch // longest)
        batches.append(longest_first[start:start + size])
        start += size
    return batches


def clear_cache() -> None:
    """Forget every kept list (tests and benchmarks that time a first evaluation)."""
    _CACHE.clear()
