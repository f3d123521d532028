"""Test: the judging runs' best checkpoints that should have test figures (those of the first `test_seeds` judging
seeds) but lack them (a run replayed on --resume, say), scored on the seven STS test tasks as Ray tasks side by side
(on the search's warm workers, where its trials train on them). Judging runs score themselves at their end, so this
stage usually has nothing to do."""
from __future__ import annotations

from raycse.driver import confirmation
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune.scoring import score_checkpoint, scoring_task
from raycse.records import FINISHED


class TestStage(Stage):
    __test__ = False  # not a pytest class, whatever its name
    name = "test"
    needs = ("space", "budget", "judge_runs")

    def applies(self, state: SearchState) -> bool:
        return state.space.test_eval.scores_any and bool(state.judge_runs)

    def run(self, state: SearchState) -> None:
        import ray

        space = state.space
        on_test = set(confirmation.seeds_on_test(space, state.budget))
        missing = [run for run in state.judge_runs
                   if run.seed in on_test and not run.test and run.checkpoint and run.status == FINISHED]
        if not missing:
            return
        state.log(f"Scoring {len(missing)} judging checkpoint(s) on the seven STS test tasks ...")
        scoring = scoring_task(state, score_checkpoint)
        pending = []
        for run in missing:
            eval_pooler = space.trial_config(space.sampled_of(run.family, run.params)).poolers()[1]
            pending.append(scoring(run.checkpoint, eval_pooler))
        for run, figures in zip(missing, ray.get(pending)):
            run.test = figures
