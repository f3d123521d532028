"""`raycse compare --dry-run`: each loss's search plan as the comparison runs it (one judging look on the shared
seeds, every seed on the seven test tasks) and its cost, with the comparison's own checks, and nothing created."""
from __future__ import annotations

import functools
import os

import pytest

import raycse
from raycse.cli import main
from raycse.errors import ConfigError
from raycse.planning import compare_plan, dry_run
from raycse.planning.compare_plan import ComparePlan


def test_the_compare_plan_is_each_losss_search_plan_and_the_shared_judging(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--space", "simcse", "--space", "focal", "--dry-run", "--gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Plan of the comparison 'compare-simcse-focal' (2 losses")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["simcse"], ["focal"])}
    assert rows["simcse"][-1] == "compare-simcse-focal-simcse" and rows["focal"][-1] == "compare-simcse-focal-focal"
    assert "Shared judging: each loss's winner and published point on the same 18 fresh seeds (46-63), one look" in out
    assert sorted(os.listdir(tmp_path)) == [], "a dry run created something"

    # on one GPU, as the command above (this machine has none: focal's gpus_per_worker: auto would plan it on CPUs)
    monkeypatch.setattr(compare_plan, "plan_search", functools.partial(dry_run.plan_search, machine_gpus=lambda: 1))
    plan = raycse.compare(["simcse", "focal"], budget="full", dry_run=True)
    assert isinstance(plan, ComparePlan) and list(plan.searches) == ["simcse", "focal"]
    for search in plan.searches.values():
        choose, judge = (next(stage for stage in search.cost.stages if stage.name == name) for name in ("choose",
                                                                                                      "judge"))
        # one look (no early stop across the family): the winner's 18 in the judging stage's Tune run, the published
        # point's 18 after the 9 choosing runs, in theirs
        assert len(judge.blocks) == 1 and judge.runs() == 18 and choose.runs() == 9 + 18
        assert all(trial.tests for trial in judge.blocks[0].most)  # every judging seed scores the test tasks
        assert [trial.tests for trial in choose.blocks[0].most] == [False] * 9 + [True] * 18
    assert plan.wall_seconds() == pytest.approx(sum(s.cost.wall_seconds() for s in plan.searches.values()))
    assert plan.wall_seconds(expected=False) >= plan.wall_seconds() and plan.gpu_hours() > 0
    assert plan.disk_bytes > max(search.disk_bytes for search in plan.searches.values())


def test_the_compare_plan_refuses_what_the_comparison_would():
    with pytest.raises(ConfigError, match="the spaces disagree on objective"):  # STS-B dev against the STS average
        raycse.compare(["focal", "dclr"], budget="full", dry_run=True)
