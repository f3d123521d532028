"""STS evaluation exactly as SentEval scores it for SimCSE and its successors.

Every figure is Spearman's rank correlation x100 between the cosine similarity of two sentence embeddings
and the gold similarity score (SentEval, Conneau & Kiela 2018, `senteval/sts.py`; SimCSE's `evaluation.py`):

  stsb_dev          STS-B dev: the search objective and SimCSE's model-selection metric
  sickr_dev         SICK-R dev (SICK_trial.txt)
  STS12 ... STS16   the "all" aggregate: ONE Spearman over the concatenation of every subset's predictions and
                    gold scores (not the mean of per-subset figures); pairs with an empty gold score are dropped
  STSBenchmark      STS-B test
  SICKRelatedness   SICK-R test
  avg               plain mean of the seven test figures (the papers' "Avg.")
  alignment         SimCSE's / Wang & Isola's alignment and uniformity of L2-normalised embeddings on STS-B
  uniformity        dev (see `alignment_uniformity`)

The number a search maximises is a `DevObjective`, chosen with `build_objective`:

  stsb_dev          STS-B dev (the default; SimCSE's model selection)
  sts_dev_avg       the mean of STS-B dev and SICK-R dev (DCLR's model selection)
  a file path       the user's own development pairs, a TSV or CSV with two sentence columns and a gold score

The scoring knows nothing of models: it takes an `Encode` function from sentences to embeddings, and encodes
each distinct sentence once. Only `run_eval`, behind `raycse eval`, loads an `Encoder` to make one.
"""
from __future__ import annotations

import csv
import functools
import io
import math
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from raycse.errors import ConfigError
from raycse.evaluation.tasks import SPLIT_OF_RESULT, STSPairs, concatenate, load_sts_task, senteval_text
from raycse.records import SEVEN_TASKS, TEST_KEYS, TEST_LABELS

Encode = Callable[[list[str]], torch.Tensor]

# What each `--tasks` value reports, in the order the results are listed.
RESULTS_OF_TASKS = {
    "stsb-dev": ("stsb_dev",),
    "sts": TEST_KEYS,
    "all": ("stsb_dev", "sickr_dev", *SEVEN_TASKS, "avg", "alignment", "uniformity"),
}

# SimCSE (footnote 3) takes "STS-B pairs with a score higher than 4" as p_pos; raycse's alignment counts the pairs
# scored exactly 4 too (gold >= 4: 264 STS-B dev pairs rather than 208), so it is not a strict "> 4" reading.
ALIGNMENT_MIN_GOLD = 4.0


# ----------------------------------------------------------------------------------------------- scoring
def spearman_x100(predicted, gold) -> float:
    """Spearman's rank correlation x100, as the papers report it: Pearson's correlation of the two rankings, tied
    values sharing the mean of their ranks; NaN when either holds a NaN or is constant.

    The very computation of `scipy.stats.spearmanr` (the same ranks, the same `np.corrcoef` call), in numpy: scipy.stats
    costs each trial's process 0.3 CPU-seconds to import.

    Example:
        >>> spearman_x100([0.1, 0.4, 0.4, 0.9], [1.0, 2.0, 3.0, 4.0])
        94.86832980505139
    """
    ranks = np.column_stack((_average_ranks(predicted), _average_ranks(gold)))
    if np.isnan(ranks).any() or (ranks == ranks[0]).all(axis=0).any():
        return math.nan
    return float(np.corrcoef(ranks, rowvar=False)[1, 0] * 100.0)


def _average_ranks(values) -> np.ndarray:
    """The ranks from 1 of `values`, ties given the mean of the ranks they span (scipy's `rankdata`, 'average');
    all NaN when one is NaN."""
    values = np.asarray(values, dtype=float)
    if np.isnan(values).any():
        return np.full(values.shape, math.nan)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # the rank of each distinct value's last occurrence
    return (last - (counts - 1) / 2.0)[inverse]


