"""Record: the decision (raycse/judging/decision.py) from every block's seed-level scores, and the answer into MLflow:
the winner's judged figures, its configuration and a checkpoint on the parent run, that checkpoint as a registered
model version, and search_summary.json.

The registered checkpoint is the winner's run on its first judging seed that finished: a fixed rule that picks no
luckiest seed and never looks at test figures (without a confirmation stage, the winner's search run).
Resume: done again from the records; parameters already logged are kept.
"""
from __future__ import annotations

from raycse.driver import confirmation
from raycse.driver.outcome import SearchOutcome, TrialRecord
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.summary import search_summary
from raycse.driver.tune.scoring import local_copy
from raycse.judging.decision import Decision, decide
from raycse.records import (
    BEST_CHECKPOINT_TAG,
    BEST_OBJECTIVE,
    BEST_OBJECTIVE_STD,
    BEST_TRIAL_TAG,
    FINISHED,
    JUDGE,
    SEARCH,
    WINNER_MINUS_PUBLISHED,
)
from raycse.tracking.tracker import training_params

NO_CONFIRMATION = ("No confirmation stage ran (--no-confirm): the answer is the search stage's first-ranked "
                   "configuration, from one seed, and nothing judges it; in this field one seed moves STS figures "
                   "by up to ~2 points.")


class RecordStage(Stage):
    name = "record"
    needs = ("space", "budget", "tracker", "parent_run_id", "baseline", "searched", "ranking", "choose_runs",
             "winner_key", "judge_runs")
    produces = ("outcome",)

    def run(self, state: SearchState) -> None:
        space, parent = state.space, state.parent_run_id
        baseline = state.finished_baseline()
        judge_runs, choose_runs = state.judge_runs or [], state.choose_runs or []
        trials = [*state.searched, *choose_runs, *judge_runs]
        configs = confirmation.configurations(space, trials)
        winner = state.winner_key
        published = confirmation.published_key(space, configs[winner]["family"] if winner else None)
        confirm = confirmation.confirm_plan(space, state.budget)
        decision = None
        if confirm is not None:
            decision = decide(confirmation.config_scores(state.ranking, published, choose_runs, judge_runs),
                              published=published, baseline=confirmation.decision_baseline(baseline), plan=confirm)
        outcome = state.outcome = SearchOutcome(
            experiment=state.loaded_space.experiment, name=state.name, parent_run_id=parent, budget=state.budget,
            objective=space.base.objective, baseline=baseline, trials=trials, ranking=state.ranking,
            winner_key=winner, published_key=published, configurations=configs, decision=decision,
            verdict=decision.sentence if decision else NO_CONFIRMATION, timings={})
        outcome.registered_run = registered_run(winner, judge_runs if decision else state.searched,
                                                JUDGE if decision else SEARCH)
        if winner is not None:
            _record_winner(state, outcome)
        outcome.summary = search_summary(outcome, space, state.optuna_storage)


def registered_run(winner: str | None, runs: list[TrialRecord], stage: str) -> TrialRecord | None:
    """The winner's run on the first seed of `stage` that finished with a checkpoint."""
    candidates = sorted((r for r in runs if r.config_key == winner and r.stage == stage and r.status == FINISHED
                         and r.checkpoint), key=lambda r: r.seed)
    return candidates[0] if candidates else None


def winner_metrics(decision: Decision | None, winner_key: str | None) -> dict[str, float]:
    """The parent run's metrics of the answer: the winner's dev mean (and std) and its test tasks over its judging
    seeds, and `winner_minus_published`, the judged figure's paired difference (`Decision.versus_published`: the
    test average where the judging seeds score the test tasks; dev is only shown, never this metric).

    Args:
        decision: the search's decision (None without a confirmation stage: no metric).
        winner_key: the winner's configuration key.

    Returns:
        The metrics by name (raycse.records), each a float.

    Example:
        >>> winner_metrics(None, None)
        {}
    """
    judged = decision.config(winner_key).judge if decision else None
    metrics = {}
    if judged is not None and judged.dev is not None:
        metrics[BEST_OBJECTIVE] = judged.dev.mean
        if judged.dev.std is not None:
            metrics[BEST_OBJECTIVE_STD] = judged.dev.std
        metrics.update({task: interval.mean for task, interval in judged.test.items()})
    if decision is not None and decision.versus_published is not None:
        metrics[WINNER_MINUS_PUBLISHED] = decision.versus_published.mean
    return metrics


def _record_winner(state: SearchState, outcome: SearchOutcome) -> None:
    space, tracker, parent = state.space, state.tracker, state.parent_run_id
    tracker.log_metrics(parent, winner_metrics(outcome.decision, outcome.winner_key))
    winner = outcome.winner
    config = space.trial_config(space.sampled_of(winner["family"], winner["params"]))
    tracker.log_params(parent, {f"best.{k}": v for k, v in training_params(config.to_dict()).items()})
    run = outcome.registered_run
    if run is None:
        return
    tracker.set_tags(parent, {BEST_TRIAL_TAG: run.trial_id, BEST_CHECKPOINT_TAG: run.checkpoint})
    with local_copy(run.checkpoint) as local:
        tracker.log_artifacts(parent, local, "best_checkpoint")
    outcome.model_version = tracker.register_model(parent, "best_checkpoint", outcome.experiment)
