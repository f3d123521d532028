"""The STS evaluation scores exactly as SentEval does, on small hand-made data sets with known answers."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from raycse.errors import ConfigError
from raycse.evaluation import (
    SEVEN_TASKS,
    StsbDevEvaluator,
    alignment_uniformity,
    evaluate_encoder,
    format_table,
    load_sts_task,
    score_pairs,
    spearman_x100,
    sts_task_spearman,
    stsb_dev_spearman,
)


# ------------------------------------------------------------------------------------ hand-made data
class AngleEncoder:
    """A real encode function: sentence 'a<degrees>' -> the 2-d unit vector at that angle.

    The cosine of a pair is then cos(difference of angles), known in advance. Every call is recorded.
    """

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, sentences: list[str]) -> torch.Tensor:
        self.calls.append(list(sentences))
        radians = torch.tensor([math.radians(float(s.split()[0][1:])) for s in sentences], dtype=torch.float64)
        return torch.stack([radians.cos(), radians.sin()], dim=1).float()


def pair_with_cosine(name: str, cosine: float) -> tuple[str, str]:
    """Two sentences whose AngleEncoder embeddings have the given cosine (the name keeps them distinct)."""
    return f"a0 {name}", f"a{math.degrees(math.acos(cosine)):.6f} {name}"


def write_sts_year(folder: Path, subsets: dict[str, list[tuple[str, str, str]]]) -> None:
    """SentEval layout: STS.input.<subset>.txt (two sentences, tab) and STS.gs.<subset>.txt (score or empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    for subset, rows in subsets.items():
        (folder / f"STS.input.{subset}.txt").write_text("".join(f"{s1}\t{s2}\n" for s1, s2, _ in rows), encoding="utf-8")
        (folder / f"STS.gs.{subset}.txt").write_text("".join(f"{gold}\n" for _, _, gold in rows), encoding="utf-8")


def rows_with_cosines(prefix: str, cosines: list[float], golds: list[str]) -> list[tuple[str, str, str]]:
    return [(*pair_with_cosine(f"{prefix}{i}", c), gold) for i, (c, gold) in enumerate(zip(cosines, golds))]


# Two subsets, each perfectly ranked on its own (Spearman 100 each), but not when concatenated: the
# "all" aggregate must come out below 100 while the mean of the per-subset figures is exactly 100.
ALPHA = rows_with_cosines("alpha", [0.9, 0.8, 0.7, 0.6], ["5.0", "4.0", "3.0", "2.0"])
BETA = rows_with_cosines("beta", [0.5, 0.4, 0.3, 0.2], ["4.8", "3.5", "2.5", "1.0"])
UNSCORED = ("a0 dropped", "a90 dropped", "")  # an empty gold line: SentEval drops the pair


@pytest.fixture
def senteval_dir(tmp_path) -> Path:
    """Every file the evaluation reads, tiny, in SentEval's layout."""
    root = tmp_path / "senteval"
    write_sts_year(root / "STS" / "STS12-en-test", {"alpha": [ALPHA[0], ALPHA[1], UNSCORED, ALPHA[2], ALPHA[3]],
                                                     "beta": BETA})
    for year, shift in zip(("STS13", "STS14", "STS15", "STS16"), (0.01, 0.02, 0.03, 0.04)):
        cosines = [0.9 - shift, 0.1, 0.5 + shift, 0.3, 0.7]
        write_sts_year(root / "STS" / f"{year}-en-test",
                       {"only": rows_with_cosines(year, cosines, ["4.5", "0.5", "2.0", "3.0", "1.0"])})
    stsb = root / "STS" / "STSBenchmark"
    stsb.mkdir(parents=True)
    for split, cosines, golds in (
        ("dev", [0.95, 0.9, 0.2, 0.6, 0.4, 0.85], [5.0, 4.0, 0.4, 4.2, 1.2, 4.6]),
        ("test", [0.1, 0.8, 0.5, 0.6], [0.2, 4.4, 3.0, 2.1]),
    ):
        lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{gold:.3f}\t{s1}\t{s2}\n"
                 for i, ((s1, s2), gold) in enumerate(
                     (pair_with_cosine(f"stsb-{split}{i}", c), g) for i, (c, g) in enumerate(zip(cosines, golds)))]
        # the same sentence on both sides of a pair and in two pairs: encoded once all the same
        lines.append(f"main-captions\tMSRvid\t2012test\t9999\t5.000\ta0 stsb-{split}0\ta0 stsb-{split}0\n")
        (stsb / f"sts-{split}.csv").write_text("".join(lines), encoding="utf-8")
    sick = root / "SICK"
    sick.mkdir(parents=True)
    for name, cosines, golds in (("SICK_trial.txt", [0.3, 0.9, 0.6], [1.5, 4.9, 2.0]),
                                 ("SICK_test_annotated.txt", [0.2, 0.7, 0.5, 0.99], [1.0, 3.5, 3.6, 4.5])):
        header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
        body = "".join(f"{i}\t{s1}\t{s2}\t{gold}\tNEUTRAL\r\n"  # the test file has Windows line ends
                       for i, ((s1, s2), gold) in enumerate(
                           (pair_with_cosine(f"{name}{i}", c), g) for i, (c, g) in enumerate(zip(cosines, golds))))
        (sick / name).write_text(header + body, encoding="utf-8")
    return root


