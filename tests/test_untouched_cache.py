"""The untouched model's figures kept between searches: the fingerprint follows the model's bytes and the data,
the figures come back as they were stored, and `raycse cache clear` forgets them (in the session's temporary
cache folder, tests/conftest.py)."""
from __future__ import annotations

import shutil

import pytest
from benchmark_modules import load_script

from raycse.cli import main
from raycse.evaluation import untouched_cache
from raycse.files import CACHE_ENV, cache_dir


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def key_of(model, objective="stsb_dev", **changes):
    args = dict(objective_columns=None, poolers=["cls_before_pooler"], test_pooler="cls_before_pooler",
                trust_remote_code=False, device="cpu")
    args.update(changes)
    return untouched_cache.fingerprint(str(model), objective, **args)


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "raycse"


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
    assert untouched_cache.recall("k1") is None
    untouched_cache.store("k1", scores)
    assert untouched_cache.recall("k1") == scores
    (cache / "untouched" / "k2.json").write_text("{half a file")
    assert untouched_cache.recall("k2") is None  # unreadable: scored again
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"removed 2 cached figure files from {cache}\n"
    assert untouched_cache.recall("k1") is None and not list((cache / "untouched").iterdir())
    assert main(["cache", "clear"]) == 0 and "removed 0 cached figure files" in capsys.readouterr().out



def test_every_packaged_space_file_finds_its_untouched_figures_shipped():
    """The package carries the bundled model's untouched figures for each packaged space file's CPU budget, under
    the fingerprint a search computes on this install: a change to the model, the STS files, the pinned versions, a
    space file's objective or poolers, or the scoring (FORMAT) fails here until scripts/untouched_figures.py has been
    run again. Each record holds what a search stores: the objective by pooler and the seven test tasks."""
    keys = load_script("untouched_figures").wanted()
    missing = [found["spaces"] for key, found in keys.items() if untouched_cache.shipped(key) is None]
    assert not missing, f"no shipped untouched figures for {missing}: run python scripts/untouched_figures.py"
    assert sorted(p.stem for p in untouched_cache.SHIPPED_DIR.glob("*.json")) == sorted(keys)  # none stale
    for key in keys:
        scores = untouched_cache.shipped(key)
        assert set(scores["test"]) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark",
                                       "SICKRelatedness", "avg"}
        assert set(scores) == {"by_pooler", "test"} and scores["by_pooler"]
        assert all("objective" in figures for figures in scores["by_pooler"].values())


@pytest.mark.slow
def test_the_shipped_objective_is_what_scoring_the_bundled_model_gives():
    """The focal CPU budget's shipped objective (STS-B dev) is the bundled model's, scored now as a search's one-CPU
    scoring task scores it (one thread)."""
    import torch

    from raycse.driver.stages.baseline import untouched_scoring
    from raycse.encoder.model import Encoder, encode_fn
    from raycse.evaluation.sts import build_objective

    keys = load_script("untouched_figures").wanted()
    (key,) = [key for key, found in keys.items() if "focal" in found["spaces"]]
    plan = keys[key]["plan"]
    _, poolers, _ = untouched_scoring(plan)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        encoder = Encoder.from_pretrained(plan.base.model)
        figure = build_objective(plan.base.objective, None)(encode_fn(encoder, poolers[0]))["objective"]
    finally:
        torch.set_num_threads(threads)
    assert figure == pytest.approx(untouched_cache.shipped(key)["by_pooler"][poolers[0]]["objective"], abs=1e-6)
