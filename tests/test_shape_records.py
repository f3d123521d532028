"""A GPU plan's evaluation, start-up and checkpoint terms come from a record of the model's own shape
(raycse/planning/shape_records.py, cost_figures.SHAPE_RECORDS), and the plan names it: BERT-base's from the GPU
suite's paper part, MiniLM's from the focal searches. Each record's figures are read back from its file."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import raycse
from raycse.planning import cost_figures as figures
from raycse.planning.cost_model import Figure, Trial
from raycse.planning.shape_records import nearest_sharing, record_for
from raycse.settings.space import load_space

ROOT = Path(__file__).resolve().parent.parent
TERMS = ("dev_eval", "cold_start", "checkpoint")  # the terms a record of the shape prices, where one measured them


def shape_in(record: str) -> str:
    """The model shape a record's file says it ran: the paper part's setting, or a search summary's model."""
    data = json.loads((ROOT / record).read_text())
    if "setting" in data:
        return data["setting"]["shape"]
    return "minilm" if "minilm" in data["model"].lower() else data["model"]


def record_named(figure: Figure):
    return next(r for r in figures.SHAPE_RECORDS if r.record in figure.source)


def test_a_paper_scale_plan_prices_its_evaluation_from_bert_base_s_record_and_names_it():
    """focal.yaml's paper budget on one GPU (BERT-base, two trials sharing it): an evaluation is the paper part's
    0.61 s with two trials on an H100, not MiniLM's 6.76 steps of the step (0.15 s); the printed plan names the
    record beside it."""
    from raycse.planning.dry_run import format_dry_run

    plan = raycse.plan("focal", gpus=1, budget="paper")
    rates, paper = plan.rates, figures.H100_PAPER_SEARCHES
    assert "2 a GPU" in plan.resources
    assert rates.dev_eval.value == pytest.approx(0.6133)
    assert rates.dev_eval.source == f"bert-base, 2 trial(s) sharing a GPU, recorded on an H100: {paper}"
    assert rates.cold_start.value == pytest.approx(24.44) and paper in rates.cold_start.source
    assert rates.cold_start.source.endswith(", recorded without warm workers")  # the only BERT-base start-up
    assert "warm workers" not in rates.checkpoint.source and rates.checkpoint.source == rates.dev_eval.source
    assert rates.checkpoint.value == pytest.approx(1.955, rel=0.01) and paper in rates.checkpoint.source
    for term in TERMS:
        figure = getattr(rates, term)
        assert shape_in(record_named(figure).record) == "bert-base", (term, figure.source)
    overheads = next(line for line in format_dry_run(plan).splitlines() if line.startswith("an evaluation"))
    assert re.search(r"an evaluation 0\.61 s[^()]*\(bert-base, 2 trial\(s\) sharing a GPU, recorded on an H100: "
                     + re.escape(paper) + r"\)", overheads), overheads
    # a term no BERT-base record measured (a reused worker's start-up) says whose it is
    assert rates.warm_start.source.startswith("minilm, 4 trial(s) sharing a GPU") and \
        "no record of a reused worker's start-up for a bert-base shape: minilm's" in rates.warm_start.source


@pytest.mark.parametrize(("space", "budget", "shape"), [("focal", "full", "minilm"), ("focal", "paper", "bert-base"),
                                                        ("simcse", "paper", "bert-base")])
def test_every_gpu_plan_of_a_recorded_shape_prices_its_terms_from_that_shape_s_record(space, budget, shape):
    plan = raycse.plan(space, gpus=1, budget=budget)
    for term in TERMS:
        figure = getattr(plan.rates, term)
        assert shape_in(record_named(figure).record) == shape, (term, figure.source)
        assert "no record of" not in figure.source


