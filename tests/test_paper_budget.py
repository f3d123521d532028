"""The paper budget (`paper_budget:` in a space file, `--budget paper`): the papers' own model, corpus and recipe, taken
from their text; validated with the file, refused where a file states none, never chosen by `auto`, and planned by
the dry run without a download (the model's shape and the steps are known without the hub). Nothing here downloads:
the stand-ins (a local model directory, `synthetic-wiki1m`) take the paper's place where a test reads the inputs."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from raycse import api
from raycse.cli import main
from raycse.data.synthetic_corpus import WIKI1M_SENTENCES
from raycse.driver.layout import auto_budget, space_to_run
from raycse.driver.preflight import open_space_inputs
from raycse.errors import ConfigError
from raycse.settings.budgets import BUDGETS
from raycse.settings.space import load_space

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(path.stem for path in (ROOT / "search_spaces").glob("*.yaml"))
SIMCSE_DATA = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
WIKI1M = SIMCSE_DATA + "wiki1m_for_simcse.txt"
NLI = SIMCSE_DATA + "nli_for_simcse.csv"
WITHOUT_A_RECIPE = {"triplet"}  # the contrastive-learning note gives no training recipe
# (batch, lr, max_len, epochs, evaluation interval) as the papers state them (../shared/papers: Focal-InfoNCE §4 and
# Table 1, ImSimCSE §5.1, DCLR §5.1; SimCSE's supervised recipe as its released script states it)
RECIPES = {
    "focal": (64, 3e-5, 32, 1, 125), "simcse": (64, 3e-5, 32, 1, 125), "imsimcse": (64, 3e-5, 32, 1, 125),
    "barlow": (64, 3e-5, 32, 1, 125), "all": (64, 3e-5, 32, 1, 125), "dclr": (128, 3e-5, 32, 3, 150),
    "simcse-sup": (512, 5e-5, 32, 3, 125),
}


def _published_config(space):
    return space.trial_config(space.published_sampled())


def _options(**given) -> object:
    from types import SimpleNamespace

    from raycse.driver.state import BenchmarkHook

    return SimpleNamespace(**{name: None for name in ("num_samples", "max_concurrent", "seed", "choose_seeds",
                                                      "judge_seeds")}, benchmark=BenchmarkHook(),
                           confirm=True, **given)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_file_with_a_recipe_runs_the_papers_model_and_corpus_and_keeps_its_search(name):
    space = load_space(name)
    if name in WITHOUT_A_RECIPE:
        assert space.paper_budget is None
        return
    paper = space_to_run(space, _options(), "paper")
    config = _published_config(paper)
    assert paper.budget == "paper" and config.model == "bert-base-uncased"
    assert (config.sup_data, config.corpus) == ((NLI, space.base.corpus) if config.supervised else (None, WIKI1M))
    assert (config.batch_size, config.lr, config.max_len, config.epochs, config.eval_steps) == RECIPES[name]
    for family in paper.families.values():  # the paper's lr is also the published point the search starts from
        assert family.published["lr"] == config.lr
    # max_steps is stated so that the plan needs no download: the epochs over 10^6 sentences, or a bound on them
    assert config.max_steps == (config.epochs * (WIKI1M_SENTENCES // config.batch_size) if not config.supervised
                                else config.epochs * (276_499 // config.batch_size))  # "276k" triplets, at most
    # the search stage and the judging plan stay the full budget's; the default full budget stays the bundled one
    assert (paper.num_samples, paper.confirm, paper.scheduler, paper.families.keys()) == (
        space.num_samples, space.confirm, space.scheduler, space.families.keys())
    assert space_to_run(space, _options(), "full") is not None and space.base.model == "minilm"
    assert (space.base.corpus, space.base.sup_data) in (("wiki-sample", None), ("wiki-sample", "sick-train"))


def test_auto_never_picks_the_paper_budget(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert auto_budget({"GPU": 8, "CPU": 96}) == "full" and auto_budget({"CPU": 2}) == "cpu"
    assert set(BUDGETS) == {"cpu", "paper"}


GOOD = """\
loss: focal
train: {batch_size: 8, max_steps: 4, eval_steps: 2}
space:
  tau: {type: loguniform, low: 0.02, high: 0.2}