class _DistinctSentences:
    """The distinct sentences of some pair sets (first-seen order) and where each sits in their encoding."""

    def __init__(self, pair_sets: Iterable[STSPairs]):
        self.sentences = list(dict.fromkeys(
            sentence for pairs in pair_sets for sentence in (*pairs.sentences1, *pairs.sentences2)
        ))
        self._row_of = {sentence: row for row, sentence in enumerate(self.sentences)}

    def rows(self, sentences: list[str]) -> torch.Tensor:
        return torch.tensor([self._row_of[sentence] for sentence in sentences], dtype=torch.long)

    def encode_with(self, encode: Encode) -> torch.Tensor:
        embeddings = encode(self.sentences)
        if embeddings.shape[0] != len(self.sentences):
            raise ValueError(f"encode returned {embeddings.shape[0]} embeddings for {len(self.sentences)} sentences")
        return embeddings.detach().float().cpu()


def _cosines(embeddings: torch.Tensor, rows1: torch.Tensor, rows2: torch.Tensor) -> np.ndarray:
    # In float64, so rounding does not reorder nearly equal cosines. A zero vector gets cosine 0, as
    # SentEval's nan_to_num gives it.
    return F.cosine_similarity(embeddings[rows1].double(), embeddings[rows2].double(), dim=-1).numpy()


def _pair_cosines(embeddings: torch.Tensor, distinct: _DistinctSentences, pairs: STSPairs) -> np.ndarray:
    return _cosines(embeddings, distinct.rows(pairs.sentences1), distinct.rows(pairs.sentences2))


def score_pairs(encode: Encode, pairs: STSPairs) -> np.ndarray:
    """Cosine similarity of each pair's embeddings; each distinct sentence (either side) is encoded once."""
    distinct = _DistinctSentences([pairs])
    return _pair_cosines(distinct.encode_with(encode), distinct, pairs)


def alignment_uniformity(encode: Encode, data_dir: str | Path | None = None) -> tuple[float, float]:
    """SimCSE's alignment and uniformity (Wang & Isola 2020) on STS-B dev, lower is better for both.

    On L2-normalised embeddings f:
      alignment  = mean ||f(x) - f(x+)||^2 over STS-B dev pairs with a gold score higher than 4
      uniformity = log mean exp(-2 ||f(x) - f(y)||^2) over all pairs of distinct STS-B dev sentences
    SimCSE's footnote says "STS-B"; its successors (e.g. EASE) name the dev split, the split that is also
    the model-selection set, so the test split stays untouched.
    """
    pairs = load_sts_task("STSBenchmark-dev", data_dir)["all"]
    distinct = _DistinctSentences([pairs])
    return _alignment_uniformity(distinct.encode_with(encode), distinct, pairs)


def _alignment_uniformity(
    embeddings: torch.Tensor, distinct: _DistinctSentences, pairs: STSPairs
) -> tuple[float, float]:
    normalised = F.normalize(embeddings.double(), dim=-1)
    positive = np.flatnonzero(pairs.scores >= ALIGNMENT_MIN_GOLD)
    rows1 = distinct.rows([pairs.sentences1[i] for i in positive])
    rows2 = distinct.rows([pairs.sentences2[i] for i in positive])
    alignment = (normalised[rows1] - normalised[rows2]).norm(dim=1).pow(2).mean()
    # `distinct` may hold other data sets' sentences too: take each distinct STS-B dev sentence once, and
    # pdist takes each unordered pair of them once.
    sentence_rows = distinct.rows(list(dict.fromkeys([*pairs.sentences1, *pairs.sentences2])))
    uniformity = torch.pdist(normalised[sentence_rows], p=2).pow(2).mul(-2.0).exp().mean().log()
    return float(alignment), float(uniformity)


