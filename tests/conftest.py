"""Shared fixtures: small real things (a tiny randomly initialised BERT, a few sentences), never mocks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

# Hypothesis (tests/test_fuzz_inputs.py): "ci", a fixed seed and a budget that runs in CI, unless
# `--hypothesis-profile=long` (or RAYCSE_FUZZ_PROFILE=long) asks for the long run (> 5,000 generated inputs). No
# example database: the fuzzer checks that the working directory stays byte-for-byte unchanged, and a database is a
# directory that Hypothesis would write.
_FUZZ = {"derandomize": True, "deadline": None, "database": None, "print_blob": False,
         "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                   HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=60, **_FUZZ)
settings.register_profile("long", max_examples=1000, **_FUZZ)
settings.load_profile(os.environ.get("RAYCSE_FUZZ_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with random weights and the packaged MiniLM's tokenizer, saved to disk."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from raycse.encoder.loading import resolve_model_path

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    return [
        "a man is playing a guitar .",
        "a woman is slicing an onion .",
        "the cat sits on the mat .",
        "stocks fell sharply on monday .",
        "a child is riding a horse .",
        "the government announced new taxes .",
        "two dogs are running through a field .",
        "a plane is taking off .",
        "someone is cooking pasta in a kitchen .",
        "the football match ended in a draw .",
        "a boy is reading a book under a tree .",
        "rain is expected for the weekend .",
        "a band plays music on a stage .",
        "the scientist measured the temperature .",
        "a girl is painting a picture .",
        "the train arrived late at the station .",
    ]
