"""The STS evaluation sets as SentEval lays them out (STS12-16, STS Benchmark, SICK), read into sentence pairs with
gold scores: `load_sts_task(name)` gives one `STSPairs` per subset file. Bundled in raycse/data/senteval/ (another
folder of the same layout with RAYCSE_STS_DATA)."""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raycse.data import BUNDLED_DIR
from raycse.errors import ConfigError
from raycse.records import STS_YEARS

DEFAULT_DATA_DIR = BUNDLED_DIR / "senteval"
# A folder in SentEval's layout (STS/, SICK/) to read the STS sets from instead of the bundled copy: a user's own
# SentEval download, or the tests' few pairs a set
STS_DATA_ENV = "RAYCSE_STS_DATA"


def sts_data_dir() -> Path:
    """Where the STS sets are read from: $RAYCSE_STS_DATA, else the bundled copy."""
    return Path(os.environ.get(STS_DATA_ENV) or DEFAULT_DATA_DIR)


# Which split of which data set each result key is scored on (names as `load_sts_task` takes them).
SPLIT_OF_RESULT = {
    "stsb_dev": "STSBenchmark-dev",
    "sickr_dev": "SICK-dev",
    **{year: year for year in STS_YEARS},
    "STSBenchmark": "STSBenchmark-test",
    "SICKRelatedness": "SICK-test",
}

_STSB_FILES = {"STSBenchmark-dev": "sts-dev.csv", "STSBenchmark-test": "sts-test.csv"}
_SICK_FILES = {"SICK-dev": "SICK_trial.txt", "SICK-test": "SICK_test_annotated.txt"}


@dataclass(frozen=True)
class STSPairs:
    """Sentence pairs and their gold similarity scores (0-5), one entry per pair."""

    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray


# ----------------------------------------------------------------------------------------------- loading
def load_sts_task(name: str, data_dir: str | Path | None = None) -> dict[str, STSPairs]:
    """Read one STS data set from SentEval's layout: {subset: pairs}.

    'STS12' ... 'STS16' give one entry per subset file (STS.input.<subset>.txt / STS.gs.<subset>.txt), with
    the pairs whose gold score is empty dropped; 'STSBenchmark-dev', 'STSBenchmark-test', 'SICK-dev' and
    'SICK-test' give {"all": pairs}. All files are UTF-8 (SentEval reads them with utf8 too).
    """
    root = Path(data_dir) if data_dir is not None else sts_data_dir()
    if name in STS_YEARS:
        return _load_sts_year(root / "STS" / f"{name}-en-test")
    if name in _STSB_FILES:
        return {"all": _load_stsb(root / "STS" / "STSBenchmark" / _STSB_FILES[name])}
    if name in _SICK_FILES:
        return {"all": _load_sick(root / "SICK" / _SICK_FILES[name])}
    known = (*STS_YEARS, *_STSB_FILES, *_SICK_FILES)
    raise ConfigError(f"unknown STS task {name!r} (choose from {', '.join(known)})")


def senteval_text(sentence: str) -> str:
    # SentEval splits each sentence on whitespace and SimCSE's batcher joins the tokens with single spaces.
    return " ".join(sentence.split())


def _read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _load_sts_year(folder: Path) -> dict[str, STSPairs]:
    input_files = sorted(folder.glob("STS.input.*.txt"))
    if not input_files:
        raise FileNotFoundError(f"no STS.input.*.txt files in {folder}")
    subsets = {}
    for input_file in input_files:
        subset = input_file.name[len("STS.input."):-len(".txt")]
        pair_lines = _read_lines(input_file)
        gold_lines = _read_lines(folder / f"STS.gs.{subset}.txt")
        if len(pair_lines) != len(gold_lines):
            raise ValueError(f"{folder.name}/{subset}: {len(pair_lines)} sentence pairs "
                             f"but {len(gold_lines)} gold lines")
        sentences1, sentences2, scores = [], [], []
        for pair_line, gold in zip(pair_lines, gold_lines):
            if not gold.strip():  # no gold score: SentEval drops the pair
                continue
            sentence1, sentence2 = pair_line.split("\t")
            sentences1.append(senteval_text(sentence1))
            sentences2.append(senteval_text(sentence2))
            scores.append(float(gold))
        subsets[subset] = STSPairs(sentences1, sentences2, np.asarray(scores, dtype=np.float64))
    return subsets


def _load_stsb(path: Path) -> STSPairs:
    # No header; tab-separated; column 4 is the score, columns 5 and 6 the sentences.
    rows = [line.strip().split("\t") for line in _read_lines(path) if line.strip()]
    return STSPairs(
        [senteval_text(row[5]) for row in rows],
        [senteval_text(row[6]) for row in rows],
        np.asarray([float(row[4]) for row in rows], dtype=np.float64),
    )


def _load_sick(path: Path) -> STSPairs:
    # A header line, then pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment.
    rows = [line.strip().split("\t") for line in _read_lines(path)[1:] if line.strip()]
    return STSPairs(
        [senteval_text(row[1]) for row in rows],
        [senteval_text(row[2]) for row in rows],
        np.asarray([float(row[3]) for row in rows], dtype=np.float64),
    )


def concatenate(pair_sets: Iterable[STSPairs]) -> STSPairs:
    """All pairs of several subsets as one set, in order: what SentEval's "all" aggregate is computed on."""
    pair_sets = list(pair_sets)
    return STSPairs(
        [s for pairs in pair_sets for s in pairs.sentences1],
        [s for pairs in pair_sets for s in pairs.sentences2],
        np.concatenate([pairs.scores for pairs in pair_sets]),
    )
