"""`search_summary.json`: the one file every view of a search reads (the printed answer, `raycse report`, the page,
`raycse export`). Its fields are listed in docs/search_outputs.md. It is logged on the parent run; a report made
later, on any machine that reaches the stores, reads it back from there.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from raycse.driver.outcome import SearchOutcome
from raycse.judging.decision import BlockSummary, Decision
from raycse.settings.paper_rows import shown_paper_row
from raycse.settings.space import SearchSpace
from raycse.stats import Interval

SUMMARY_FILE = "search_summary.json"
REGISTERED_RULE = ("the winner's run on its first judging seed that finished (a fixed rule: no luckiest seed, no "
                   "look at test figures)")


def _interval(interval: Interval | None) -> dict | None:
    return None if interval is None else dataclasses.asdict(interval)


def _block(block: BlockSummary | None) -> dict | None:
    if block is None:
        return None
    return {"seeds": list(block.seeds), "values": list(block.values), "planned": block.planned, "n": block.n,
            "count_text": block.count_text, "short": block.short, "dev": _interval(block.dev),
            "test": {task: _interval(i) for task, i in block.test.items()}}


def search_summary(outcome: SearchOutcome, space: SearchSpace, optuna_storage: str) -> dict[str, Any]:
    """The summary of a finished search, as JSON-ready data."""
    from raycse.encoder.loading import model_name
    from raycse.evaluation.sts import build_objective

    decision = outcome.decision
    configs = outcome.configurations

    def point(key: str | None) -> dict | None:
        return None if key is None else {"config_key": key, **configs[key]}

    winner_family = configs[outcome.winner_key]["family"] if outcome.winner_key else next(iter(space.families))
    summary = {
        "experiment": outcome.experiment, "space_file": os.path.basename(space.path), "objective": space.base.objective,
        "objective_description": build_objective(space.base.objective, space.base.objective_columns).description,
        "budget": outcome.budget, "model": model_name(space.base.model),
        "corpus": space.base.sup_data or space.base.corpus,
        "study_name": space.experiment, "optuna_storage": optuna_storage, "baseline": outcome.baseline.to_dict(),
        "published": point(outcome.published_key),
        "published_by_family": {name: point(space.config_key(space.published_sampled(name))) for name in space.families
                                if space.families[name].published},
        "searched_params": {name: list(family.space) for name, family in space.families.items()},
        "trials": [dataclasses.asdict(r) for r in outcome.trials],
        "ranking": [{**dataclasses.asdict(r), **configs[r.key]} for r in outcome.ranking],
        "verdict": outcome.verdict,
        "winner": None if outcome.winner_key is None else {**point(outcome.winner_key),
                                                           **_winner(decision, outcome)},
        "decision": None if decision is None else _decision(decision, configs),
        "test_table": _test_table(outcome, space) if decision is not None else None,
        "paper": _paper(space, winner_family),
        "seed_noise_std": decision.seed_noise if decision else None,
        "best_checkpoint": outcome.best_checkpoint,
        "registered": None if outcome.registered_run is None else {
            "trial_id": outcome.registered_run.trial_id, "seed": outcome.registered_run.seed,
            "rule": REGISTERED_RULE if decision else "the winner's search-stage run (no confirmation stage)"},
        "registered_model": {"name": outcome.experiment, "version": outcome.model_version},
    }
    return summary


def _winner(decision: Decision | None, outcome: SearchOutcome) -> dict:
    """The winner's judged figures and the flags, exactly the bounds the verdict states."""
    if decision is None:
        return {"judged": False, "beats_published": False, "below_published": False, "beats_baseline": False,
                "sentence": outcome.verdict}
    judged = decision.config(outcome.winner_key).judge
    dev = judged.dev if judged else None
    return {"judged": True, "is_published": outcome.winner_key == outcome.published_key,
            "mean": dev.mean if dev else None, "std": dev.std if dev else None, "n": dev.n if dev else 0,
            "versus_published": _interval(decision.versus_published),
            "versus_baseline": _interval(decision.versus_baseline), "judged_on": decision.judged_on,
            "estimate_published": _estimate(decision),
            "beats_published": decision.beats_published, "below_published": decision.below_published,
            "beats_baseline": decision.beats_baseline, "baseline_judged": decision.baseline_judged,
            "sentence": outcome.verdict}


