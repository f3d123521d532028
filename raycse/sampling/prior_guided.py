"""A prior-guided Optuna sampler: TPE whose start-up trials are drawn around the paper's published point.

TPE proposes nothing of its own until `startup` trials have finished (COMPLETE or PRUNED, Optuna's own count);
before that, Optuna draws uniformly over the space. Here those start-up trials come from the researcher's prior
instead: each numeric parameter from a normal on the unit interval of its range (log scale for a log
distribution), centred on the published value with std `width`, truncated to the range (so width 0.15 keeps about
two thirds of the draws within 15% of the range of the published value). A categorical parameter, or one the
published point does not name, is drawn uniformly as before. After the start-up, TPE (multivariate, constant liar)
proposes alone: a prior that was wrong costs the start-up trials and nothing more.

The same idea as πBO (Hvarfner et al., 2022) and PriorBand (Mallik et al., 2023), reduced to its cheapest form:
no new dependency, and a class Tune can pickle with its searcher.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import TrialState


def unit_of(distribution, value: float) -> float:
    """A value's place on the unit interval of a numeric Optuna distribution (log scale for a log one)."""
    low, high = float(distribution.low), float(distribution.high)
    if getattr(distribution, "log", False):
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low) if high > low else 0.5


class PriorGuidedSampler(BaseSampler):
    def __init__(self, model: BaseSampler, published: dict[str, Any], width: float, startup: int, seed: int | None):
        self.model = model  # TPE, which proposes once `startup` trials have finished
        self.published = dict(published)
        self.width = float(width)
        self.startup = int(startup)
        self._rng = np.random.RandomState(seed)

    def _in_startup(self, study) -> bool:
        finished = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED), use_cache=True)
        return len(finished) < self.startup

    def infer_relative_search_space(self, study, trial):
        return self.model.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        if self._in_startup(study):
            return {}  # every parameter is then drawn by sample_independent, from the prior
        return self.model.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        centre = self.published.get(param_name)
        numeric = isinstance(param_distribution, (FloatDistribution, IntDistribution))
        if self._in_startup(study) and numeric and isinstance(centre, (int, float)):
            return self._from_prior(param_distribution, float(centre))
        return self.model.sample_independent(study, trial, param_name, param_distribution)

    def _from_prior(self, distribution, centre: float):
        mean = min(1.0, max(0.0, unit_of(distribution, centre)))
        for _ in range(1000):  # rejection from the truncated normal: at worst half the mass lies inside
            u = self._rng.normal(mean, self.width)
            if 0.0 <= u <= 1.0:
                break
        else:
            u = mean
        low, high = float(distribution.low), float(distribution.high)
        value = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if distribution.log \
            else low + u * (high - low)
        if isinstance(distribution, IntDistribution):
            step = distribution.step or 1
            return int(min(high, max(low, low + round((value - low) / step) * step)))
        if distribution.step:
            value = low + round((value - low) / distribution.step) * distribution.step
        return float(min(high, max(low, value)))

    def before_trial(self, study, trial):
        self.model.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):
        self.model.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._rng = np.random.RandomState()
        self.model.reseed_rng()
