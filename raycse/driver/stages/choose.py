"""Choose: the search stage's ranking (on a common footing: raycse/judging/ranking.py), then, when the plan keeps
more than one configuration, the top_k trained on the choosing block's fresh seeds; the winner is the best mean
there (raycse/judging/decision.py). With top_k 1 (or no confirmation stage) the search stage's first is the winner.

The published point's judging runs of the first look train in the same Tune experiment, after the choosing runs
(`confirmation.published_first_look`): they are needed whichever configuration wins and take no part in the choice,
and the choosing block alone rarely fills every slot to its end (9 runs on 4 slots). The judging stage then trains
only the winner's, and when the winner is the published point nothing at all: its first look starts no Tune
experiment, whose trial processes Tune would start anew. They are judging runs in every record (stage `judge`), and
only the judging block reads them.

Resume: the ranking is kept on the parent run (a tag) once made, so a resumed search trains the same
configurations on the same seeds; the stage's Tune experiment is restored.
"""
from __future__ import annotations

import dataclasses
import json

from raycse.driver import confirmation
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune import runner
from raycse.judging.decision import choose_winner
from raycse.judging.ranking import Ranked, rank_for_confirmation
from raycse.records import CHOOSE, JUDGE, RANKING_TAG, WINNER_TAG
from raycse.settings.space import TrialSpec


class ChooseStage(Stage):
    name = CHOOSE
    needs = ("space", "budget", "tracker", "parent_run_id", "searched")
    produces = ("ranking", "choose_runs", "winner_key")  # and the judging runs it trained ahead (judge_runs)

    def run(self, state: SearchState) -> None:
        space = state.space
        confirm = confirmation.confirm_plan(space, state.budget)
        saved = state.tracker.tags(state.parent_run_id).get(RANKING_TAG)
        if saved:
            ranking = [Ranked(**entry) for entry in json.loads(saved)]
        else:
            ranking = list(rank_for_confirmation(confirmation.trial_curves(state.searched),
                                                 confirm.top_k if confirm else 1))
            state.tracker.set_tags(state.parent_run_id,
                                   {RANKING_TAG: json.dumps([dataclasses.asdict(r) for r in ranking])})
        state.ranking = ranking
        state.choose_runs = []
        if confirm is not None and confirm.has_choosing and ranking:
            sampled = {key: space.sampled_of(c["family"], c["params"])
                       for key, c in confirmation.configurations(space, state.searched).items()}
            seeds = confirm.seeds().choose
            specs = [TrialSpec(sampled[r.key], seed, CHOOSE) for r in ranking for seed in seeds]
            ahead = confirmation.published_first_look(space, state.budget, state.searched)
            beside = (f"; beside them, the published point's first judging look on seeds {ahead[0].seed}-"
                      f"{ahead[-1].seed} ({len(ahead)} runs: it is judged whichever configuration wins)"
                      if ahead else "")
            state.log(f"Choosing: the top {len(ranking)} configuration(s) of the search, each on seeds "
                      f"{seeds[0]}-{seeds[-1]} ({len(specs)} runs){beside}.")
            runs = runner.run_fixed(state, space, CHOOSE, specs + ahead)
            state.choose_runs = [run for run in runs if run.stage == CHOOSE]
            state.judge_runs = [run for run in runs if run.stage == JUDGE]
        if confirm is None:
            state.winner_key = ranking[0].key if ranking else None
        else:
            scores = confirmation.config_scores(ranking, None, state.choose_runs, [])
            state.winner_key = choose_winner(scores, confirm)
        if state.winner_key is not None:
            state.tracker.set_tags(state.parent_run_id, {WINNER_TAG: state.winner_key})