# ----------------------------------------------------------------------------------------------- objectives
OBJECTIVES = ("stsb_dev", "sts_dev_avg")
DEFAULT_DEV_COLUMNS = "sentence1,sentence2,score"

# The dev figures each named objective averages, keyed as in `SPLIT_OF_RESULT`.
_COMPONENTS_OF_OBJECTIVE = {"stsb_dev": ("stsb_dev",), "sts_dev_avg": ("stsb_dev", "sickr_dev")}
_DESCRIPTION_OF_OBJECTIVE = {
    "stsb_dev": "STS-B dev Spearman x100",
    "sts_dev_avg": "mean of STS-B dev and SICK-R dev Spearman x100",
}
_DELIMITER_OF_SUFFIX = {".tsv": "\t", ".txt": "\t", ".csv": ","}


class DevObjective:
    """A search objective: the mean of one or more dev figures (Spearman x100), each on its own pairs.

    The distinct sentences of all the pairs are found once, at construction; each call encodes them in ONE
    call of `encode` and ranks the cosines. A call returns {"objective": the mean, <figure name>: figure, ...}.

    Attributes:
        name: "stsb_dev", "sts_dev_avg" or "dev_file".
        description: what the objective is, in words (for a file: its path).
        pairs: {figure name: its pairs}; the figure names are "stsb_dev" and "sickr_dev", or "dev_file".
    """

    # Every objective here is a Spearman correlation x100: higher is better (Tune's and Optuna's word for the
    # direction), and -100 is the worst a run can score (what a diverged training is worth, where one is needed).
    mode = "max"
    worst = -100.0

    @classmethod
    def better(cls, value: float, than: float) -> bool:
        return value > than if cls.mode == "max" else value < than

    def __init__(self, name: str, description: str, pairs: dict[str, STSPairs]):
        self.name, self.description, self.pairs = name, description, dict(pairs)
        self._distinct = _DistinctSentences(self.pairs.values())
        self._rows = {
            key: (self._distinct.rows(p.sentences1), self._distinct.rows(p.sentences2)) for key, p in self.pairs.items()
        }

    @property
    def sentences(self) -> list[str]:
        """The distinct sentences that each call encodes, in the order `encode` receives them."""
        return self._distinct.sentences

    @property
    def result_keys(self) -> tuple[str, ...]:
        """The keys of what a call returns, in order."""
        return ("objective", *self.pairs)

    def __call__(self, encode: Encode) -> dict[str, float]:
        embeddings = self._distinct.encode_with(encode)
        figures = {
            key: spearman_x100(_cosines(embeddings, *self._rows[key]), pairs.scores)
            for key, pairs in self.pairs.items()
        }
        return {"objective": float(np.mean(list(figures.values()))), **figures}

    def __repr__(self) -> str:
        return f"DevObjective({self.name!r}, {self.description!r})"


def build_objective(spec: str, columns: str | None = None, data_dir: str | Path | None = None) -> DevObjective:
    """The objective that ``spec`` names: "stsb_dev", "sts_dev_avg", or the path of a development file.

    A development file is read by `load_dev_file`, ``columns`` ("sentence 1,sentence 2,gold score"; default
    `DEFAULT_DEV_COLUMNS`) naming its columns; ``columns`` given with a named objective is an error, as it
    would be ignored. Everything is validated here, so that a bad file fails before any training. ``data_dir``
    replaces the bundled SentEval data (tests).
    """
    spec = str(spec)
    if spec in OBJECTIVES:
        if columns is not None:
            raise ConfigError(f"objective_columns: {columns!r} only applies to a development file, not to {spec}")
        pairs = {
            key: concatenate(load_sts_task(SPLIT_OF_RESULT[key], data_dir).values())
            for key in _COMPONENTS_OF_OBJECTIVE[spec]
        }
        return DevObjective(spec, _DESCRIPTION_OF_OBJECTIVE[spec], pairs)
    names = dev_columns(columns)  # a bad --objective-columns is reported even when the path is wrong too
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ConfigError(f"objective: {spec!r} is neither {', '.join(OBJECTIVES)} nor an existing file")
    return DevObjective("dev_file", str(path), {"dev_file": load_dev_file(path, names)})


