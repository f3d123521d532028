"""An oracle for the STS figures: one task scored on its own, the plainest way (its pairs concatenated, each
sentence encoded, cosine, Spearman x100). The objectives and `evaluate_encoder` share encodings across tasks and
sets; the tests check them against this."""
from __future__ import annotations

from pathlib import Path

from raycse.evaluation.sts import SPLIT_OF_RESULT, concatenate, load_sts_task, score_pairs, spearman_x100


def task_spearman(encode, name: str, data_dir: str | Path | None = None) -> float:
    """SentEval's figure for one of the seven tasks (or 'stsb_dev' / 'sickr_dev'): Spearman over the concatenation
    of all its subsets (STSBenchmark and SICKRelatedness: the test split)."""
    pairs = concatenate(load_sts_task(SPLIT_OF_RESULT[name], data_dir).values())
    return spearman_x100(score_pairs(encode, pairs), pairs.scores)


def stsb_dev(encode, data_dir: str | Path | None = None) -> float:
    """STS-B dev Spearman x100, the search's objective."""
    return task_spearman(encode, "stsb_dev", data_dir)
