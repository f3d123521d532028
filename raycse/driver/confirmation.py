"""Between the search's trial records and its decision: the confirmation plan of a space, the search stage's curves,
the configurations' seed-level scores, and which configurations the choosing and judging blocks train.

The statistics themselves are raycse/judging/decision.py's (pure); this module only reads records into its inputs.
"""
from __future__ import annotations

import dataclasses

from raycse.driver.outcome import Baseline, TrialRecord
from raycse.judging.confirmation_plan import ConfirmPlan
from raycse.judging.ranking import Ranked, TrialCurve
from raycse.judging.seed_scores import ConfigScores, SeedScore, UntouchedFigures
from raycse.records import CHOOSE, JUDGE, SEARCH
from raycse.settings.budgets import JUDGED_AS
from raycse.settings.space import SearchSpace, TrialSpec


def confirm_plan(space: SearchSpace, budget: str) -> ConfirmPlan | None:
    """The space's confirmation settings as the decision reads them (a budget's answer as it is judged: the paper's
    budget's is a decision, as the full budget's); None without a confirmation stage."""
    if space.confirm is None:
        return None
    from raycse.evaluation.sts import build_objective

    objective = build_objective(space.base.objective, space.base.objective_columns)
    confirm = space.confirm
    return dataclasses.replace(confirm, budget=JUDGED_AS[budget], base_seed=space.base.seed,
                               num_samples=space.num_samples, objective=objective.description,
                               test_seeds=confirm.judging_seeds_on_test, looks=confirm.design_looks)


def seeds_on_test(space: SearchSpace, budget: str) -> tuple[int, ...]:
    """The judging seeds whose runs score the seven test tasks: the first `test_seeds` of them."""
    return confirm_plan(space, budget).seeds().judge[:space.confirm.judging_seeds_on_test]


def trial_curves(searched: list[TrialRecord]) -> list[TrialCurve]:
    """The search stage's trials as the ranking reads them: status, dev curve and the order Optuna sampled them in."""
    curves = []
    for record in searched:
        if record.stage != SEARCH:
            continue
        curve = tuple(record.curve)
        if not curve and record.best_objective is not None:  # a replayed trial: its best evaluation only
            curve = ((record.best_step, record.best_objective),)
        curves.append(TrialCurve(key=record.config_key, status=record.status, curve=curve, trial_id=record.trial_id,
                                  order=record.optuna_number))
    return curves


def configurations(space: SearchSpace, records: list[TrialRecord]) -> dict[str, dict]:
    """Every configuration the records hold, and the published points: key -> {family, params}."""
    found = {r.config_key: {"family": r.family, "params": r.params} for r in records}
    for family in space.families:
        sampled = space.published_sampled(family) if space.families[family].published else None
        if sampled is not None:
            found.setdefault(space.config_key(sampled), {"family": space.family_of(sampled),
                                                         "params": space.params_of(sampled)})
    return found


def published_key(space: SearchSpace, winner_family: str | None) -> str | None:
    """The published point the winner is set against: in a conditional space (all.yaml), its own family's."""
    sampled = space.published_sampled(winner_family if space.conditional else None)
    return space.config_key(sampled) if sampled is not None else None


def published_first_look(space: SearchSpace, budget: str, searched: list[TrialRecord]) -> list[TrialSpec]:
    """The published point's judging runs of the first look, which can train beside the choosing runs: the published
    point is judged whichever configuration wins (it is the winner, or the winner is set against it), and those
    runs take no part in the choice (which reads the choosing seeds alone). None where the space does not allow it
    (`SearchSpace.judges_published_ahead`: no choosing block, no published point, or a conditional space).

    Args:
        plan: the search's space.
        budget: its budget (the confirmation plan's seeds follow from it).
        searched: the search stage's trials (the configurations' sampled values are read from them).

    Returns:
        the judging runs' specs, in the order the judging stage would run them (their seeds ascending).

    Example:
        >>> published_first_look(plan, "cpu", state.searched)  # doctest: +SKIP
        [TrialSpec(sampled={...}, seed=44, stage='judge', test=True), ...]
    """
    if not space.judges_published_ahead:
        return []
    confirm, key = confirm_plan(space, budget), published_key(space, None)
    return judging_specs(space, budget, configurations(space, searched),
                         [(key, seed) for seed in confirm.seeds().judge[:confirm.design_looks[0]]])


def judging_specs(space: SearchSpace, budget: str, configs: dict[str, dict],
                  runs: list[tuple[str, int]]) -> list[TrialSpec]:
    """The judging runs `runs` ((configuration key, judging seed) pairs, keys of `configs`) as Tune trials: those of
    the first `test_seeds` judging seeds also score the seven test tasks.

    Args:
        plan: the search's space.
        budget: its budget.
        configs: key -> {family, params} (`configurations`).
        runs: the (key, seed) pairs, in the order they are to run.

    Returns:
        one TrialSpec per pair, in that order.

    Example:
        >>> judging_specs(plan, "cpu", configs, [(published, 44)])  # doctest: +SKIP
        [TrialSpec(sampled={...}, seed=44, stage='judge', test=True)]
    """
    on_test = seeds_on_test(space, budget)
    return [TrialSpec(space.sampled_of(configs[key]["family"], configs[key]["params"]), seed, JUDGE,
                      test=seed in on_test) for key, seed in runs]


def seed_scores(runs: list[TrialRecord]) -> tuple[SeedScore, ...]:
    """A configuration's runs of one block as the decision reads them: the dev objective is the run's best
    checkpoint's (the trainer keeps the best), its test figures those of that checkpoint."""
    return tuple(SeedScore(seed=r.seed, status=r.status, dev=r.best_objective, test=dict(r.test))
                 for r in sorted(runs, key=lambda r: r.seed))


def config_scores(ranking: list[Ranked], published: str | None, choose_runs: list[TrialRecord],
                  judge_runs: list[TrialRecord]) -> list[ConfigScores]:
    """The ranked configurations (with their choosing runs) and the published point, each with its judging runs."""
    keys = [r.key for r in ranking] + ([published] if published and published not in {r.key for r in ranking}
                                       else [])
    rank_of = {r.key: r.rank for r in ranking}
    return [ConfigScores(key=key, search_rank=rank_of.get(key),
                         choose=seed_scores([r for r in choose_runs if r.config_key == key and r.stage == CHOOSE]),
                         judge=seed_scores([r for r in judge_runs if r.config_key == key and r.stage == JUDGE]))
            for key in keys]


def decision_baseline(baseline: Baseline) -> UntouchedFigures:
    return UntouchedFigures(dev=baseline.objective, test=dict(baseline.test))