# ------------------------------------------------------------------------------------ the "all" aggregate
def test_sts_all_aggregate_is_spearman_over_the_concatenation(senteval_dir):
    encode = AngleEncoder()
    figure = sts_task_spearman(encode, "STS12", data_dir=senteval_dir)

    predicted = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]  # alpha then beta, the unscored pair left out
    gold = [5.0, 4.0, 3.0, 2.0, 4.8, 3.5, 2.5, 1.0]
    by_hand = spearmanr(predicted, gold).correlation * 100
    assert figure == pytest.approx(by_hand, abs=1e-9)
    mean_of_subsets = np.mean([spearmanr(predicted[:4], gold[:4]).correlation,
                               spearmanr(predicted[4:], gold[4:]).correlation]) * 100
    assert mean_of_subsets == pytest.approx(100.0)
    assert figure < 95.0  # so the aggregate is not the mean of the subsets' figures


def test_pairs_with_an_empty_gold_score_are_dropped(senteval_dir):
    subsets = load_sts_task("STS12", data_dir=senteval_dir)
    assert sorted(subsets) == ["alpha", "beta"]
    assert len(subsets["alpha"].scores) == 4
    assert "a0 dropped" not in subsets["alpha"].sentences1

    encode = AngleEncoder()
    sts_task_spearman(encode, "STS12", data_dir=senteval_dir)
    assert not any("dropped" in sentence for call in encode.calls for sentence in call)


def test_bundled_data_has_senteval_pair_counts():
    """The bundled files give the pair counts SentEval reports (STS15/16 after dropping empty gold scores)."""
    counts = {name: sum(len(p.scores) for p in load_sts_task(name).values())
              for name in ("STS12", "STS13", "STS14", "STS15", "STS16",
                           "STSBenchmark-dev", "STSBenchmark-test", "SICK-dev", "SICK-test")}
    assert counts == {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186,
                      "STSBenchmark-dev": 1500, "STSBenchmark-test": 1379, "SICK-dev": 500, "SICK-test": 4927}
    stsb_dev = load_sts_task("STSBenchmark-dev")["all"]
    assert stsb_dev.sentences1[0] == "a man with a hard hat is dancing ."
    assert stsb_dev.scores[0] == 5.0


def test_unknown_task_is_a_config_error():
    with pytest.raises(ConfigError, match="STS17"):
        load_sts_task("STS17")


# ------------------------------------------------------------------------------------ scoring
def test_score_pairs_gives_cosines_and_encodes_each_distinct_sentence_once(senteval_dir):
    pairs = load_sts_task("STSBenchmark-dev", data_dir=senteval_dir)["all"]
    encode = AngleEncoder()
    cosines = score_pairs(encode, pairs)

    np.testing.assert_allclose(cosines, [0.95, 0.9, 0.2, 0.6, 0.4, 0.85, 1.0], atol=1e-6)
    assert len(encode.calls) == 1
    encoded = encode.calls[0]
    assert len(encoded) == len(set(encoded)) == len(set(pairs.sentences1) | set(pairs.sentences2))


def test_stsb_dev_spearman_and_the_reusable_evaluator_agree_with_scipy(senteval_dir):
    by_hand = spearmanr([0.95, 0.9, 0.2, 0.6, 0.4, 0.85, 1.0], [5.0, 4.0, 0.4, 4.2, 1.2, 4.6, 5.0]).correlation * 100
    evaluator = StsbDevEvaluator(data_dir=senteval_dir)
    assert evaluator(AngleEncoder()) == pytest.approx(by_hand, abs=1e-4)
    assert evaluator(AngleEncoder()) == pytest.approx(by_hand, abs=1e-4)  # reusable
    assert stsb_dev_spearman(AngleEncoder(), data_dir=senteval_dir) == pytest.approx(by_hand, abs=1e-4)


