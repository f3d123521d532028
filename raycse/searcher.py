"""Ray Tune's OptunaSearch, writing each Ray trial's id into its Optuna trial (user attribute `ray_trial_id`), so
that the persistent study, MLflow's child runs (tag raycse.trial_id) and the search summary join on one id.

A module of its own because Tune pickles the searcher with the experiment state: the class must be importable.
"""
from __future__ import annotations

from ray.tune.search.optuna import OptunaSearch

RAY_TRIAL_ID = "ray_trial_id"


class TaggedOptunaSearch(OptunaSearch):
    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        if trial_id in self._ot_trials:
            self._ot_trials[trial_id].set_user_attr(RAY_TRIAL_ID, trial_id)
        return config