def dev_columns(columns: str | None) -> tuple[str, str, str]:
    if columns is None:
        columns = DEFAULT_DEV_COLUMNS
    names = tuple(name.strip() for name in str(columns).split(","))
    if len(names) != 3 or not all(names) or len(set(names)) != 3:
        raise ConfigError(
            f"objective_columns: {columns!r} is not three distinct comma-separated column names "
            f"(sentence 1, sentence 2, gold score; e.g. {DEFAULT_DEV_COLUMNS!r})")
    return names  # type: ignore[return-value]


def load_dev_file(path: str | Path, columns: tuple[str, str, str] = ("sentence1", "sentence2", "score")) -> STSPairs:
    """The sentence pairs and gold scores of a user's development file.

    A TSV (.tsv or .txt; tab-separated, quotes taken literally, as in SentEval's files) or a CSV (.csv; quoted
    fields as Python's csv reads them), UTF-8, with a header row naming at least ``columns``: sentence 1,
    sentence 2 and the gold score. Blank rows are skipped; sentences are whitespace-normalised as SentEval's
    are. Anything that would make the objective meaningless (fewer than 2 pairs, every gold score equal) or
    that cannot be read raises a one-line ConfigError naming the file and, where there is one, the line.
    """
    path = Path(path)
    where = f"objective file {str(path)!r}"
    delimiter = _DELIMITER_OF_SUFFIX.get(path.suffix.lower())
    if delimiter is None:
        raise ConfigError(f"{where}: unknown extension {path.suffix!r} (a development file is .tsv, .txt or .csv)")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{where}: cannot read it ({err.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(f"{where}: line {line} is not valid UTF-8 (byte {raw[err.start]:#04x})") from None
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline=""), delimiter=delimiter, quoting=quoting)
    if reader.fieldnames is None:
        raise ConfigError(f"{where} is empty: it needs a header row naming the columns {', '.join(columns)}")
    reader.fieldnames = [name.strip() for name in reader.fieldnames]
    for name in columns:
        if name not in reader.fieldnames:
            found = ", ".join(repr(found) for found in reader.fieldnames)
            raise ConfigError(f"{where}: no column {name!r} (columns found: {found})")
    first, second, score = columns
    sentences1, sentences2, scores = [], [], []
    for row in _rows_of(reader, where):
        values = [row.get(name) for name in columns]
        if all(not (value or "").strip() for value in values):
            continue
        for name, value in zip(columns, values):
            if not (value or "").strip():
                raise ConfigError(f"{where}, line {reader.line_num}: no value in column {name!r}")
        try:
            gold = float(row[score])
        except ValueError:
            gold = math.nan
        if not math.isfinite(gold):
            raise ConfigError(f"{where}, line {reader.line_num}: score {row[score].strip()!r} (column {score!r}) "
                              "is not a finite number")
        sentences1.append(senteval_text(row[first]))
        sentences2.append(senteval_text(row[second]))
        scores.append(gold)
    if len(scores) < 2:
        raise ConfigError(f"{where} has {len(scores)} sentence pair(s): a Spearman correlation needs at least 2")
    if len(set(scores)) == 1:
        raise ConfigError(f"{where}: every gold score is {scores[0]:g}, so their Spearman correlation is undefined")
    return STSPairs(sentences1, sentences2, np.asarray(scores, dtype=np.float64))


