"""Test: the winner's checkpoints scored on the seven STS test tasks (unless its trials scored them), as Ray tasks
side by side; the figures are means over the winner's seeds. Resume: done again (a trial's figures are kept)."""
from __future__ import annotations

from raycse import stats
from raycse.driver.scoring import score_checkpoint
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.records import TEST_KEYS


class TestTasksStage(Stage):
    __test__ = False  # not a pytest class, whatever its name
    name = "test"
    needs = ("plan", "winner")
    produces = ("winner_test",)

    def run(self, state: SearchState) -> None:
        import ray

        plan, winner = state.plan, state.winner
        state.winner_test = {}
        if winner is None:
            return
        missing = [run for run in winner.runs if not run.test and run.checkpoint]
        if missing and plan.test_eval != "none":
            state.log(f"Scoring the winner's {len(missing)} checkpoint(s) on the seven STS test tasks ...")
            task = ray.remote(score_checkpoint).options(num_cpus=plan.resources.cpus_per_worker,
                                                       num_gpus=plan.resources.gpus_per_worker)
            eval_pooler = plan.trial_config(plan.sampled_of(winner.family, winner.params)).poolers()[1]
            for run, figures in zip(missing, ray.get([task.remote(run.checkpoint, eval_pooler) for run in missing])):
                run.test = figures
        scored = [run.test for run in winner.runs if run.test]
        if scored:
            state.winner_test = {key: stats.summarise([figures[key] for figures in scored]) for key in TEST_KEYS
                                 if all(key in figures for figures in scored)}
