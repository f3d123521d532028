"""Training data: an unsupervised sentence corpus or SimCSE's supervised NLI triplets.

A corpus is a text file (one sentence a line), an http(s) URL of one, or a Hugging Face dataset written
`hf:NAME[:SPLIT[:COLUMN]]`; the default is the Wikipedia sample bundled in the package (the first 11,914
lines of SimCSE's wiki1m). Supervised data is SimCSE's `nli_for_simcse.csv` format: columns sent0, sent1,
hard_neg; the alias `sick-train` builds a small demonstration set of such triplets from the bundled SICK train
split, so that the supervised losses run offline. Every reader fails with a `ConfigError` that names the file
(and line) rather than a traceback.
"""
from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path

import torch
from torch.utils.data import IterableDataset, get_worker_info

from raycse.data import BUNDLED_CORPUS, BUNDLED_DIR, BUNDLED_NLI, SYNTHETIC_WIKI1M, downloads
from raycse.errors import ConfigError, first_line
from raycse.seeds import derived_seed

DATA_DIR = BUNDLED_DIR
BUNDLED_CORPUS_PATH = DATA_DIR / "wiki_sample.txt"
NLI_COLUMNS = ("sent0", "sent1", "hard_neg")
BUNDLED_SICK_TRIPLETS = BUNDLED_NLI  # (premise, entailment, contradiction) triplets built from SICK's train split
SICK_TRAIN_PATH = DATA_DIR / "senteval" / "SICK" / "SICK_train.txt"


def load_examples(config) -> list:
    """The training data a configuration names (a TrainConfig, or anything with its data fields): NLI triplets
    when it is supervised, else the corpus's sentences."""
    if config.sup_data is not None:
        return read_nli_triplets(config.sup_data, max_rows=config.max_sentences)
    return read_corpus(config.corpus, max_sentences=config.max_sentences, replace_bad_bytes=config.replace_bad_bytes)


def read_corpus(source: str, max_sentences: int | None = None, replace_bad_bytes: bool = False) -> list[str]:
    """The sentences of a corpus, blank lines skipped, in file order."""
    if source == BUNDLED_CORPUS:
        source = str(BUNDLED_CORPUS_PATH)
    if source == SYNTHETIC_WIKI1M:
        from raycse.data.synthetic_corpus import synthetic_sentences

        sentences = synthetic_sentences(read_corpus(BUNDLED_CORPUS))
    elif source.startswith("hf:"):
        sentences = _read_hf_dataset(source)
    else:
        raw, name = _read_bytes(source)
        sentences = _decode_lines(raw, name, replace_bad_bytes)
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    if not sentences:
        raise ConfigError(f"corpus {source!r} is empty (no non-blank line)")
    return sentences


def read_nli_triplets(path: str, max_rows: int | None = None) -> list[tuple[str, str, str]]:
    """(anchor, entailment, contradiction) rows of an NLI csv with the columns sent0, sent1, hard_neg.

    ``path`` may also be `BUNDLED_SICK_TRIPLETS` ("sick-train"): see `sick_triplets`.
    """
    if path == BUNDLED_SICK_TRIPLETS:
        return sick_triplets(max_rows=max_rows)
    raw, name = _read_bytes(path)
    text = "\n".join(_decode_lines(raw, name, replace_bad_bytes=False, keep_blank=True))
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in NLI_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(f"{name}: missing column(s) {', '.join(missing)} (an NLI csv needs {', '.join(NLI_COLUMNS)})")
    rows = []
    for row in reader:
        triplet = tuple((row[c] or "").strip() for c in NLI_COLUMNS)
        if all(triplet):
            rows.append(triplet)
        if max_rows is not None and len(rows) >= max_rows:
            break
    if not rows:
        raise ConfigError(f"{name}: no complete (sent0, sent1, hard_neg) row")
    return rows


def sick_triplets(path: str | Path = SICK_TRAIN_PATH, max_rows: int | None = None) -> list[tuple[str, str, str]]:
    """(premise, entailment, contradiction) triplets in SimCSE's format, built from a SICK split.

    A small demonstration set, so that the supervised losses run offline: it is NOT SimCSE's supervised
    data (nli_for_simcse.csv, about 275k SNLI + MNLI triplets), and a model trained on it should not be
    compared with the papers' supervised figures. The bundled SICK train split gives 148 triplets (from 107
    premises).

    SICK's file has a header line, then pair_ID, sentence_A, sentence_B, relatedness_score,
    entailment_judgment (ENTAILMENT, CONTRADICTION or NEUTRAL). Only sentence_A is taken as the premise, as
    in SimCSE's data where the hypothesis is always the second sentence. A premise with at least one
    ENTAILMENT and at least one CONTRADICTION hypothesis gives one triplet per entailment pair, in file
    order; its k-th entailment pair takes the premise's (k mod C)-th contradiction (C contradictions, in
    file order), so that the choice spreads over them and does not depend on a seed.
    """
    raw, name = _read_bytes(str(path))
    lines = _decode_lines(raw, name, replace_bad_bytes=False, keep_blank=True)
    entailment_pairs: list[tuple[str, str]] = []
    contradictions: dict[str, list[str]] = {}
    for number, line in enumerate(lines[1:], start=2):  # line 1 is the header
        if not line:
            continue
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) < 5:
            raise ConfigError(f"{name}: line {number} has {len(fields)} tab-separated fields, a SICK file has 5")
        premise, hypothesis, judgment = fields[1], fields[2], fields[4]
        if judgment == "ENTAILMENT":
            entailment_pairs.append((premise, hypothesis))
        elif judgment == "CONTRADICTION":
            contradictions.setdefault(premise, []).append(hypothesis)
    rows = []
    used: dict[str, int] = {}  # entailment pairs of each premise seen so far
    for premise, entailment in entailment_pairs:
        if premise in contradictions:
            k = used[premise] = used.get(premise, -1) + 1
            rows.append((premise, entailment, contradictions[premise][k % len(contradictions[premise])]))
    if not rows:
        raise ConfigError(f"{name}: no premise with both an ENTAILMENT and a CONTRADICTION hypothesis")
    return rows[:max_rows] if max_rows is not None else rows