def _rows_of(reader: csv.DictReader, where: str):
    """The reader's rows, with a malformed one (e.g. a NUL byte) reported as a ConfigError naming its line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise ConfigError(f"{where}, line {reader.line_num}: {err}") from None


# ----------------------------------------------------------------------------------------------- reports
def evaluate_encoder(encode: Encode, tasks: str = "stsb-dev", data_dir: str | Path | None = None) -> dict[str, float]:
    """The figures that `tasks` ('stsb-dev', 'sts' or 'all') asks for, keyed as in `RESULTS_OF_TASKS`.

    Every distinct sentence of every requested data set is encoded in ONE call to `encode`, then scored.
    """
    wanted = _results_of(tasks)
    correlation_keys = [key for key in wanted if key in SPLIT_OF_RESULT]
    pairs_of = {key: concatenate(load_sts_task(SPLIT_OF_RESULT[key], data_dir).values()) for key in correlation_keys}
    distinct = _DistinctSentences(pairs_of.values())
    embeddings = distinct.encode_with(encode)

    results = {
        key: spearman_x100(_pair_cosines(embeddings, distinct, pairs), pairs.scores)
        for key, pairs in pairs_of.items()
    }
    if "avg" in wanted:
        results["avg"] = float(np.mean([results[task] for task in SEVEN_TASKS]))
    if "alignment" in wanted:
        # STS-B dev is among the encoded sets whenever alignment is asked for ('all').
        results["alignment"], results["uniformity"] = _alignment_uniformity(embeddings, distinct, pairs_of["stsb_dev"])
    return {key: results[key] for key in wanted}


def _results_of(tasks: str) -> tuple[str, ...]:
    if tasks not in RESULTS_OF_TASKS:
        raise ConfigError(f"unknown tasks {tasks!r} (choose from {', '.join(RESULTS_OF_TASKS)})")
    return RESULTS_OF_TASKS[tasks]


def run_eval(
    model: str,
    pooler: str,
    tasks: str = "stsb-dev",
    batch_size: int = 128,
    max_len: int | None = None,
    trust_remote_code: bool = False,
) -> dict[str, float]:
    """Load `model` ('minilm', a directory or a hub id) and report `evaluate_encoder`'s figures for `pooler`."""
    # here, not at the top: a search's driver reads objectives from this module and never loads a model, and the
    # model code costs a process about 2 CPU-seconds to import
    from raycse.encoder.model import Encoder

    _results_of(tasks)  # a typo fails before the (slow) model load
    encoder = Encoder.from_pretrained(model, pooler=pooler, trust_remote_code=trust_remote_code)
    if pooler == "cls" and not encoder.mlp_from_checkpoint:
        warnings.warn(
            f"{model!r} has no trained MLP head: pooler 'cls' uses a randomly initialised one "
            "(SimCSE evaluates unsupervised models with 'cls_before_pooler')",
            stacklevel=2,
        )
    encoder.to("cuda" if torch.cuda.is_available() else "cpu")
    encode = functools.partial(encoder.encode, batch_size=batch_size, pooler=pooler, max_len=max_len)
    return evaluate_encoder(encode, tasks)


_EXTRA_LINES = {
    "stsb_dev": "STS-B dev", "sickr_dev": "SICK-R dev", "alignment": "alignment", "uniformity": "uniformity",
}


def format_table(results: dict[str, float], title: str) -> str:
    """A plain-text report: a row like the papers' Table 2, then dev figures and alignment/uniformity."""
    lines = [title]
    columns = [(header, results[key]) for key, header in TEST_LABELS.items() if key in results]
    if columns:
        widths = [max(len(header), 6) for header, _ in columns]
        lines.append("  ".join(header.rjust(width) for (header, _), width in zip(columns, widths)))
        lines.append("  ".join(_two_decimals(value).rjust(width) for (_, value), width in zip(columns, widths)))
    extras = [(label, results[key]) for key, label in _EXTRA_LINES.items() if key in results]
    label_width = max((len(label) for label, _ in extras), default=0)
    lines.extend(f"{label.ljust(label_width)}  {_two_decimals(value).rjust(6)}" for label, value in extras)
    return "\n".join(lines)


def _two_decimals(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.2f}"
