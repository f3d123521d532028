"""Training data: corpus and NLI readers (errors that name the file and line) and the sharded global batches."""
from __future__ import annotations

import pytest

from raycse.data.corpus import (
    BUNDLED_CORPUS,
    BUNDLED_SICK_TRIPLETS,
    SICK_TRAIN_PATH,
    GlobalBatches,
    read_corpus,
    read_nli_triplets,
    sick_triplets,
)
from raycse.errors import ConfigError


# ------------------------------------------------------------------------------------------------ corpus
def test_corpus_keeps_file_order_and_skips_blank_lines(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"first sentence .\n\n   \nsecond sentence .\r\n\t\nthird sentence .")

    assert read_corpus(str(corpus)) == ["first sentence .", "second sentence .", "third sentence ."]
    assert read_corpus(str(corpus), max_sentences=2) == ["first sentence .", "second sentence ."]


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    corpus = tmp_path / "bom.txt"
    corpus.write_bytes("\ufeffcafé au lait .\nsecond .\n".encode("utf-8"))

    assert read_corpus(str(corpus)) == ["café au lait .", "second ."]


def test_bytes_that_are_not_utf8_name_the_file_and_the_line(tmp_path):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"fine line .\n\nanother fine line .\ncaf\xe9 au lait .\n")

    with pytest.raises(ConfigError) as err:
        read_corpus(str(corpus))
    message = str(err.value)
    assert str(corpus) in message
    assert "line 4" in message  # blank lines still count: the number is the one an editor shows
    assert "0xe9" in message and "--replace-bad-bytes" in message
    assert "\n" not in message


def test_replace_bad_bytes_decodes_with_the_replacement_character(tmp_path):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"fine line .\ncaf\xe9 au lait .\n")

    assert read_corpus(str(corpus), replace_bad_bytes=True) == ["fine line .", "caf\ufffd au lait ."]


@pytest.mark.parametrize("content", [b"", b"\n\n  \n\t\n"], ids=["empty", "blank-lines-only"])
def test_empty_corpus_is_an_error(tmp_path, content):
    corpus = tmp_path / "empty.txt"
    corpus.write_bytes(content)

    with pytest.raises(ConfigError, match="empty"):
        read_corpus(str(corpus))


def test_missing_corpus_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nowhere.txt"
    with pytest.raises(ConfigError, match="nowhere.txt"):
        read_corpus(str(missing))


def test_bundled_corpus_is_the_wiki_sample():
    sentences = read_corpus(BUNDLED_CORPUS)
    assert len(sentences) == 11914
    assert all(s and s == s.strip() for s in sentences)


def test_corpus_smaller_than_a_batch_is_an_error_that_says_so():
    examples = [f"sentence {i} ." for i in range(10)]

    with pytest.raises(ConfigError) as err:
        GlobalBatches(examples, batch_size=8, seed=0, rank=0, world_size=2)
    message = str(err.value)
    assert "10 examples" in message and "fewer than one batch" in message and "16" in message

    GlobalBatches(examples, batch_size=5, seed=0, rank=0, world_size=2)  # exactly one global batch is enough


# ------------------------------------------------------------------------------------------------- NLI
def test_nli_csv_gives_triplets_and_skips_incomplete_rows(tmp_path):
    csv_file = tmp_path / "nli.csv"
    csv_file.write_text(
        "sent0,sent1,hard_neg\n"
        "a man plays guitar .,a person makes music .,nobody plays anything .\n"
        '"quoted, with comma",a sentence .,another sentence .\n'
        "incomplete row,,\n"
        "\n"
        "the cat sleeps .,an animal rests .,the cat runs .\n"
    )

    rows = read_nli_triplets(str(csv_file))
    assert rows == [
        ("a man plays guitar .", "a person makes music .", "nobody plays anything ."),
        ("quoted, with comma", "a sentence .", "another sentence ."),
        ("the cat sleeps .", "an animal rests .", "the cat runs ."),
    ]
    assert read_nli_triplets(str(csv_file), max_rows=2) == rows[:2]


def test_nli_csv_with_a_missing_column_is_an_error_naming_it(tmp_path):
    csv_file = tmp_path / "nli.csv"
    csv_file.write_text("sent0,sent1\na man plays guitar .,a person makes music .\n")

    with pytest.raises(ConfigError) as err:
        read_nli_triplets(str(csv_file))
    assert "hard_neg" in str(err.value) and str(csv_file) in str(err.value)


def test_nli_csv_without_a_complete_row_is_an_error(tmp_path):
    csv_file = tmp_path / "nli.csv"
    csv_file.write_text("sent0,sent1,hard_neg\nonly the anchor,,\n")

    with pytest.raises(ConfigError, match="no complete"):
        read_nli_triplets(str(csv_file))


def _sick_pairs() -> list[tuple[str, str, str]]:
    """(sentence_A, sentence_B, entailment_judgment) of every line of the bundled file, read by hand."""
    lines = SICK_TRAIN_PATH.read_text(encoding="utf-8").splitlines()
    assert lines[0].split("\t") == ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment"]
    # Some sentences end in a space (pair 301's sentence_B): the triplets hold them stripped.
    return [(fields[1].strip(), fields[2].strip(), fields[4]) for fields in (line.split("\t") for line in lines[1:])]


