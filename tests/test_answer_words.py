"""What raycse says about a search's answer agrees with what judged it: the seven-task test average over the judging
seeds, never a dev figure (dev chose) and never one judging run's luck.

The outcome is the recorded CPU main job of 2026-11-26, read back from its summary as `raycse.load` reads it
(benchmarks/results/quick-start-cpu/2026-11-26-cpu2); `raycse status` reads a real MLflow store written as a search
writes one; the documentation is read as a user reads it.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

import raycse
from raycse.records import (
    BEST_OBJECTIVE,
    CHOOSE,
    CONFIG_KEY_TAG,
    FINISHED,
    JUDGE,
    RUNNING,
    SEARCH,
    SEARCH_TAG,
    SEED_TAG,
    STAGE_TAG,
    STATUS_TAG,
    STOPPED,
    WINNER_MINUS_PUBLISHED,
    WINNER_TAG,
)

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "benchmarks" / "results" / "quick-start-cpu/2026-11-26-cpu2" / "search_summary.json"
JUDGED = "docs/judging.md#the-figure-that-judges-took-part-in-no-choice"


def recorded_outcome():
    from raycse.driver.loaded import outcome_from_summary

    summary = json.loads(RECORDED.read_text())
    return outcome_from_summary(summary, "49d5d10d79f847b6926cdbf0f32b6e82", "raycse-focal",
                                {"num_samples": "4", "choose_seeds": "0"})


def test_the_outcome_is_headlined_by_the_judged_figure():
    outcome = recorded_outcome()
    said = repr(outcome)
    assert "79.56 (n=1) on the seven-task test average" in said  # the winner on the test average, judging seeds
    assert "winner − published +0.17 (n=1, unjudged)" in said and said.endswith("untouched model 78.87>")
    assert "87.08" not in said and "stsb_dev" not in said  # the winner's dev mean chose it: it judges nothing
    assert outcome.decision.versus_published.mean == pytest.approx(0.17, abs=0.005)
    assert "\n" not in said and len(said) < 300


def test_the_api_says_what_versus_published_is():
    for function in (raycse.search, raycse.load):
        doc = " ".join(function.__doc__.split())
        assert "versus_published" in doc and "seven-task test average" in doc, function.__name__
        assert "judging seeds" in doc and "versus_published_dev" in doc, function.__name__


def test_one_page_states_what_judges_and_the_others_link_to_it():
    judging = (ROOT / "docs" / "judging.md").read_text()
    assert "the seven-task STS **test average**" in judging and "favour training even when it does nothing" in judging
    method = (ROOT / "docs" / "method.md").read_text()
    step4 = method[method.index("4. **Judging.**"):method.index("5. **The answer**")]
    assert "dev" not in step4 and "judging.md#the-figure-that-judges-took-part-in-no-choice" in step4
    assert "paired differences on the **dev**" not in method
    readme = (ROOT / "README.md").read_text()
    assert JUDGED in readme
    for page in (readme, method):  # no other page says that dev judges winner − published
        assert not re.search(r"[Ww]inner − published[^.]*\bon the \**dev", page)


# ------------------------------------------------------------------------------------------ raycse status
def _search_in_its_choosing_stage(uri: str) -> str:
    """A search's store as it stands in its choosing stage: four search trials (one ran every step, one was stopped
    early by ASHA with a higher value at its rung), two candidates on their choosing seeds, a judging run of an
    earlier attempt with the highest dev figure of all (one seed's luck), and a judging run of the published point
    training beside the choosing runs (raycse/driver/stages/choose.py)."""
    from raycse.tracking.tracker import Tracker

    tracker = Tracker(uri, "raycse-focal")
    parent = tracker.start_run("raycse-focal", tags={SEARCH_TAG: "raycse-focal"})
    tracker.log_params(parent, {"num_samples": 4, "confirm_top_k": 2, "choose_seeds": 3, "judge_seeds": 18})
    key = {"a": '{"family":"focal","m":0.3,"tau":0.07}', "b": '{"family":"focal","m":0.42,"tau":0.0707}'}
    runs = [("s1", SEARCH, "42", FINISHED, key["a"], 87.01), ("s2", SEARCH, "42", FINISHED, key["b"], 87.09),
            ("s3", SEARCH, "42", STOPPED, key["b"], 87.50), ("c1", CHOOSE, "43", FINISHED, key["a"], 87.00),
            ("c2", CHOOSE, "44", FINISHED, key["a"], 87.20), ("c3", CHOOSE, "43", FINISHED, key["b"], 86.90),
            ("j1", JUDGE, "46", FINISHED, key["b"], 88.40), ("c4", CHOOSE, "44", RUNNING, key["b"], 86.95),
            ("j2", JUDGE, "47", RUNNING, key["a"], 86.50)]
    for name, stage, seed, status, config, best in runs:
        run = tracker.start_run(name, parent_run_id=parent, tags={STAGE_TAG: stage, SEED_TAG: seed,
                                                                  STATUS_TAG: status, CONFIG_KEY_TAG: config})
        tracker.log_metrics(run, {BEST_OBJECTIVE: best})
        if status != RUNNING:
            tracker.end_run(run)
    return parent


def test_status_reports_the_searchs_own_state_not_a_judging_runs_luck(tmp_path, capsys):
    from raycse.cli import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _search_in_its_choosing_stage(uri)
    status = raycse.status("raycse-focal", tracking_uri=uri)
    assert status.stage == CHOOSE and status.planned[CHOOSE] == 6
    assert (status.leading, status.leading_trial) == (pytest.approx(87.09), "s2")  # the finished trials rank
    assert [(m.mean, m.n, m.planned) for m in status.choosing] == [(pytest.approx(87.1), 2, 3),
                                                                   (pytest.approx(86.9), 1, 3)]
    assert main(["status", "raycse-focal", "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    assert "stage: choose" in printed and "search 3/4, choose 3/6" in printed
    assert "leading 87.09 (s2), the best dev objective of its finished trials" in printed
    assert "  87.10 (n = 2 of 3)  focal m=0.3, tau=0.07" in printed
    assert "88.40" not in printed and "87.50" not in printed  # a judging run's luck, a stopped trial's rung value
    assert "best objective so far" not in printed


def test_status_of_a_finished_search_gives_its_answer(tmp_path, capsys):
    from raycse.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = _search_in_its_choosing_stage(uri)
    tracker = Tracker(uri, "raycse-focal")
    for run in tracker.child_runs(parent, "attributes.status = 'RUNNING'"):
        tracker.set_tags(run.info.run_id, {STATUS_TAG: FINISHED})
        tracker.end_run(run.info.run_id)
    tracker.set_tags(parent, {WINNER_TAG: '{"family":"focal","m":0.3,"tau":0.07}'})
    tracker.log_metrics(parent, {"avg": 79.56, WINNER_MINUS_PUBLISHED: 0.17})
    time.sleep(0.01)
    tracker.end_run(parent)
    status = raycse.status("raycse-focal", tracking_uri=uri)
    assert status.stage == "finished" and status.winner == "focal m=0.3, tau=0.07"
    from raycse.reporting.answer import answer_block
    from raycse.reporting.status import format_status

    text = format_status(status)  # a finished search without its summary: the figures, said to be unqualified
    assert ("answer (the judging seeds): the winner 79.56 on the seven-task test average; winner − published +0.17; "
            "its search summary, which qualifies them (n, interval, verdict), is missing") in text

    # with its summary (the recorded CPU main job's): the answer's own lines, every qualifier the answer carries
    summary = json.loads(RECORDED.read_text())
    tracker.log_dict(parent, summary, "search_summary.json")
    text = format_status(raycse.status("raycse-focal", tracking_uri=uri))
    assert "  Winner − published: +0.17, n = 1, no interval: unjudged" in text
    assert "\n".join(f"  {line}" for line in answer_block(summary)) in text
    assert "answer (the judging seeds), as the search gave it; the verdict: raycse report raycse-focal" in text