def _read_bytes(source: str) -> tuple[bytes, str]:
    if source.startswith(("http://", "https://")):
        return downloads.fetch(source), source  # once per search (raycse.data.downloads)
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError(f"file {source!r} does not exist")
    try:
        return path.read_bytes(), str(path)
    except OSError as err:
        raise ConfigError(f"cannot read {source!r}: {err.strerror}") from None


def _decode_lines(raw: bytes, name: str, replace_bad_bytes: bool, keep_blank: bool = False) -> list[str]:
    """Split into lines and decode each as UTF-8, so an error can name the offending line."""
    lines = []
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            if not replace_bad_bytes:
                raise ConfigError(
                    f"{name}: line {number} is not valid UTF-8 (byte {line[err.start]:#04x} at column "
                    f"{err.start + 1}); fix the file or pass --replace-bad-bytes") from None
            text = line.decode("utf-8", errors="replace")
        text = text.lstrip("\ufeff").strip()
        if text or keep_blank:
            lines.append(text)
    return lines


def _read_hf_dataset(source: str) -> list[str]:
    """`hf:NAME[:SPLIT[:COLUMN]]` through the `datasets` library (needs a network or a local cache)."""
    parts = source[3:].split(":")
    name, split, column = parts[0], (parts[1] if len(parts) > 1 else "train"), (parts[2] if len(parts) > 2 else "text")
    try:
        import datasets

        dataset = datasets.load_dataset(name, split=split)
    except Exception as err:  # noqa: BLE001 - the hub raises many types; the user needs one line
        raise ConfigError(f"cannot load Hugging Face dataset {name!r} (split {split!r}): {first_line(err)}") from None
    if column not in dataset.column_names:
        raise ConfigError(f"dataset {name!r} has no column {column!r} (columns: {', '.join(dataset.column_names)})")
    return [s.strip() for s in dataset[column] if isinstance(s, str) and s.strip()]


class GlobalBatches:
    """Seeded shuffled batches of a dataset, sharded so W workers together see one global batch per step.

    Every worker draws the same permutation (same seed), cuts it into global batches of
    `batch_size * world_size` examples and keeps its own contiguous slice: worker r of W with batch b sees
    exactly the rows r*b .. (r+1)*b of the global batch a single worker with batch W*b would see. That is
    what makes the W-worker run equal to the 1-worker run with the all-gathered negatives.
    """

    def __init__(self, examples: list, batch_size: int, seed: int, rank: int = 0, world_size: int = 1):
        self.examples, self.batch_size, self.seed = examples, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.global_batch = batch_size * world_size
        if len(examples) < self.global_batch:
            raise ConfigError(
                f"the training data has {len(examples)} examples, fewer than one batch "
                f"({batch_size} x {world_size} worker(s) = {self.global_batch})")

    def __len__(self) -> int:
        return len(self.examples) // self.global_batch  # drop the ragged last batch: negatives stay comparable

    def epoch(self, epoch: int):
        generator = torch.Generator().manual_seed(derived_seed(self.seed, "data_order", epoch))
        order = torch.randperm(len(self.examples), generator=generator).tolist()
        start = self.rank * self.batch_size
        for step in range(len(self)):
            offset = step * self.global_batch + start
            yield [self.examples[i] for i in order[offset:offset + self.batch_size]]


class StepBatches(IterableDataset):
    """The raw batches of `steps` training steps, epoch after epoch: what the trainer's DataLoader iterates.

    Exactly the batches of `GlobalBatches.epoch(0)`, `.epoch(1)`, ... in order, cut off after `steps`, so the
    loader changes where a batch is tokenised, never which sentences a rank sees at which step. One stream over
    all epochs (rather than one DataLoader pass per epoch) lets a loader worker live for the whole training
    without `persistent_workers`, whose copy of the dataset would not see a per-epoch attribute change.
    """

    def __init__(self, batches: GlobalBatches, epochs: int, steps: int, start: int = 0):
        self.batches, self.epochs, self.steps, self.start = batches, epochs, steps, start

    def __len__(self) -> int:
        return max(0, min(self.steps, len(self.batches) * self.epochs) - self.start)

    def __iter__(self):
        # `start` > 0 resumes a training: the batches of the steps already taken are drawn and dropped (the order
        # depends only on the seed), so step start + 1 gets the very batch it would have got without the break.
        every_epoch = (batch for epoch in range(self.epochs) for batch in self.batches.epoch(epoch))
        stream = itertools.islice(every_epoch, self.start, self.steps)
        worker = get_worker_info()
        if worker is None or worker.num_workers == 1:
            return stream
        # Worker k of W yields steps k, k + W, ...; the DataLoader takes one item from each worker in turn,
        # which puts the stream back in order.
        return itertools.islice(stream, worker.id, None, worker.num_workers)
