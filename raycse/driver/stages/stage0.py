"""Stage 0 (a loss that declares it needs a complementary model, DCLR's, when none is given): one training of the
default loss (SimCSE) on SimCSE's own recipe at the search's scale (`layout.stage0_space`: batch 64, lr 3e-5, one
epoch, STS-B dev; not the DCLR family's batch 128, 3 epochs and two-task objective), whose best checkpoint every such
trial then uses as its frozen complementary model, as DCLR uses a released SimCSE model.

Resume: its Tune experiment is restored; a finished stage 0 is not trained again.
"""
from __future__ import annotations

import dataclasses

from raycse.driver import layout
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune import runner
from raycse.records import FINISHED, STAGE0
from raycse.settings.space import TrialSpec
from raycse.settings.space_keys import TestScoring


class Stage0(Stage):
    name = STAGE0
    needs = ("space", "shared_tokens")
    produces = ("space",)

    def applies(self, state: SearchState) -> bool:
        return layout.needs_stage0(state.space)

    def run(self, state: SearchState) -> None:
        space = state.space
        stage0 = dataclasses.replace(layout.stage0_space(space), test_eval=TestScoring.NONE)
        base = stage0.base
        steps = f"{base.max_steps} steps" if base.max_steps is not None else f"{base.epochs} epoch"
        state.log(f"Stage 0: training the SimCSE model that DCLR trials use as their complementary model, on "
                  f"SimCSE's recipe (batch {base.batch_size * base.workers}, lr {base.lr:g}, {steps}, "
                  f"{base.objective}).")
        records = runner.run_fixed(state, stage0, STAGE0, [TrialSpec({}, stage0.base.seed, STAGE0)])
        if not records or records[0].checkpoint is None or records[0].status != FINISHED:
            raise RuntimeError("stage 0 (the SimCSE complementary model for DCLR) did not finish: see its MLflow run")
        state.log(f"Stage 0: complementary model at {records[0].checkpoint} "
                  f"(objective {records[0].best_objective:.2f}).")
        complementary = records[0].checkpoint
        state.space = dataclasses.replace(space, base=dataclasses.replace(space.base, complementary=complementary))
