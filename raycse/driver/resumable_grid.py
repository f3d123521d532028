"""A stage's grid of trials (stage 0, choosing, judging, a hand-written grid) that a `--resume` cannot stall.

Tune's grid generator (`BasicVariantGenerator`) counts the trials it has started against `max_concurrent_trials` and
keeps that count in its snapshot, which can lag the trials' own: a search killed after a trial finished, before the
generator's state was written again, comes back with that finished trial still counted as running. Tune never
reports that trial's completion again, so the generator holds back every trial left to start and, with nothing
running, Tune waits for one forever. A search killed in its choosing stage hung so on `--resume`: the generator's
snapshot listed the stage's first trial, finished, as running, with room for one trial at a time.

`ResumableGrid` is that generator; when Tune restores one, `ForgetFinishedTrials`, a Tune callback, takes every
trial the restored experiment holds as finished off its count before the resumed stage asks it for a trial.
"""
from __future__ import annotations

from ray import tune
from ray.tune.search import BasicVariantGenerator

_RESTORED: list[ResumableGrid] = []  # grids Tune restored in this process, their counts not corrected yet


class ResumableGrid(BasicVariantGenerator):
    """Tune's grid generator, with `max_concurrent` trials at once; restored, it waits for its correction."""

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        _RESTORED.append(self)


class ForgetFinishedTrials(tune.Callback):
    """Before each step of Tune's loop (the first one after a restore is before any trial is asked for): every
    restored grid stops counting the finished trials among `trials` as running. Trial ids are unique, so a grid
    never forgets a trial of its own that runs."""

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        while _RESTORED:
            grid = _RESTORED.pop()
            grid._live_trials -= {trial.trial_id for trial in trials if trial.is_finished()}