def test_an_evaluation_at_a_sharing_not_measured_follows_the_shape_s_recorded_step():
    """MiniLM's evaluation was recorded with four trials a GPU: with eight it is in proportion to MiniLM's step with
    eight against four (as before, 6.76 steps of the step); BERT-base's with eight, to its step with eight against
    four; a shape with no record is priced in steps of its step and says whose record gives them."""
    step = Figure(0.05, "a test's")
    eight = figures.gpu_rates(step, Figure(0.0, "eager"), None, 11_914, shape="minilm", sharing=8)
    assert eight.dev_eval.value == pytest.approx(0.04694 * figures.GPU_DEV_EVAL_STEPS)
    assert "in proportion to minilm's recorded step with 8 a GPU" in eight.dev_eval.source
    bert = figures.gpu_rates(step, Figure(0.0, "eager"), None, 11_914, shape="bert-base", sharing=8)
    assert bert.dev_eval.value == pytest.approx(1.0972 * 8 * 11.98 / 42.84, rel=1e-3)
    assert figures.gpu_rates(step, Figure(0.0, "eager"), None, 11_914, shape="bert-base",
                             sharing=1).dev_eval.value == pytest.approx(0.3647)
    other = figures.gpu_rates(step, Figure(0.0, "eager"), None, 11_914, shape="bert-large", sharing=1)
    assert other.dev_eval.value == pytest.approx(0.05 * figures.GPU_DEV_EVAL_STEPS)
    assert other.dev_eval.source.startswith("no record of an evaluation for a bert-large shape: 6.76 steps of the "
                                            f"plan's step, as in minilm, 4 trial(s) sharing a GPU, recorded on an "
                                            f"H100: {figures.H100_SEARCH}")
    # the checkpoint write scales with the plan's weights from its record's
    heavy = figures.gpu_rates(step, Figure(0.0, "eager"), 2 * figures.BERT_BASE_WEIGHT_BYTES, 1, shape="bert-base")
    assert heavy.checkpoint.value == pytest.approx(2 * figures.BERT_BASE_WRITE_S[1])


def test_the_record_chosen_is_the_shape_s_then_the_plan_s_workers():
    records = figures.SHAPE_RECORDS
    assert record_for(records, "minilm", "startup_s", True).record == figures.H100_WARM_SEARCH
    assert record_for(records, "minilm", "startup_s", False).record == figures.H100_SEARCH
    assert record_for(records, "bert-base", "startup_s", True).shape == "bert-base"
    assert record_for(records, "bert-base", "reused_s", True).record == figures.H100_WARM_SEARCH
    assert record_for((), "minilm", "eval_s", True) is None
    assert [nearest_sharing({1: 0, 2: 0, 4: 0}, k) for k in (1, 2, 3, 8)] == [1, 2, 2, 4]
    assert nearest_sharing({4: 0}, 1) == 4


def test_bert_base_s_figures_are_the_paper_part_s_record():
    """Each sharing's evaluation (evaluation seconds over evaluations), start-up, and the checkpoint write that,
    under the trainer's cadence, gives the trial's recorded checkpoint seconds: the cost model fed the recorded trial
    gives them back."""
    data = json.loads((ROOT / figures.H100_PAPER_SEARCHES).read_text())
    assert data["setting"]["shape"] == "bert-base"
    runs = {run["sharing"]: run["measured"] for run in data["runs"]}
    assert set(runs) == set(figures.BERT_BASE_EVAL_S) == set(figures.BERT_BASE_START_S) == set(
        figures.BERT_BASE_WRITE_S)
    for sharing, m in runs.items():
        assert figures.BERT_BASE_EVAL_S[sharing] == pytest.approx(m["eval_s"], abs=1e-4)
        assert figures.BERT_BASE_START_S[sharing] == pytest.approx(m["startup_s"], abs=0.01)
        evals, steps = m["evals"] // m["trials"], m["steps"][0]
        rates = dataclasses.replace(figures.gpu_rates(Figure(m["step_ms"] / 1000, "the run's"), Figure(0.0, "-"),
                                                      None, 1, shape="bert-base", sharing=sharing),
                                    dev_eval=Figure(m["eval_s"], "the run's"))
        work = steps * rates.step.value + evals * rates.dev_eval.value
        assert Trial(steps, evals).checkpoint_seconds(rates, work) == pytest.approx(m["checkpoint_s"], abs=0.005)
    assert figures.BERT_BASE_WEIGHT_BYTES == round(max(m["best_gb"] for m in runs.values()) * 1e9)


def test_a_plan_with_no_warm_workers_reads_the_records_run_without_them():
    space = dataclasses.replace(load_space("focal"), resources=dataclasses.replace(load_space("focal").resources,
                                                                                   gpus_per_worker=0.25))
    cold = raycse.plan(space, gpus=1, budget="full", warm_workers=False).rates
    assert cold.cold_start.value == figures.GPU_COLD_START_S and figures.H100_SEARCH in cold.cold_start.source
    assert cold.dev_eval.value == pytest.approx(0.03046 * figures.GPU_DEV_EVAL_STEPS)