def _estimate(decision: Decision) -> dict | None:
    """Winner - published over the pairs both ran: `estimate` (adjusted for early stopping when `adjusted`), the
    naive mean, n and the sentence."""
    estimate = decision.estimate_published
    return None if estimate is None else {**dataclasses.asdict(estimate), "text": estimate.text}


def _decision(decision: Decision, configs: dict) -> dict:
    plan, seeds = decision.plan, decision.seeds
    return {
        "method": {"budget": plan.budget, "top_k": plan.top_k, "choose_seeds": plan.choose_seeds if plan.has_choosing
                   else 0, "judge_seeds": plan.judge_seeds,
                   "test_seeds": plan.judging_seeds_on_test,
                   "seeds": dataclasses.asdict(seeds),
                   "chosen_on": "dev", "judged_on": {"published point": decision.judged_on,
                                                     "untouched model": decision.judged_on},
                   "looks": list(decision.looks)},
        "configs": [{"config_key": c.key, **configs.get(c.key, {}), "search_rank": c.search_rank,
                     "is_published": c.is_published, "is_winner": c.is_winner, "choose": _block(c.choose),
                     "judge": _block(c.judge)} for c in decision.configs],
        "versus_published": _interval(decision.versus_published),
        "versus_published_dev": _interval(decision.versus_published_dev),
        "versus_baseline": _interval(decision.versus_baseline),
        "failures": {key: {**dataclasses.asdict(rate), "rate": rate.rate, "text": rate.text}
                     for key, rate in decision.failures.items()},
        "fails_more": ["untouched model" if k is None else k for k in decision.fails_more],
        "look": decision.look, "stopped": decision.stopped, "estimate_published": _estimate(decision),
        "versus_published_test": {task: _interval(i) for task, i in decision.versus_published_test.items()},
        "winner_test": _interval(decision.winner_test),
        "seed_noise": decision.seed_noise, "seed_noise_df": decision.seed_noise_df,
        "detectable": decision.detectable, "detectable_n": decision.detectable_n,
        "marks": list(decision.marks), "verdict": list(decision.verdict),
    }


def _test_table(outcome: SearchOutcome, space: SearchSpace) -> dict:
    """The answer's test table: the untouched model, the published point and the winner on the seven tasks and their
    average, the same model and data, each row naming them; then winner - published, paired by seed."""
    from raycse.encoder.loading import model_name

    decision = outcome.decision
    model, corpus = model_name(space.base.model), space.base.sup_data or space.base.corpus
    steps = max((r.steps for r in outcome.trials if r.stage == "judge"), default=0)
    rows = [{"label": "untouched model", "model": model, "corpus": "-", "steps": 0, "n": 1,
             "figures": {task: {"mean": value, "std": None, "n": 1} for task, value in outcome.baseline.test.items()}}]
    for key, label in ((outcome.published_key, "published point"), (outcome.winner_key, "winner")):
        summary = decision.config(key)
        if summary is None or summary.judge is None or (label == "published point" and key == outcome.winner_key):
            continue
        test_n = max((i.n for i in summary.judge.test.values()), default=0)  # test_seeds may be fewer than judge
        rows.append({"label": label, "config_key": key, "model": model, "corpus": corpus, "steps": steps,
                     "n": test_n, "figures": {task: _interval(i) for task, i in summary.judge.test.items()}})
    on_test = decision.seeds.judge[:decision.plan.judging_seeds_on_test]
    seeds = f"judging seed {on_test[0]}" if len(on_test) == 1 else f"judging seeds {on_test[0]}-{on_test[-1]}"
    return {"rows": rows, "seeds": seeds,
            "winner_minus_published": {task: _interval(i) for task, i in decision.versus_published_test.items()}}


def _paper(space: SearchSpace, family: str) -> dict | None:
    """The paper's reported row as the answer shows it (`shown_paper_row`): comparable exactly when this search
    trains the row's model on the row's corpus."""
    from raycse.encoder.loading import model_name

    row = space.paper.get(family)
    if not row or not row.get("figures"):
        return None
    return shown_paper_row(row, family, model_name(space.base.model), space.base.sup_data or space.base.corpus)
