"""The STS evaluation scores exactly as SentEval does, on small hand-made data sets with known answers."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sts_reference import stsb_dev, task_spearman

from raycse.errors import ConfigError
from raycse.evaluation.sts import (
    OBJECTIVES,
    SEVEN_TASKS,
    DevObjective,
    alignment_uniformity,
    build_objective,
    evaluate_encoder,
    format_table,
    load_sts_task,
    score_pairs,
    spearman_x100,
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
        pair_lines = "".join(f"{s1}\t{s2}\n" for s1, s2, _ in rows)
        (folder / f"STS.input.{subset}.txt").write_text(pair_lines, encoding="utf-8")
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
    figure = task_spearman(encode, "STS12", data_dir=senteval_dir)

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
    task_spearman(encode, "STS12", data_dir=senteval_dir)
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


def test_the_stsb_dev_objective_is_reusable_and_agrees_with_scipy(senteval_dir):
    by_hand = spearmanr([0.95, 0.9, 0.2, 0.6, 0.4, 0.85, 1.0], [5.0, 4.0, 0.4, 4.2, 1.2, 4.6, 5.0]).correlation * 100
    objective = build_objective("stsb_dev", data_dir=senteval_dir)
    assert objective(AngleEncoder())["stsb_dev"] == pytest.approx(by_hand, abs=1e-4)
    assert objective(AngleEncoder())["stsb_dev"] == pytest.approx(by_hand, abs=1e-4)  # reusable
    assert stsb_dev(AngleEncoder(), data_dir=senteval_dir) == pytest.approx(by_hand, abs=1e-4)


def test_spearman_x100():
    assert spearman_x100([0.1, 0.2, 0.3], [1, 2, 3]) == pytest.approx(100.0)
    assert spearman_x100([0.3, 0.2, 0.1], [1, 2, 3]) == pytest.approx(-100.0)


def test_spearman_x100_is_scipy_s_figure_to_the_last_bit_ties_and_all():
    """numpy's ranks and correlation, not scipy's import: the same number exactly, so that no recorded figure (the
    shipped untouched figures, a resumed trial's curve) moves; NaN where scipy's is NaN."""
    import warnings

    rng = np.random.default_rng(0)
    for case in range(300):
        n = int(rng.integers(2, 200))
        predicted = rng.integers(0, 6, n).astype(float) if case % 3 == 0 else rng.normal(size=n)  # many ties
        gold = np.round(rng.uniform(0, 5, n), int(rng.integers(0, 3)))  # STS gold: a few decimals, ties
        assert spearman_x100(predicted, gold) == spearmanr(predicted, gold).correlation * 100, case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns of the constant input
        for predicted, gold in (([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]), ([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]),
                                ([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0])):
            assert np.isnan(spearmanr(predicted, gold).correlation) and np.isnan(spearman_x100(predicted, gold))


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
        assert results[task] == pytest.approx(task_spearman(AngleEncoder(), task, data_dir=senteval_dir))
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


# ------------------------------------------------------------------------------------ dev objectives
class Recorded:
    """A real encode function that also records the sentence lists it was given."""

    def __init__(self, encode):
        self.encode, self.calls = encode, []

    def __call__(self, sentences: list[str]) -> torch.Tensor:
        self.calls.append(list(sentences))
        return self.encode(sentences)


@pytest.fixture(scope="module")
def tiny_encode(tiny_bert_dir):
    from raycse.encoder.model import Encoder

    return Encoder.from_pretrained(tiny_bert_dir, pooler="avg").encode


def test_objective_names():
    assert OBJECTIVES == ("stsb_dev", "sts_dev_avg")


def test_sts_dev_avg_on_hand_made_data_is_the_mean_of_both_dev_figures(senteval_dir):
    encode = AngleEncoder()
    objective = build_objective("sts_dev_avg", data_dir=senteval_dir)
    assert (objective.name, objective.result_keys) == ("sts_dev_avg", ("objective", "stsb_dev", "sickr_dev"))
    results = objective(encode)
    stsb = spearmanr([0.95, 0.9, 0.2, 0.6, 0.4, 0.85, 1.0], [5.0, 4.0, 0.4, 4.2, 1.2, 4.6, 5.0]).correlation * 100
    sickr = spearmanr([0.3, 0.9, 0.6], [1.5, 4.9, 2.0]).correlation * 100
    assert list(results) == ["objective", "stsb_dev", "sickr_dev"]
    assert results["stsb_dev"] == pytest.approx(stsb, abs=1e-4)
    assert results["sickr_dev"] == pytest.approx(sickr, abs=1e-4)
    assert results["objective"] == pytest.approx((stsb + sickr) / 2, abs=1e-4)
    assert len(encode.calls) == 1 and len(encode.calls[0]) == len(set(encode.calls[0]))
    objective(encode)  # reusable: each call encodes the same distinct sentences once
    assert encode.calls[1] == encode.calls[0]


def test_stsb_dev_and_sts_dev_avg_on_a_real_encoder(tiny_encode):
    stsb = build_objective("stsb_dev")
    assert (stsb.name, stsb.result_keys) == ("stsb_dev", ("objective", "stsb_dev"))
    stsb_results = stsb(tiny_encode)
    assert list(stsb_results) == ["objective", "stsb_dev"]
    assert stsb_results["objective"] == stsb_results["stsb_dev"]
    assert stsb_results["stsb_dev"] == pytest.approx(stsb_dev(tiny_encode), abs=1e-3)

    recorded = Recorded(tiny_encode)
    results = build_objective("sts_dev_avg")(recorded)
    assert len(recorded.calls) == 1  # STS-B dev and SICK-R dev in ONE encode call, each sentence once
    dev_sentences = {s for split in ("STSBenchmark-dev", "SICK-dev") for pairs in load_sts_task(split).values()
                     for s in (*pairs.sentences1, *pairs.sentences2)}
    assert sorted(recorded.calls[0]) == sorted(dev_sentences)
    assert build_objective("sts_dev_avg").sentences == recorded.calls[0]
    separately = {key: task_spearman(tiny_encode, key) for key in ("stsb_dev", "sickr_dev")}
    assert results["stsb_dev"] == pytest.approx(separately["stsb_dev"], abs=1e-3)
    assert results["sickr_dev"] == pytest.approx(separately["sickr_dev"], abs=1e-3)
    assert results["objective"] == pytest.approx((separately["stsb_dev"] + separately["sickr_dev"]) / 2, abs=1e-3)
    assert results["stsb_dev"] != pytest.approx(results["sickr_dev"], abs=1e-3)  # so the mean is not trivially either


DEV_ROWS = [  # (sentence 1, sentence 2, gold), with a quoted word and a sentence paired with itself
    ("a man is playing a guitar .", "a band plays music on a stage .", 3.8),
    ("a woman, smiling, is slicing an onion .", "someone is cooking pasta in a kitchen .", 2.5),
    ("the cat sits on the mat .", "two dogs are running through a field .", 1.2),
    ("stocks fell sharply on monday .", "the government announced new taxes .", 1.6),
    ("a child is riding a horse .", "a boy is reading a book under a tree .", 1.0),
    ("a plane is taking off .", "the train arrived late at the station .", 2.0),
    ("the football match ended in a draw .", "rain is expected for the weekend .", 0.2),
    ('a girl is painting a "picture" .', "the scientist measured the temperature .", 0.4),
    ("a man is playing a guitar .", "a man is playing a guitar .", 5.0),
]


def _by_hand(encode, rows) -> float:
    """Spearman x100 of the rows' cosines, each pair encoded on its own, ranked by scipy."""
    cosines = [float(torch.nn.functional.cosine_similarity(*encode([a, b]).double(), dim=0)) for a, b, _ in rows]
    return spearmanr(cosines, [gold for _, _, gold in rows]).correlation * 100


def test_dev_file_tsv_with_default_columns(tmp_path, tiny_encode):
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\tsource\n"
                   + "".join(f"{a}\t{b}\t{gold}\tmine\n" for a, b, gold in DEV_ROWS) + "\n", encoding="utf-8")
    objective = build_objective(str(dev))
    assert isinstance(objective, DevObjective)
    assert (objective.name, objective.description) == ("dev_file", str(dev))
    assert objective.result_keys == ("objective", "dev_file")
    # quotes are literal in a TSV
    assert objective.pairs["dev_file"].sentences1[7] == 'a girl is painting a "picture" .'
    recorded = Recorded(tiny_encode)
    results = objective(recorded)
    assert results["objective"] == results["dev_file"] == pytest.approx(_by_hand(tiny_encode, DEV_ROWS), abs=1e-6)
    assert len(recorded.calls) == 1 and len(recorded.calls[0]) == 16  # 18 sentences, 16 distinct
    assert objective(tiny_encode) == results


