"""Confirm: the top-K configurations of the search and the published point retrained until each has S seeds; the
answer is the configuration with the best mean, with its paired difference to the published point.

Resume: the plan is kept on the parent run (a tag), so a resumed search retrains the same configurations on the
same seeds; the stage's Tune experiment is restored.
"""
from __future__ import annotations

import json

from raycse.driver import confirmation, tune_runner
from raycse.driver.outcome import PlannedConfig
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.records import CONFIRM, PLAN_TAG
from raycse.space import TrialSpec


class ConfirmStage(Stage):
    name = CONFIRM
    needs = ("plan", "tracker", "parent_run_id", "searched")
    produces = ("confirm_plan", "confirmed_runs", "confirmation", "winner")

    def run(self, state: SearchState) -> None:
        saved = state.tracker.tags(state.parent_run_id).get(PLAN_TAG)
        if saved:
            entries = [PlannedConfig.from_dict(entry) for entry in json.loads(saved)]
        else:
            entries = confirmation.confirm_plan(state.plan, state.searched)
            state.tracker.set_tags(state.parent_run_id, {PLAN_TAG: json.dumps([e.to_dict() for e in entries])})
        state.confirm_plan = entries
        specs = [TrialSpec(entry.sampled, seed, CONFIRM) for entry in entries for seed in entry.seeds_to_run]
        runs = []
        if specs and state.plan.confirm:
            state.log(f"Confirmation: {len(specs)} run(s) of {len(entries)} configuration(s) over seeds "
                      f"{sorted({s.seed for s in specs})}.")
            runs = tune_runner.run_fixed(state, state.plan, CONFIRM, specs)
        state.confirmed_runs = runs
        state.confirmation = confirmation.confirmation(state.plan, entries, state.searched, runs)
        state.winner = confirmation.winner_of(state.confirmation)
