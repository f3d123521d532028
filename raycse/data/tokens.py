"""Training data tokenised once per search and shared by its trials.

Every trial of a search trains on the same sentences with the same tokenizer and length limit, so the driver
tokenises the corpus (or each column of the NLI triplets) once, and Tune hands the token ids to every trial
through Ray's object store (`tune.with_parameters`). A trial's loader then only pads the ids of each batch,
which is what tokenising would have produced: `SharedTokens.check` compares the two on a sample and the trainer
falls back to tokenising when they differ (a tokenizer that pads on the left, say).

The ids are kept flat (one int32 array and the offsets of each text), so a corpus of a million sentences is a
few hundred MB in the object store rather than a million Python lists.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class TokenIds:
    """The token ids of a list of texts, each with its special tokens and truncated to max_len, unpadded."""

    flat: np.ndarray  # int32: every text's ids, one after the other
    offsets: np.ndarray  # int64: text i is flat[offsets[i]:offsets[i + 1]]
    pad_id: int
    keys: tuple[str, ...]  # the tensors the tokenizer returns: input_ids, attention_mask (, token_type_ids)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def ids(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i]:self.offsets[i + 1]]


def pad_rows(rows: list[np.ndarray], template: TokenIds,
             pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
    """The padded tensors of these id rows, as the tokenizer pads a batch (right padding, zero type ids)."""
    width = max(len(ids) for ids in rows)
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    input_ids = torch.full((len(rows), width), template.pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, :len(ids)] = torch.from_numpy(ids.astype(np.int64))
        attention_mask[row, :len(ids)] = 1
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": torch.zeros_like(input_ids)}
    return {key: tensors[key] for key in template.keys}


# Texts tokenised at a time. A tokenizer returns Python lists (an int object per token, for every tensor): all of
# wiki1m at once peaked at 7.5 GB of resident memory in the driver; a chunk at a time keeps only the flat int32 ids.
TOKENIZE_CHUNK = 16_384


def tokenize_texts(tokenizer, texts: list[str], max_len: int) -> TokenIds:
    """The ids of `texts` as `tokenizer(texts, truncation=True, max_length=max_len)` gives them, kept flat.

    A fast tokenizer's Rust backend is called directly, for the ids alone: the Python wrapper's three lists per
    text took three times as long (5.8 s against 1.9 s for 100,000 sentences). `SharedTokens.check` compares the
    result with the wrapper's batches before any trial uses it."""
    keys = tuple(tokenizer(texts[:1], truncation=True, max_length=max_len, padding=False).keys())
    ids_of = _backend_ids(tokenizer, max_len) or (
        lambda chunk: tokenizer(chunk, truncation=True, max_length=max_len, padding=False)["input_ids"])
    lengths, flats = [], []
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        ids = ids_of(texts[start:start + TOKENIZE_CHUNK])
        lengths.append(np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids)))
        flats.append(np.fromiter((token for row in ids for token in row), dtype=np.int32,
                                 count=int(lengths[-1].sum())))
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths or [np.zeros(0, np.int64)]))])
    flat = np.concatenate(flats) if flats else np.zeros(0, np.int32)
    return TokenIds(flat, offsets, tokenizer.pad_token_id or 0, keys)


def _backend_ids(tokenizer, max_len: int):
    """A function from texts to their ids through a copy of a fast tokenizer's backend, truncated as the wrapper
    truncates (special tokens included); None for a tokenizer without one."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return None
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(backend.to_str())  # the user's tokenizer keeps its own truncation and padding
    backend.no_padding()
    backend.enable_truncation(max_len)

    def encode(part: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in backend.encode_batch(part, add_special_tokens=True)]

    def ids_of(chunk: list[str]) -> list[list[int]]:
        # On every core, in threads of our own, a slice each (the backend releases the GIL): as fast as the backend's
        # own thread pool (107,226 sentences on 2 cores: 2.6-2.9 s against 3.0 s; 4.7 s on one thread), and unlike
        # that pool (TOKENIZERS_PARALLELISM, off in raycse's processes) nothing is left running that a process
        # forked later, a DataLoader worker, could inherit half-locked: a test process that had tokenised a
        # search's corpus saw a forked loader worker die of a double free.
        threads = max(1, min(os.cpu_count() or 1, len(chunk)))
        size = max(1, -(-len(chunk) // threads))
        with ThreadPoolExecutor(threads) as pool:
            parts = pool.map(encode, [chunk[start:start + size] for start in range(0, len(chunk), size)])
            return [ids for part in parts for ids in part]

    return ids_of


@dataclass
class SharedTokens:
    """The token ids of a training's data: one column for a corpus, three for (sent0, sent1, hard_neg) triplets.

    `fingerprint` names what they were made from (model, length limit, data), so a trial whose configuration
    differs (a searched max_len, say) does not use them.
    """

    columns: list[TokenIds]
    fingerprint: str

    def __len__(self) -> int:
        return len(self.columns[0])

    @property
    def supervised(self) -> bool:
        return len(self.columns) == 3

    def pad(self, indices: list[int], columns: list[int], pad_to_multiple_of: int | None = None) -> dict:
        """The examples `indices`, their `columns` one after the other, padded together as one batch."""
        rows = [self.columns[c].ids(i) for c in columns for i in indices]
        return pad_rows(rows, self.columns[0], pad_to_multiple_of)

    def check(self, tokenizer, examples: list, max_len: int, sample: int = 64) -> bool:
        """Whether padding these ids gives exactly what tokenising the examples gives (on a sample)."""
        indices = list(range(min(sample, len(self))))
        for column in range(len(self.columns)):
            texts = [examples[i][column] if self.supervised else examples[i] for i in indices]
            expected = tokenizer(texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
            padded = self.pad(indices, [column])
            if set(expected.keys()) != set(padded) or any(not torch.equal(expected[k], padded[k]) for k in padded):
                return False
        return True


def data_fingerprint(config) -> str:
    """What a training's token ids depend on: the model's tokenizer, the length limit, the data and its reading."""
    text = "|".join(str(v) for v in (config.model, config.max_len, config.sup_data or config.corpus,
                                      config.max_sentences, config.replace_bad_bytes))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def share_tokens(tokenizer, examples: list, max_len: int, fingerprint: str) -> SharedTokens:
    """Tokenise a training's examples once: sentences, or (sent0, sent1, hard_neg) triplets column by column."""
    if examples and isinstance(examples[0], tuple):
        columns = [tokenize_texts(tokenizer, [row[c] for row in examples], max_len) for c in range(3)]
    else:
        columns = [tokenize_texts(tokenizer, list(examples), max_len)]
    return SharedTokens(columns, fingerprint)
