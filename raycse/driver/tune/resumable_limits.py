"""Tune's limits on trials at once, corrected on `--resume` so that a resumed stage cannot stall.

Tune counts the trials it has started against `max_concurrent_trials`: the grid generator (`BasicVariantGenerator`:
stage 0, choosing, judging, a hand-written grid) and the limiter around a searcher (`ConcurrencyLimiter`: the
search stage's Optuna) each keep that count in the search's snapshot, which can lag the trials' own. A search
killed after a trial finished, before the count was written again, comes back with that finished trial still
counted as running. Tune never reports that trial's completion again, so the count holds back every trial left to
start and, with nothing running, Tune waits for one forever. A search killed in its choosing stage hung so on
`--resume`: the grid's snapshot listed the stage's first trial, finished, as running, with room for one at a time.

`ResumableGrid` and `ResumableLimiter` are Tune's two; when Tune restores one, `ForgetFinishedTrials`, a Tune
callback, takes every trial the restored experiment holds as finished off its count before the resumed stage asks
it for a trial.
"""
from __future__ import annotations

from ray import tune
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

_RESTORED: list = []  # counts Tune restored in this process, not corrected yet


class _WaitsForCorrection:
    """Restored by Tune (`set_state`), the count joins those that ForgetFinishedTrials corrects."""

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        _RESTORED.append(self)


class ResumableGrid(_WaitsForCorrection, BasicVariantGenerator):
    """Tune's grid generator, with `max_concurrent` trials at once."""

    def forget(self, finished: set[str]) -> None:
        self._live_trials -= finished


class ResumableLimiter(_WaitsForCorrection, ConcurrencyLimiter):
    """Tune's limiter of a searcher to `max_concurrent` trials at once."""

    def forget(self, finished: set[str]) -> None:
        stale = self.live_trials & finished
        self.live_trials -= stale
        self.num_unfinished_live_trials -= len(stale)


class ForgetFinishedTrials(tune.Callback):
    """Before each step of Tune's loop (the first one after a restore comes before any trial is asked for): every
    restored count stops counting the finished trials among `trials`. Trial ids are unique, so a count never
    forgets a trial of its own that runs."""

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        while _RESTORED:
            _RESTORED.pop().forget({trial.trial_id for trial in trials if trial.is_finished()})
