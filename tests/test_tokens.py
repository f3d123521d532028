"""Token ids made once per search: padding them gives exactly the tensors tokenising gives, and a training on
them is the same training."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from raycse.data.tokens import data_fingerprint, share_tokens
from raycse.encoder.model import tokenize
from raycse.settings.config import TrainConfig
from raycse.training.batches import BatchTokenizer
from raycse.training.trainer import train


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.mark.parametrize("pad_to_multiple_of", [None, 8])
def test_padded_shared_ids_are_the_tokenizers_batches(tokenizer, sentences, pad_to_multiple_of):
    long_sentence = " ".join(sentences)  # longer than max_len: truncation must match too
    corpus = [*sentences, long_sentence]
    shared = share_tokens(tokenizer, corpus, 16, "fp")
    assert shared.check(tokenizer, corpus, 16)
    plain = BatchTokenizer(tokenizer, 16, first_rows=False, pad_to_multiple_of=pad_to_multiple_of)
    from_ids = dataclasses.replace(plain, shared=shared)
    for batch in ([0, 3, 16], [16], list(range(17))):
        expected = plain([corpus[i] for i in batch]).rows
        got = from_ids(batch).rows
        assert got.keys() == expected.keys()
        for key in expected:
            assert torch.equal(got[key], expected[key]), key


def test_triplets_pad_their_3n_rows_together_and_the_sent0s_alone(tokenizer, sentences):
    triplets = [(s, f"it is true that {s}", sentences[(i + 5) % len(sentences)]) for i, s in enumerate(sentences)]
    shared = share_tokens(tokenizer, triplets, 32, "fp")
    assert shared.supervised and shared.check(tokenizer, triplets, 32)
    plain = BatchTokenizer(tokenizer, 32, first_rows=True)
    from_ids = dataclasses.replace(plain, shared=shared)
    batch = [2, 7, 11]
    expected, got = plain([triplets[i] for i in batch]), from_ids(batch)
    assert (got.n, got.supervised) == (3, True)
    for key in expected.rows:
        assert torch.equal(got.rows[key], expected.rows[key])
        assert torch.equal(got.first_rows[key], expected.first_rows[key])
    sent0s = [triplets[i][0] for i in batch]
    assert torch.equal(got.first_rows["input_ids"], tokenize(tokenizer, sent0s, 32)["input_ids"])


def test_a_training_on_shared_ids_is_the_same_training(tiny_bert_dir, tokenizer, tmp_path):
    from raycse.data.corpus import load_examples

    config = TrainConfig(model=str(tiny_bert_dir), batch_size=8, lr=1e-3, max_steps=4, eval_steps=2, max_sentences=64,
                         test_eval=False, output_dir=str(tmp_path / "plain")).validate()
    plain = train(config)
    shared = share_tokens(tokenizer, load_examples(config), config.max_len, data_fingerprint(config))
    on_ids = train(dataclasses.replace(config, output_dir=str(tmp_path / "shared")), shared_tokens=shared)
    assert on_ids["dev_curve"] == plain["dev_curve"]
    # ids made for another length limit are not used: the training tokenises its own
    shorter = dataclasses.replace(config, max_len=16)
    other = share_tokens(tokenizer, load_examples(config), 16, data_fingerprint(shorter))
    again = train(dataclasses.replace(config, output_dir=str(tmp_path / "other")), shared_tokens=other)
    assert again["dev_curve"] == plain["dev_curve"]


@pytest.mark.parametrize("fast", [True, False])
def test_the_ids_made_in_chunks_are_the_tokenizers_own(tiny_bert_dir, sentences, monkeypatch, fast):
    """Through the fast tokenizer's backend (or the slow tokenizer's own call), a chunk at a time: the same ids as
    one call of the tokenizer, truncation, special tokens and odd text included."""
    from transformers import AutoTokenizer

    from raycse.data import tokens

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir, use_fast=fast)
    texts = [*sentences, "Café naïve — ünïcode", "日本語の文", " ".join(sentences), "a"]
    monkeypatch.setattr(tokens, "TOKENIZE_CHUNK", 3)  # chunk boundaries inside the list
    made = tokens.tokenize_texts(tokenizer, texts, 16)
    expected = tokenizer(texts, truncation=True, max_length=16, padding=False)
    assert [made.ids(i).tolist() for i in range(len(texts))] == expected["input_ids"]
    assert made.keys == tuple(expected.keys()) and made.flat.dtype == "int32"


def test_the_synthetic_wiki1m_stand_in_is_the_same_everywhere():
    from raycse.data.corpus import read_corpus
    from raycse.data.synthetic_corpus import WIKI1M_SENTENCES, synthetic_sentences

    sample = read_corpus("wiki-sample")
    first = synthetic_sentences(sample, count=2000, seed=0)
    assert first == synthetic_sentences(sample, count=2000, seed=0) != synthetic_sentences(sample, count=2000, seed=1)
    assert len(set(first)) > 1990 and all(first)
    words = {word for sentence in sample for word in sentence.split()}
    assert all(set(sentence.split()) <= words for sentence in first)  # made of the sample's words, nothing else
    assert WIKI1M_SENTENCES == 1_000_000
