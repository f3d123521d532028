"""`search_summary.json`: the one file every view of a search reads (the printed answer, `raycse report`, the page).

Its fields are listed in docs/search_outputs.md. It is logged on the parent run; a report made later, on any
machine that reaches the stores, reads it back from there.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from raycse import stats
from raycse.driver.outcome import SearchOutcome
from raycse.space import SearchSpace

SUMMARY_FILE = "search_summary.json"


def _summary(summary: stats.Summary | None) -> dict | None:
    return None if summary is None else dataclasses.asdict(summary)


def search_summary(outcome: SearchOutcome, plan: SearchSpace, optuna_storage: str) -> dict[str, Any]:
    """The summary of a finished search, as JSON-ready data."""
    from raycse.evaluation import build_objective

    def point(sampled: dict | None) -> dict | None:
        return None if sampled is None else {"family": plan.family_of(sampled), "params": plan.params_of(sampled),
                                             "config_key": plan.config_key(sampled)}

    winner = outcome.winner
    paper_family = winner.family if winner else next(iter(plan.families))
    family_paper = plan.paper.get(paper_family, {})
    return {
        "experiment": outcome.experiment, "space_file": os.path.basename(plan.path), "objective": plan.base.objective,
        "objective_description": build_objective(plan.base.objective, plan.base.objective_columns).description,
        "budget": outcome.budget, "model": plan.base.model, "study_name": plan.experiment,
        "optuna_storage": optuna_storage, "baseline": outcome.baseline.to_dict(),
        "published": next((point(plan.sampled_of(c.family, c.params)) for c in outcome.confirmation
                           if c.is_published), point(plan.published_sampled())),
        "published_by_family": {name: point(plan.published_sampled(name)) for name in plan.families
                                if plan.families[name].published},
        "searched_params": {name: list(family.space) for name, family in plan.families.items()},
        "trials": [dataclasses.asdict(r) for r in outcome.trials],
        "confirmation": [{
            "config_key": c.config_key, "family": c.family, "params": c.params, "is_published": c.is_published,
            "search_rank": c.search_rank, "seeds": c.seeds, "values": c.values,
            **(_summary(c.summary) or {"mean": None, "std": None, "n": 0}),
            "diff_to_published": None if c.diff_to_published is None else dataclasses.asdict(c.diff_to_published),
        } for c in outcome.confirmation],
        "winner": None if winner is None else {
            "config_key": winner.config_key, "family": winner.family, "params": winner.params,
            **_summary(winner.summary), "is_published": winner.is_published,
            "distinguishable_from_published": bool(winner.diff_to_published
                                                   and not winner.diff_to_published.covers_zero),
            "beats_baseline": winner.summary.mean > outcome.baseline.objective,
            "sentence": outcome.verdict},
        "winner_test": {k: _summary(s) for k, s in outcome.winner_test.items()},
        "paper": {"family": paper_family, "label": f"{paper_family} (paper, BERT-base, reported)",
                  "figures": family_paper} if family_paper else None,
        "seed_noise_std": outcome.seed_noise_std,
        "best_checkpoint": outcome.best_checkpoint,
        "registered_model": {"name": outcome.experiment, "version": outcome.model_version},
    }
