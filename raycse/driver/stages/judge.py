"""Judge: the winner and the published point trained on the judging block's fresh seeds, which alone judge them
(never the search stage's seed, never a choosing seed). The judging runs of the first `test_seeds` seeds (all by
default) score their best checkpoint on the seven test tasks (unless the space turns them off): the answer's test
table is made of them.

Resume: the stage's Tune experiment is restored; the seeds and configurations follow from the kept ranking.
"""
from __future__ import annotations

from raycse.driver import confirmation, tune_runner
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.records import JUDGE
from raycse.settings.space import TrialSpec


class JudgeStage(Stage):
    name = JUDGE
    needs = ("plan", "budget", "tracker", "parent_run_id", "searched", "winner_key")
    produces = ("judge_runs",)

    def applies(self, state: SearchState) -> bool:
        return state.plan.confirm is not None and state.winner_key is not None

    def run(self, state: SearchState) -> None:
        plan = state.plan
        confirm = confirmation.confirm_plan(plan, state.budget)
        configs = confirmation.configurations(plan, state.searched)
        published = confirmation.published_key(plan, configs[state.winner_key]["family"])
        keys = [state.winner_key] + ([published] if published and published != state.winner_key else [])
        seeds = confirm.seeds().judge
        on_test = confirmation.seeds_on_test(plan, state.budget)
        specs = [TrialSpec(plan.sampled_of(configs[key]["family"], configs[key]["params"]), seed, JUDGE,
                           test=seed in on_test)
                 for key in keys for seed in seeds]
        on_test_note = ""
        if plan.test_eval != "none" and len(on_test) < len(seeds):
            on_test_note = f"; the test tasks on seed{'s' if len(on_test) > 1 else ''} {', '.join(map(str, on_test))}"
        state.log(f"Judging: the winner{' and the published point' if len(keys) > 1 else ''} on the fresh seeds "
                  f"{seeds[0]}-{seeds[-1]} ({len(specs)} runs{on_test_note}).")
        state.judge_runs = tune_runner.run_fixed(state, plan, JUDGE, specs)
