"""A paper's reported row as every view shows it (raycse/settings/paper_rows.py): comparable exactly when the search
trains the row's model on the row's corpus, keyed on what identifies them (the model's name, the `source` the corpus
is read from), not on the words that describe the corpus; and a row whose own average disagrees with its seven tasks
carries a note wherever it is shown (the answer, the report, the dry run)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from raycse.cli import main
from raycse.driver.confirmation import configurations
from raycse.driver.layout import space_to_run
from raycse.driver.outcome import Baseline, SearchOutcome
from raycse.driver.state import BenchmarkHook
from raycse.driver.summary import search_summary
from raycse.errors import ConfigError
from raycse.planning.dry_run import paper_rows_shown
from raycse.records import SEVEN_TASKS
from raycse.reporting import tables
from raycse.settings.paper_rows import average_disagreement, paper_row_line, shown_paper_row
from raycse.settings.space import load_space

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(path.stem for path in (ROOT / "search_spaces").glob("*.yaml"))
WIKI1M = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/wiki1m_for_simcse.txt"
OPTIONS = SimpleNamespace(num_samples=None, max_concurrent=None, seed=None, choose_seeds=None, judge_seeds=None,
                          benchmark=BenchmarkHook(), confirm=True)


def answer(budget: str) -> dict:
    """The summary a focal.yaml search of that budget answers with (search_summary, the function the search calls),
    for an outcome that judged nothing: the paper's row depends only on the space the budget runs."""
    space = space_to_run(load_space("focal"), OPTIONS, budget)
    baseline = Baseline(objective=80.0, eval_pooler="avg", by_pooler={"avg": {"objective": 80.0}})
    outcome = SearchOutcome(experiment=space.experiment, name=space.experiment, parent_run_id="0", budget=budget,
                            objective=space.base.objective, baseline=baseline, trials=[], ranking=[], winner_key=None,
                            published_key=None, configurations=configurations(space, []), decision=None, verdict="",
                            timings={})
    return search_summary(outcome, space, "sqlite:///optuna.db")


def test_the_paper_budgets_answer_calls_the_papers_row_comparable_and_the_other_budgets_do_not():
    paper = answer("paper")["paper"]
    # the paper budget trains bert-base-uncased on wiki1m at its public location: the row's model and source
    assert (paper["model"], paper["source"]) == ("bert-base-uncased", WIKI1M)
    assert paper["comparable"] and paper["caption"].endswith("The same model and data as this search.")
    assert "Not comparable" not in paper_row_line(paper)
    for budget in ("cpu", "full"):
        other = answer(budget)["paper"]
        assert not other["comparable"]
        assert other["caption"].endswith("which are sentence-transformers/all-MiniLM-L6-v2 trained on wiki-sample: "
                                         "another model and other data.")
    # every shipped row is comparable under its file's paper budget, and only there (as the dry run shows them)
    for name in SHIPPED:
        space = load_space(name)
        for budget in ("paper", "cpu") if space.paper else ():
            rows = paper_rows_shown(space_to_run(space, OPTIONS, budget))
            assert rows and all(row["comparable"] == (budget == "paper") for row in rows), (name, budget)


def test_the_caption_names_what_differs_and_a_row_without_a_source_is_never_comparable():
    row = {"model": "bert-base-uncased", "corpus": "wiki1m", "source": WIKI1M, "figures": {}}
    assert shown_paper_row(row, "focal", "bert-base-uncased", WIKI1M)["comparable"]
    assert shown_paper_row(row, "focal", "roberta-base", WIKI1M)["caption"].endswith(": another model.")
    assert shown_paper_row(row, "focal", "bert-base-uncased", "wiki-sample")["caption"].endswith(": other data.")
    # the words describing the corpus never stand for it: a search whose corpus is the row's label is not comparable
    assert not shown_paper_row(row, "focal", "bert-base-uncased", "wiki1m")["comparable"]
    assert not shown_paper_row({**row, "source": None}, "focal", "bert-base-uncased", WIKI1M)["comparable"]


def test_the_paper_budgets_plan_captions_the_papers_row_comparable(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--space", "focal", "--budget", "paper", "--dry-run", "--gpus", "1", "--step-ms",
                 "12.4"]) == 0
    (shown,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Paper's row")]
    assert "Reported by the paper for focal: bert-base-uncased trained on wiki1m_for_simcse" in shown
    assert "The same model and data as this search." in shown and "Avg. 77.33 ± 0.08." in shown
    # the row's own figures disagree, and the plan says so as the answer will
    assert shown.endswith("The paper's own figures disagree: its seven tasks average 77.88, its Avg. reads 77.33.")
    assert list(tmp_path.iterdir()) == [], "a dry run creates nothing"


def test_a_row_whose_average_disagrees_with_its_tasks_is_noted_where_it_is_shown():
    summary = answer("cpu")
    note = summary["paper"]["note"]
    # Focal-InfoNCE Table 2, BERT-base: 68.50 83.70 79.00 82.71 79.43 78.85 72.99 average 77.88; it prints 77.33
    assert note == "The paper's own figures disagree: its seven tasks average 77.88, its Avg. reads 77.33."
    summary["test_table"] = {"rows": [], "winner_minus_published": {}}
    (line,) = tables.test_table_rows(summary)[2]  # the answer's and the report page's notes under the test table
    assert line.startswith(summary["paper"]["caption"]) and line.endswith(note) and "STS14 79.00" in line
    # every other shipped row averages to its printed avg within rounding
    for name in SHIPPED:
        for family, row in load_space(name).paper.items():
            if family != "focal":
                assert average_disagreement(row["figures"]) is None, (name, family)


@pytest.mark.parametrize("avg, noted", [(70.01, False), (69.99, False), (70.02, True), (69.98, True)])
def test_the_average_is_checked_to_the_rounding_of_two_decimals(avg, noted):
    # seven tasks of 70.00 printed to two decimals can average anything in 69.995-70.005, its avg 0.005 either
    # way again: 0.01 apart is rounding, more is a disagreement
    figures = {**{task: {"mean": 70.0} for task in SEVEN_TASKS}, "avg": {"mean": avg}}
    assert (average_disagreement(figures) is not None) == noted
    del figures["STS12"]  # a row without every task cannot be checked, and says nothing
    assert average_disagreement(figures) is None


def test_a_paper_rows_source_is_checked_with_its_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("loss: focal\ntrain: {batch_size: 8, max_steps: 4, eval_steps: 2}\n"
                    "space: {tau: {type: loguniform, low: 0.02, high: 0.2}}\npublished: {tau: 0.07}\n"
                    "paper: {focal: {model: m, corpus: c, source: 3, figures: {avg: 1.0}}}\n")
    with pytest.raises(ConfigError, match=r"paper\.focal\.source: must be a non-empty string"):
        load_space(path)
