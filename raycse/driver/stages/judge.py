"""Judge: the winner and the published point trained on the judging block's fresh seeds, which alone judge them
(never the search stage's seed, never a choosing seed). The judging runs of the first `test_seeds` seeds (all by
default) score their best checkpoint on the seven test tasks (unless the space turns them off): the judged figure
and the answer's test table are made of them.

The published point's runs of the first look were trained beside the choosing runs (choose.py) where the space
allows it: the stage trains only the runs still missing, and when the winner is the published point, the first look
starts no Tune experiment at all.

Sequential looks: with a plan of several looks (6, 9, 12, 18 seeds on the full budget), each look's new seeds are
one Tune experiment (`judge` for the first, `judge-look2` ...). After each, the decision is taken on every judging
run so far; when a boundary is crossed, or the judgment is futile, no further look is started (its trials never
run). Resume: the looks' experiments are restored in order; a finished look gives the same runs, hence the same
decision at the same look with the same boundaries (they follow from the plan alone), so a resumed search stops
where the uninterrupted one would have, or continues the look that was running.
"""
from __future__ import annotations

from raycse.driver import confirmation
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune import runner
from raycse.judging.decision import decide
from raycse.records import JUDGE


class JudgeStage(Stage):
    name = JUDGE
    needs = ("space", "budget", "tracker", "parent_run_id", "searched", "winner_key")
    produces = ("judge_runs",)

    def applies(self, state: SearchState) -> bool:
        return state.space.confirm is not None and state.winner_key is not None

    def run(self, state: SearchState) -> None:
        space = state.space
        confirm = confirmation.confirm_plan(space, state.budget)
        configs = confirmation.configurations(space, state.searched)
        published = confirmation.published_key(space, configs[state.winner_key]["family"])
        keys = [state.winner_key] + ([published] if published and published != state.winner_key else [])
        seeds = confirm.seeds().judge
        on_test = confirmation.seeds_on_test(space, state.budget)
        looks = confirm.design_looks
        on_test_note = ""
        if space.test_eval.scores_any and len(on_test) < len(seeds):
            on_test_note = f"; the test tasks on seed{'s' if len(on_test) > 1 else ''} {', '.join(map(str, on_test))}"
        looked = f", looking after {', '.join(map(str, looks))} seeds" if len(looks) > 1 else ""
        ahead = f"; {len(state.judge_runs)} trained beside the choosing runs" if state.judge_runs else ""
        state.log(f"Judging: the winner{' and the published point' if len(keys) > 1 else ''} on the fresh seeds "
                  f"{seeds[0]}-{seeds[-1]} ({len(keys) * len(seeds)} runs at most{looked}{on_test_note}{ahead}).")
        runs, start = list(state.judge_runs or []), 0
        trained = {(run.config_key, run.seed) for run in runs}  # beside the choosing runs (choose.py)
        for number, end in enumerate(looks, start=1):
            specs = confirmation.judging_specs(space, state.budget, configs, [
                (key, seed) for key in keys for seed in seeds[start:end] if (key, seed) not in trained])
            if specs:
                runs += runner.run_fixed(state, space, JUDGE, specs, part="" if number == 1 else f"look{number}",
                                         drop_lost=False)
            start = end
            if number < len(looks):
                decision = decide(confirmation.config_scores(state.ranking or [], published, state.choose_runs or [],
                                                             runs),
                                  published=published, plan=confirm,
                                  baseline=confirmation.decision_baseline(state.finished_baseline()))
                if decision.stopped:
                    state.log(f"Judging stops at look {number} of {len(looks)} ({end} seeds): {decision.stopped}; "
                              f"the {len(keys) * (len(seeds) - end)} runs of the later looks are not started.")
                    break
        runner.drop_lost_runs(state, space, JUDGE, runs)
        state.judge_runs = runs
