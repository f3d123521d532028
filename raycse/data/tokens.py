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


def tokenize_texts(tokenizer, texts: list[str], max_len: int) -> TokenIds:
    encoded = tokenizer(texts, truncation=True, max_length=max_len, padding=False)
    lengths = np.fromiter((len(ids) for ids in encoded["input_ids"]), dtype=np.int64, count=len(texts))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.fromiter((token for ids in encoded["input_ids"] for token in ids), dtype=np.int32, count=int(offsets[-1]))
    return TokenIds(flat, offsets, tokenizer.pad_token_id or 0, tuple(encoded.keys()))


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
