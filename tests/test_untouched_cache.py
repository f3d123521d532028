"""The untouched model's figures kept between searches: the fingerprint follows the model's bytes and the data,
the figures come back as they were stored, and `raycse cache clear` forgets them (in the session's temporary
cache folder, tests/conftest.py)."""
from __future__ import annotations

import shutil

import pytest

from raycse.cli import main
from raycse.evaluation import untouched_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(untouched_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def key_of(model, objective="stsb_dev", **changes):
    args = dict(objective_columns=None, poolers=["cls_before_pooler"], test_pooler="cls_before_pooler",
                trust_remote_code=False, device="cpu")
    args.update(changes)
    return untouched_cache.fingerprint(str(model), objective, **args)


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(untouched_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert untouched_cache.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(untouched_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert untouched_cache.cache_dir() == tmp_path / "xdg" / "raycse"


def test_the_fingerprint_changes_with_the_model_bytes_the_objective_and_the_settings(tiny_bert_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_bert_dir, copy)
    key = key_of(copy)
    assert key == key_of(tiny_bert_dir)  # the files' bytes, not the folder's name
    assert key != key_of(copy, poolers=["avg"]) and key != key_of(copy, test_pooler=None)
    assert key != key_of(copy, device="cuda") and key != key_of(copy, objective="sts_dev_avg")
    dev = tmp_path / "dev.tsv"
    dev.write_text("a\tb\t1.0\n")
    with_file = key_of(copy, objective=str(dev))
    dev.write_text("a\tb\t2.0\n")
    assert key_of(copy, objective=str(dev)) != with_file  # a development file: its bytes
    config = copy / "config.json"
    config.write_text(config.read_text().replace('"hidden_act"', '"hidden_act" ', 1))
    assert key_of(copy) != key
    assert key_of("some-org/some-hub-model") is None  # not a local folder: scored every time


def test_the_sts_sets_come_from_raycse_sts_data_and_the_fingerprint_follows_them(tiny_bert_dir, few_sts_pairs,
                                                                                  monkeypatch):
    from raycse.evaluation.tasks import STS_DATA_ENV, load_sts_task

    bundled, key = load_sts_task("STSBenchmark-dev")["all"], key_of(tiny_bert_dir)
    monkeypatch.setenv(STS_DATA_ENV, str(few_sts_pairs))
    few = load_sts_task("STSBenchmark-dev")["all"]
    assert len(few.scores) == 64 < len(bundled.scores) and few.sentences1 == bundled.sentences1[:64]
    assert key_of(tiny_bert_dir) != key  # other STS files: figures of their own


def test_stored_figures_come_back_and_clear_forgets_them(cache, capsys):
    scores = {"by_pooler": {"cls_before_pooler": {"objective": 61.25, "stsb_dev": 61.25}},
              "test": {"STS12": 40.5, "avg": 50.125}}
    assert untouched_cache.load("k1") is None
    untouched_cache.store("k1", scores)
    assert untouched_cache.load("k1") == scores
    (cache / "untouched" / "k2.json").write_text("{half a file")
    assert untouched_cache.load("k2") is None  # unreadable: scored again
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"removed 2 cached figure files from {cache}\n"
    assert untouched_cache.load("k1") is None and not list((cache / "untouched").iterdir())
    assert main(["cache", "clear"]) == 0 and "removed 0 cached figure files" in capsys.readouterr().out
