"""A finished search's outcome read back from its records (`raycse.load`): the same `SearchOutcome` the search
returned, rebuilt from its summary file.

The summary holds every trial record whole, the ranking, the untouched model's scores, the configurations and the
plan of the confirmation; the decision is computed again from those by the same pure function the search used, so
it is equal to the search's own, figure for figure.
"""
from __future__ import annotations

from typing import Any

from raycse.driver import confirmation
from raycse.driver.outcome import Baseline, SearchOutcome, TrialRecord
from raycse.driver.stages.record import NO_CONFIRMATION
from raycse.errors import ConfigError
from raycse.judging.confirmation_plan import ConfirmPlan
from raycse.judging.decision import decide
from raycse.judging.ranking import Ranked
from raycse.records import CHOOSE, JUDGE, SEARCH


def _trial(values: dict[str, Any]) -> TrialRecord:
    values = dict(values)
    values["curve"] = [tuple(point) for point in values.get("curve") or []]
    return TrialRecord(**values)


def _ranked(values: dict[str, Any]) -> Ranked:
    return Ranked(**{name: values[name] for name in Ranked.__dataclass_fields__})


def outcome_from_summary(summary: dict[str, Any], parent_run_id: str, run_name: str,
                         params: dict[str, str]) -> SearchOutcome:
    """The outcome of the search whose summary this is, given its parent run's id, name and parameters (the plan
    it logged: num_samples, choose_seeds)."""
    try:
        trials = [_trial(t) for t in summary["trials"]]
        ranking = [_ranked(r) for r in summary["ranking"]]
        baseline = Baseline.from_dict(summary["baseline"])
    except (KeyError, TypeError) as err:
        raise ConfigError(f"the search summary of parent run {parent_run_id} lacks {err}: it predates raycse.load") \
            from None
    configurations = {t.config_key: {"family": t.family, "params": t.params} for t in trials}
    for point in [summary.get("published"), *(summary.get("published_by_family") or {}).values()]:
        if point:
            configurations.setdefault(point["config_key"], {"family": point["family"], "params": point["params"]})
    winner = (summary.get("winner") or {}).get("config_key")
    published = (summary.get("published") or {}).get("config_key")
    decision = None
    if summary.get("decision") is not None:
        method = summary["decision"]["method"]
        plan = ConfirmPlan(budget=method["budget"], top_k=method["top_k"],
                           choose_seeds=int(params.get("choose_seeds", method["choose_seeds"])),
                           judge_seeds=method["judge_seeds"], base_seed=method["seeds"]["search"],
                           test_seeds=method["test_seeds"], num_samples=int(params.get("num_samples", 0)),
                           objective=summary["objective_description"],
                           looks=(method["judge_seeds"],))  # one look at the end, as loaded decisions have had
        choose = [t for t in trials if t.stage == CHOOSE]
        judge = [t for t in trials if t.stage == JUDGE]
        decision = decide(confirmation.config_scores(ranking, published, choose, judge), published=published,
                          baseline=confirmation.decision_baseline(baseline), plan=plan)
    registered = (summary.get("registered") or {}).get("trial_id")
    stage = JUDGE if decision else SEARCH
    return SearchOutcome(
        experiment=summary["experiment"], name=run_name, parent_run_id=parent_run_id, budget=summary["budget"],
        objective=summary["objective"], baseline=baseline, trials=trials, ranking=ranking, winner_key=winner,
        published_key=published, configurations=configurations, decision=decision,
        verdict=decision.sentence if decision else NO_CONFIRMATION, timings=dict(summary.get("timings") or {}),
        registered_run=next((t for t in trials if t.trial_id == registered and t.stage == stage), None),
        model_version=(summary.get("registered_model") or {}).get("version"), summary=summary)
