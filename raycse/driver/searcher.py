"""Tune objects of the search stage that Tune pickles with the experiment state (so: importable classes).

TaggedOptunaSearch: Ray Tune's OptunaSearch, writing each Ray trial's id into its Optuna trial (user attribute
`ray_trial_id`), so that the persistent study, MLflow's child runs (tag raycse.trial_id) and the search summary
join on one id. TotalStepsStopper: a budget in training steps for the whole search stage, so that search
strategies can be compared at equal compute (benchmarks/search_quality.py).
"""
from __future__ import annotations

from ray import tune
from ray.tune.search.optuna import OptunaSearch

from raycse.records import DIVERGED_KEY, FINAL, RAY_TRIAL_ID


class TaggedOptunaSearch(OptunaSearch):
    """Also safe on --resume: a trial that Optuna already holds as finished (told before a kill, then replayed by
    raycse.driver.trial) is neither reported nor told again, which the persistent study would refuse."""

    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        if trial_id in self._ot_trials:
            self._ot_trials[trial_id].set_user_attr(RAY_TRIAL_ID, trial_id)
        return config

    def _finished_in_study(self, trial_id: str) -> bool:
        from optuna.trial import TrialState

        trial = self._ot_trials.get(trial_id)
        return trial is not None and self._ot_study._storage.get_trial(trial._trial_id).state != TrialState.RUNNING

    def on_trial_result(self, trial_id: str, result: dict):
        # an evaluation is an intermediate value; a trial's final report (its best) is told on completion instead
        if not self._finished_in_study(trial_id) and not result.get(FINAL):
            super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        """What the study learns from a trial means the same for every trial: a finished trial is COMPLETE with
        its best objective; one ASHA stopped is PRUNED (TPE ranks it by its last intermediate value and step); a
        diverged one FAILED, never a made-up worst objective."""
        if self._finished_in_study(trial_id):
            self._completed_trials.add(trial_id)
            return
        if result and result.get(DIVERGED_KEY):
            result, error = None, True
        elif result and not result.get(FINAL):
            result = None  # no value and no error: Ray's OptunaSearch tells it PRUNED
        super().on_trial_complete(trial_id, result, error)


def fail_unrecorded_trials(study, recorded: set[str]) -> list[int]:
    """Mark FAIL the study's RUNNING trials whose Ray trial is not among `recorded` (the stage's Tune trials).

    Such a trial was sampled just before a kill, before Tune's snapshot held it; the resumed Tune samples another in
    its place, and without this the persistent study would show it RUNNING for ever. Returns their numbers."""
    from optuna.trial import TrialState

    lost = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.user_attrs.get(RAY_TRIAL_ID) not in recorded]
    for number in lost:
        study.tell(number, state=TrialState.FAIL)
    return lost


class TotalStepsStopper(tune.Stopper):
    """Stops every trial once the trials' latest reported steps add up to `max_total_steps`."""

    def __init__(self, max_total_steps: int):
        self.max_total_steps = max_total_steps
        self.steps: dict[str, int] = {}

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.steps[trial_id] = max(self.steps.get(trial_id, 0), int(result.get("step", 0)))
        return False

    def stop_all(self) -> bool:
        return sum(self.steps.values()) >= self.max_total_steps