def test_dev_file_csv_with_custom_columns(tmp_path, tiny_encode):
    dev = tmp_path / "my dev.CSV"
    lines = ["gold, left ,right"]
    lines += [f'{gold},"{a}","{b}"'.replace('"picture"', '""picture""') for a, b, gold in DEV_ROWS]
    dev.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    objective = build_objective(str(dev), columns="left, right,gold")
    assert objective.pairs["dev_file"].sentences1 == [a for a, _, _ in DEV_ROWS]
    assert objective(tiny_encode)["dev_file"] == pytest.approx(_by_hand(tiny_encode, DEV_ROWS), abs=1e-6)
    assert objective.pairs["dev_file"].scores.tolist() == [gold for _, _, gold in DEV_ROWS]


def _write(tmp_path, name: str, content) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


GOOD_TSV = "sentence1\tsentence2\tscore\na b\tc d\t1.0\ne f\tg h\t2.0\n"


@pytest.mark.parametrize(
    "name, content, columns, expected",
    [
        (None, None, None, "objective: 'xyz' is neither stsb_dev, sts_dev_avg nor an existing file"),
        ("dev.tsv", b"sentence1\tsentence2\tscore\na b\tc d\t1.0\ncaf\xe9\tg h\t2.0\n", None,
         "{path}: line 3 is not valid UTF-8 (byte 0xe9)"),
        ("dev.tsv", "sentence1\tsentence_2\tscore\na b\tc d\t1.0\n", None,
         "{path}: no column 'sentence2' (columns found: 'sentence1', 'sentence_2', 'score')"),
        ("dev.csv", "s1,s2,gold\na b,c d,1.0\ne f,g h,high\n", "s1,s2,gold",
         "{path}, line 3: score 'high' (column 'gold') is not a finite number"),
        ("dev.tsv", "sentence1\tsentence2\tscore\na b\tc d\tnan\n", None,
         "{path}, line 2: score 'nan' (column 'score') is not a finite number"),
        ("dev.tsv", "sentence1\tsentence2\tscore\na b\tc d\t1.0\n\n", None,
         "{path} has 1 sentence pair(s): a Spearman correlation needs at least 2"),
        ("dev.tsv", "sentence1\tsentence2\tscore\na b\tc d\t3\ne f\tg h\t3.0\n", None,
         "{path}: every gold score is 3, so their Spearman correlation is undefined"),
        ("dev.tsv", "sentence1\tsentence2\tscore\na b\t\t1.0\ne f\tg h\t2.0\n", None,
         "{path}, line 2: no value in column 'sentence2'"),
        ("dev.tsv", "", None, "{path} is empty: it needs a header row naming the columns sentence1, sentence2, score"),
        ("dev.json", GOOD_TSV, None, "{path}: unknown extension '.json' (a development file is .tsv, .txt or .csv)"),
        ("dev.tsv", GOOD_TSV, "sentence1,sentence2",
         ("objective_columns: 'sentence1,sentence2' is not three distinct comma-separated column names "
          "(sentence 1, sentence 2, gold score; e.g. 'sentence1,sentence2,score')")),
        ("dev.tsv", GOOD_TSV, "a,,b", "objective_columns: 'a,,b' is not three distinct"),
        ("dev.tsv", GOOD_TSV, "a,a,b", "objective_columns: 'a,a,b' is not three distinct"),
        ("dev.tsv", GOOD_TSV, "a,b,c,d", "objective_columns: 'a,b,c,d' is not three distinct"),
    ],
)
def test_dev_file_errors_name_the_culprit(tmp_path, name, content, columns, expected):
    spec = "xyz" if name is None else _write(tmp_path, name, content)
    with pytest.raises(ConfigError) as err:
        build_objective(spec, columns=columns)
    message = str(err.value)
    assert message.startswith(expected.format(path=f"objective file {spec!r}"))
    assert "\n" not in message


def test_columns_only_apply_to_a_file():
    with pytest.raises(ConfigError,
                       match="^objective_columns: 'a,b,c' only applies to a development file, not to stsb_dev$"):
        build_objective("stsb_dev", columns="a,b,c")


def test_a_good_dev_file_reads(tmp_path):
    pairs = build_objective(_write(tmp_path, "dev.txt", GOOD_TSV)).pairs["dev_file"]
    assert (pairs.sentences1, pairs.sentences2, pairs.scores.tolist()) == (["a b", "e f"], ["c d", "g h"], [1.0, 2.0])


def test_the_stsb_dev_objective_keeps_its_pairs(senteval_dir):
    pairs = build_objective("stsb_dev", data_dir=senteval_dir).pairs["stsb_dev"]
    assert pairs.scores.tolist() == [5.0, 4.0, 0.4, 4.2, 1.2, 4.6, 5.0]