published: {tau: 0.07}
"""


@pytest.mark.parametrize("section, culprit", [
    ("paper_budget: {train: {batch_sise: 64}}", "unknown key 'paper_budget.train.batch_sise'"),
    ("paper_budget: {corpus: 3}", "paper_budget: corpus"),
    ("paper_budget: {model: ./no-such-model/}", "paper_budget: model"),
    ("paper_budget: {epochz: 1}", "paper_budget.epochz"),
    ("paper_budget: {train: {eval_steps: 8}}", "paper_budget: focal at the fixed settings: eval_steps"),
    ("paper_budget: {space: {tau: {type: loguniform, low: 0.3, high: 0.1}}}", "paper_budget.space.tau"),
])
def test_a_paper_budget_is_validated_with_its_file_and_a_mistake_names_it(tmp_path, section, culprit):
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD + section + "\n")
    with pytest.raises(ConfigError) as caught:
        load_space(path)
    assert culprit in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_without_a_paper_budget_is_refused_in_one_line_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for dry in ([], ["--dry-run", "--gpus", "1", "--step-ms", "10"]):
        assert main(["search", "--space", "triplet", "--budget", "paper", *dry]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("raycse: error: --budget: ") and "no paper_budget" in err
        assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == [], "nothing is written"
    with pytest.raises(ConfigError, match="triplet.yaml has no paper_budget"):
        api.plan("triplet", budget="paper", gpus=1, step_ms=10.0)


def _dry_run(gpus: int, capsys) -> str:
    assert main(["search", "--space", "focal", "--budget", "paper", "--dry-run", "--gpus", str(gpus),
                 "--step-ms", "12.4"]) == 0
    return capsys.readouterr().out


def test_the_dry_run_plans_the_paper_budget_on_1_and_8_gpus_without_a_download(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for gpus in (1, 8):
        out = _dry_run(gpus, capsys)
        # gpus_per_worker: auto: BERT-base at batch 64 doubles the GPU's steps a second +36% from 1 to 2 trials, +6%
        # from 2 to 4 (recorded on an H100), so two trials share a GPU
        assert "budget: paper (--budget paper); 1 worker(s) x (2 CPU, 0.5 GPU) per trial, " \
               f"{2 * gpus} at once" in out
        rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (
            ["search"], ["choose"], ["judge"], ["total"])}
        # 15,625 steps (1 epoch of 10^6 sentences at batch 64) and an evaluation every 125 of them, in every trial
        assert rows["search"][1:5] == ["16", "42", "(every", "trial)"] and rows["search"][5:7] == ["15625", "125"]
        assert rows["choose"][1:5] == ["9", "43-45", "15625", "125"]
        assert rows["judge"][1:5] == ["36", "46-63", "15625", "125"]
        assert rows["total"][1] == "62" and float(rows["total"][-1]) > 0  # the trials, and their GPU-hours
        # BERT-base's 438 MB of float32 weights, counted from its shape, not fetched from the hub
        assert re.search(r"Disk: .*[\d.]+ GB .*438 MB of weights", out), out
        assert list(tmp_path.iterdir()) == [], "nothing is created"


def test_the_paper_budget_is_opened_only_when_it_runs_and_runs_offline_on_the_stand_ins(tmp_path, tiny_bert_dir):
    corpus = tmp_path / "wiki1m-copy.txt"
    corpus.write_text("a sentence\n" * 256)
    text = (ROOT / "search_spaces" / "focal.yaml").read_text().replace(WIKI1M, str(corpus))
    text = text.replace("  model: bert-base-uncased", f"  model: {tiny_bert_dir}")
    path = tmp_path / "focal-here.yaml"
    path.write_text(text)
    space = load_space(path)
    corpus.unlink()  # what a paper budget reads is opened when that budget runs, not before every search
    open_space_inputs(space, "auto")
    with pytest.raises(ConfigError, match=r"paper_budget: focal at the fixed settings: corpus: .* does not exist"):
        open_space_inputs(space, "paper")
    # with the stand-ins: a local model directory and a million sentences recombined from the bundled sample
    stand_ins = dict(space.paper_budget, train={**space.paper_budget["train"], "corpus": "synthetic-wiki1m",
                                                "max_steps": None})
    space = dataclasses.replace(space, paper_budget=stand_ins)
    open_space_inputs(space, "paper")
    plan = api.plan(space, budget="paper", gpus=1, step_ms=12.4)
    search = next(stage for stage in plan.stages if stage.name == "search")
    assert plan.budget == "paper" and search.steps_per_trial == WIKI1M_SENTENCES // 64 == 15_625
    assert search.evals_per_trial == 125


def test_the_paper_budgets_answer_is_judged_as_a_decision_and_the_cpu_budgets_as_a_demonstration():
    from raycse.driver.confirmation import confirm_plan

    space = load_space("focal")
    paper = confirm_plan(space_to_run(space, _options(), "paper"), "paper")
    assert paper.budget == "full" and paper.judge_seeds == 18 and paper.looks == (6, 9, 12, 18)
    assert confirm_plan(space_to_run(space, _options(), "cpu"), "cpu").budget == "cpu"


# (batch, lr, epochs, max_steps, eval_steps, objective) of stage 0's SimCSE model: SimCSE's recipe (batch 64, lr 3e-5,
# 1 epoch, STS-B dev every 125 steps) at the search's scale, never the DCLR family's (batch 128, 3 epochs, sts_dev_avg)
STAGE0 = {
    "paper": (64, 3e-5, 1, 15_624, 125, "stsb_dev"),  # one epoch of the sentences the search's 3 epochs read
    "cpu": (16, 3e-5, 1, 16, 8, "stsb_dev"),  # the CPU budget's batch and steps: a demonstration's scale
    "full": (64, 3e-5, 1, None, 100, "stsb_dev"),  # one epoch of the bundled corpus, scored as often as the search
}


@pytest.mark.parametrize("budget", sorted(STAGE0))
def test_stage0_trains_the_complementary_model_on_simcses_recipe_at_the_searchs_scale(budget):
    from raycse.driver.layout import stage0_space

    dclr = space_to_run(load_space("dclr"), _options(), budget)
    assert dclr.base.objective == "sts_dev_avg" and dclr.base.batch_size in (128, 16)  # the DCLR family's own
    stage0 = stage0_space(dclr)
    config = stage0.trial_config({})
    assert list(stage0.families) == ["simcse"] and config.loss == "simcse" and config.hparams.get("tau", 0.05) == 0.05
    assert (config.batch_size, config.lr, config.epochs, config.max_steps, config.eval_steps,
            config.objective) == STAGE0[budget]
    assert (config.model, config.corpus) == (dclr.base.model, dclr.base.corpus)  # the search's model and data


def test_the_dry_run_plans_stage0_on_simcses_recipe(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--space", "dclr", "--budget", "paper", "--dry-run", "--gpus", "1", "--step-ms",
                 "12.4"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] in (["stage0"], ["search"])}
    assert rows["stage0"][1:5] == ["1", "42", "15624", "125"]  # SimCSE's epoch, scored every 125 steps
    assert rows["search"][5:7] == ["23436", "157"]  # DCLR's 3 epochs at batch 128, every 150 steps