def test_sick_train_gives_148_triplets_whose_relations_the_file_states():
    assert BUNDLED_SICK_TRIPLETS == "sick-train"
    rows = read_nli_triplets(BUNDLED_SICK_TRIPLETS)
    assert len(rows) == 148 and len({premise for premise, _, _ in rows}) == 107
    pairs = _sick_pairs()
    judgments = {(a, b): judgment for a, b, judgment in pairs}
    for premise, entailment, contradiction in rows:
        assert judgments[(premise, entailment)] == "ENTAILMENT"
        assert judgments[(premise, contradiction)] == "CONTRADICTION"
    # One triplet per ENTAILMENT line whose sentence_A has a CONTRADICTION line, in file order.
    with_contradiction = {a for a, _, judgment in pairs if judgment == "CONTRADICTION"}
    used = [(a, b) for a, b, judgment in pairs if judgment == "ENTAILMENT" and a in with_contradiction]
    assert [(premise, entailment) for premise, entailment, _ in rows] == used
    assert rows == sick_triplets(SICK_TRAIN_PATH)


def test_sick_triplets_cycle_through_each_premises_contradictions_in_file_order():
    rows = read_nli_triplets(BUNDLED_SICK_TRIPLETS)
    # Pairs 2136, 3357, 5358, 5419 are its entailments, 3362 and 5359 its contradictions.
    premise = "A woman is peeling a potato"
    assert [(e, c) for p, e, c in rows if p == premise] == [
        ("A potato is being peeled by a woman", "There is no woman peeling a potato"),
        ("A potato is being peeled by a woman", "There is no lady peeling the potato"),
        ("The potato is being peeled by the lady", "There is no woman peeling a potato"),
        ("A woman is peeling food", "There is no lady peeling the potato"),
    ]
    # Pair 1 of the file is NEUTRAL: its sentence_B is in no triplet of its premise.
    assert not any(p.startswith("A group of kids is playing in a yard and an old man") for p, _, _ in rows)


def test_sick_triplets_max_rows_keeps_the_first_rows():
    rows = read_nli_triplets(BUNDLED_SICK_TRIPLETS)
    assert read_nli_triplets(BUNDLED_SICK_TRIPLETS, max_rows=10) == rows[:10]
    assert read_nli_triplets(BUNDLED_SICK_TRIPLETS, max_rows=1000) == rows
    assert rows[0] == ("A nude lady is walking in front of a crowd in body paint",
                       "A topless girl is covered in paint",
                       "There is no lady walking in body paint in front of a crowd")


def test_sick_file_without_a_usable_premise_or_with_a_short_line_is_an_error(tmp_path):
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    sick = tmp_path / "SICK_small.txt"
    sick.write_text(header + "1\ta dog runs\ta dog moves\t4.0\tENTAILMENT\n"
                    "2\ta cat sits\tno cat sits\t2.0\tCONTRADICTION\n")
    with pytest.raises(ConfigError, match="no premise with both"):
        sick_triplets(sick)
    sick.write_text(header + "1\ta dog runs\ta dog moves\t4.0\tENTAILMENT\n"
                    "\n"
                    "2\ta dog runs\tno dog moves\n")
    with pytest.raises(ConfigError) as err:
        sick_triplets(sick)
    assert str(sick) in str(err.value) and "line 4" in str(err.value)


# --------------------------------------------------------------------------------------- global batches
def test_two_worker_shards_concatenate_to_the_single_worker_batch():
    examples = [f"sentence {i}" for i in range(50)]
    b = 4
    single = GlobalBatches(examples, 2 * b, seed=3, rank=0, world_size=1)
    rank0 = GlobalBatches(examples, b, seed=3, rank=0, world_size=2)
    rank1 = GlobalBatches(examples, b, seed=3, rank=1, world_size=2)
    assert len(single) == len(rank0) == len(rank1) == 50 // 8

    for epoch in range(2):
        steps = list(zip(single.epoch(epoch), rank0.epoch(epoch), rank1.epoch(epoch)))
        assert len(steps) == 6
        for whole, first, second in steps:
            assert len(first) == len(second) == b
            assert first + second == whole

    # every step of an epoch draws distinct examples, and epochs are reshuffled
    seen = [s for batch in single.epoch(0) for s in batch]
    assert len(set(seen)) == len(seen) == 48
    assert list(single.epoch(0)) != list(single.epoch(1))
    assert list(single.epoch(0)) == list(GlobalBatches(examples, 2 * b, seed=3).epoch(0))  # seeded
    assert list(single.epoch(0)) != list(GlobalBatches(examples, 2 * b, seed=4).epoch(0))


def test_shards_of_supervised_triplets_concatenate_too():
    examples = [(f"anchor {i}", f"positive {i}", f"negative {i}") for i in range(12)]
    whole = next(GlobalBatches(examples, 6, seed=0).epoch(0))
    parts = [next(GlobalBatches(examples, 3, seed=0, rank=r, world_size=2).epoch(0)) for r in range(2)]
    assert parts[0] + parts[1] == whole
