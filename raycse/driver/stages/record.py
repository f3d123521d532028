"""Record: the answer into MLflow. The outcome (verdict, seed noise) is assembled; the winner's mean and test
figures, its configuration and its best checkpoint go on the parent run; the checkpoint becomes a registered model
version; search_summary.json is written. Resume: done again from the records (it writes nothing twice that
matters: parameters already logged are kept)."""
from __future__ import annotations

from raycse import stats
from raycse.driver import confirmation
from raycse.driver.outcome import SearchOutcome
from raycse.driver.scoring import local_copy
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.summary import search_summary
from raycse.records import BEST_CHECKPOINT_TAG, BEST_OBJECTIVE, BEST_TRIAL_TAG
from raycse.tracking import training_params


class RecordStage(Stage):
    name = "record"
    needs = ("plan", "tracker", "parent_run_id", "baseline", "searched", "confirmation", "winner", "winner_test")
    produces = ("outcome",)

    def run(self, state: SearchState) -> None:
        plan, tracker, parent, winner = state.plan, state.tracker, state.parent_run_id, state.winner
        baseline = state.finished_baseline()
        outcome = state.outcome = SearchOutcome(
            experiment=state.space.experiment, name=state.name, parent_run_id=parent, budget=state.budget,
            objective=plan.base.objective, baseline=baseline, trials=state.searched + state.confirmed_runs,
            confirmation=state.confirmation, winner=winner,
            verdict=confirmation.verdict(winner, baseline, plan), winner_test=state.winner_test,
            seed_noise_std=stats.pooled_std([c.values for c in state.confirmation if len(c.values) > 1]),
            timings={})
        if winner is not None:
            best_run = max(winner.runs, key=lambda r: r.best_objective)
            outcome.best_checkpoint = best_run.checkpoint
            tracker.log_metrics(parent, {BEST_OBJECTIVE: winner.summary.mean,
                                         **({"best_objective_std": winner.summary.std} if winner.summary.std else {}),
                                         **{k: s.mean for k, s in outcome.winner_test.items()}})
            config = plan.trial_config(plan.sampled_of(winner.family, winner.params))
            tracker.log_params(parent, {f"best.{k}": v for k, v in training_params(config.to_dict()).items()})
            tracker.set_tags(parent, {BEST_TRIAL_TAG: best_run.trial_id,
                                      BEST_CHECKPOINT_TAG: best_run.checkpoint or ""})
            if best_run.checkpoint:
                with local_copy(best_run.checkpoint) as local:
                    tracker.log_artifacts(parent, local, "best_checkpoint")
                outcome.model_version = tracker.register_model(parent, "best_checkpoint", outcome.experiment)
        outcome.summary = search_summary(outcome, plan, state.optuna_storage)