def test_spearman_x100():
    assert spearman_x100([0.1, 0.2, 0.3], [1, 2, 3]) == pytest.approx(100.0)
    assert spearman_x100([0.3, 0.2, 0.1], [1, 2, 3]) == pytest.approx(-100.0)


def test_alignment_and_uniformity_follow_simcse_definitions(senteval_dir):
    encode = AngleEncoder()
    alignment, uniformity = alignment_uniformity(encode, data_dir=senteval_dir)

    pairs = load_sts_task("STSBenchmark-dev", data_dir=senteval_dir)["all"]
    vectors = dict(zip(encode.calls[0], torch.nn.functional.normalize(encode(encode.calls[0]).double(), dim=1)))
    # alignment: pairs with gold >= 4 (issue 2's contract) -> gold 5.0, 4.2, 4.6, the identical pair (5.0) and the
    # pair at exactly 4.0, which SimCSE's "higher than 4" would leave out
    positive = [(a, b) for a, b, gold in zip(pairs.sentences1, pairs.sentences2, pairs.scores) if gold >= 4]
    assert len(positive) == 5
    expected_alignment = np.mean([float((vectors[a] - vectors[b]).pow(2).sum()) for a, b in positive])
    # uniformity: every unordered pair of distinct sentences once
    sentences = list(vectors)
    distances = [float((vectors[sentences[i]] - vectors[sentences[j]]).pow(2).sum())
                 for i in range(len(sentences)) for j in range(i + 1, len(sentences))]
    expected_uniformity = math.log(np.mean(np.exp(-2.0 * np.array(distances))))
    assert alignment == pytest.approx(expected_alignment, abs=1e-6)
    assert uniformity == pytest.approx(expected_uniformity, abs=1e-6)


# ------------------------------------------------------------------------------------ the whole report
def test_evaluate_all_encodes_once_and_matches_each_figure_alone(senteval_dir):
    encode = AngleEncoder()
    results = evaluate_encoder(encode, "all", data_dir=senteval_dir)

    assert list(results) == ["stsb_dev", "sickr_dev", *SEVEN_TASKS, "avg", "alignment", "uniformity"]
    assert len(encode.calls) == 1
    assert len(encode.calls[0]) == len(set(encode.calls[0]))
    for task in ("stsb_dev", "sickr_dev", *SEVEN_TASKS):
        assert results[task] == pytest.approx(sts_task_spearman(AngleEncoder(), task, data_dir=senteval_dir))
    assert results["avg"] == pytest.approx(np.mean([results[task] for task in SEVEN_TASKS]))
    assert (results["alignment"], results["uniformity"]) == pytest.approx(
        alignment_uniformity(AngleEncoder(), data_dir=senteval_dir))
    # SICK-R test by hand (cosines are the pairs' design values)
    assert results["SICKRelatedness"] == pytest.approx(
        spearmanr([0.2, 0.7, 0.5, 0.99], [1.0, 3.5, 3.6, 4.5]).correlation * 100, abs=1e-4)


def test_evaluate_task_selections(senteval_dir):
    assert list(evaluate_encoder(AngleEncoder(), "stsb-dev", data_dir=senteval_dir)) == ["stsb_dev"]
    assert list(evaluate_encoder(AngleEncoder(), "sts", data_dir=senteval_dir)) == [*SEVEN_TASKS, "avg"]
    with pytest.raises(ConfigError, match="stsb-dev"):
        evaluate_encoder(AngleEncoder(), "everything", data_dir=senteval_dir)


def test_format_table_reads_like_table_2():
    results = {"stsb_dev": 79.731463, "sickr_dev": 70.0, "STS12": 68.0, "STS13": 80.456, "STS14": 74.0,
               "STS15": 80.0, "STS16": 78.0, "STSBenchmark": 76.5, "SICKRelatedness": 72.25, "avg": 75.6,
               "alignment": 0.2345, "uniformity": -2.3456}
    table = format_table(results, title="minilm (avg)")
    lines = table.splitlines()
    assert lines[0] == "minilm (avg)"
    assert lines[1].split() == ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
    assert lines[2].split() == ["68.00", "80.46", "74.00", "80.00", "78.00", "76.50", "72.25", "75.60"]
    assert "STS-B dev" in table and "79.73" in table
    assert "0.23" in table and "-2.35" in table
    assert format_table({"stsb_dev": 79.731463}, "t").splitlines()[1].split() == ["STS-B", "dev", "79.73"]
