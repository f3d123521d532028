"""Search strategies: the Optuna sampler that proposes the search stage's trials, built from the space file's
`search.sampler` (or a benchmark's choice). Every strategy runs the published point first (the searcher enqueues
it) and, under ASHA, learns from stopped trials as PRUNED (raycse.driver.searcher).

  prior       the default: `tpe` whose start-up trials are drawn around the published point instead of uniformly
              (each parameter from a normal on the unit interval of its range, log scale for log parameters,
              centred on the published value, std `prior_width`, truncated to the range), then TPE. Researchers
              know where good values lie; a wrong prior costs only the start-up trials, after which TPE follows
              the trials' results wherever they lead.
  tpe         budget-aware TPE: `startup_trials` finished trials before the model proposes (default
              max(2, num_samples // 4), so that most of a 16-trial budget is proposed by the model), multivariate
              and grouped (conditional spaces), a constant liar for the trials still running.
  tpe-optuna  Optuna's TPESampler defaults (10 finished start-up trials, constant liar): raycse's sampler before
              issue 23; with 4 trials at once only trials 13-15 of 16 are proposed by its model.
  random      Optuna's RandomSampler.

benchmarks/search_quality.py --landscape compares them (README, "How a search answers").
"""
from __future__ import annotations

import warnings
from typing import Any

from raycse.settings.space import SAMPLER_DEFAULTS, SearchSpace


def startup_trials(settings: dict[str, Any], num_samples: int) -> int:
    """Finished trials before TPE's model proposes: the file's `startup_trials`, else max(2, num_samples // 4)."""
    return int(settings.get("startup_trials") or max(2, num_samples // 4))


def sampler(plan: SearchSpace, name: str | None = None):
    """The seeded Optuna sampler of `plan`'s search stage; `name` overrides the file's `search.sampler.name`."""
    import optuna

    settings = {**SAMPLER_DEFAULTS, **(plan.sampler or {})}
    name = name or settings["name"]
    seed = plan.seed
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe-optuna":
        return optuna.samplers.TPESampler(seed=seed)
    with warnings.catch_warnings():  # multivariate and group are flagged experimental (since Optuna 2.2 / 2.8)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(settings, plan.num_samples),
                                         multivariate=True, group=True, constant_liar=True)
    if name == "tpe":
        return tpe
    if name == "prior":
        from raycse.driver.prior_sampler import PriorGuidedSampler

        # Optuna's parameter names: `param`, or `family/param` in a conditional space (every family's published point)
        centres = {name: value for point in plan.points_to_evaluate() for name, value in point.items()
                   if name != "loss"}
        return PriorGuidedSampler(tpe, centres, float(settings["prior_width"]),
                                  startup_trials(settings, plan.num_samples), seed=seed)
    raise ValueError(f"unknown sampler {name!r}")

