"""The samplers that propose the search stage's configurations, in one table from a sampler's name to its factory
(as Ray Tune keeps one table from a searcher's name to its class). The settings read it for the names a space file
may give and their defaults, the reference docs for their descriptions, and the search stage to build the one it
runs. Every sampler runs the published point first (the searcher enqueues it) and, under ASHA, learns from stopped
trials as PRUNED (raycse.driver.tune.searcher).

A new sampler is one entry in `SAMPLERS`: its name, one line for the docs, and a factory from `SamplerSettings`.
benchmarks/search_quality.py --landscape compares them (benchmarks/search-quality.md).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_SAMPLER = "tpe"
# search.sampler in a space file: its keys and their defaults
SAMPLER_DEFAULTS: dict[str, Any] = {"name": DEFAULT_SAMPLER, "startup_trials": None, "prior_width": 0.15}


@dataclass(frozen=True)
class SamplerSettings:
    """What a sampler's factory may read: the space file's `search.sampler` and the search's own settings.

    Args:
        seed: the sampler's seed (the search's `seed`).
        num_samples: trials of the search stage.
        startup_trials: finished trials before TPE's model proposes (None: `max(2, num_samples // 4)`).
        prior_width: the prior sampler's std on each parameter's unit range.
        published: the published point, by Optuna's parameter names (`param`, or `family/param`).
    """
    seed: int
    num_samples: int
    startup_trials: int | None = None
    prior_width: float = SAMPLER_DEFAULTS["prior_width"]
    published: dict[str, Any] = field(default_factory=dict)

    def startup(self) -> int:
        """Finished trials before TPE's model proposes: the file's `startup_trials`, else max(2, num_samples // 4),
        so that most of a 16-trial budget is proposed by the model."""
        return int(self.startup_trials or max(2, self.num_samples // 4))


@dataclass(frozen=True)
class Sampler:
    """One entry of the table.

    Attributes:
        name: what a space file's `search.sampler.name` (or a benchmark) calls it.
        summary: one line for the reference docs.
        build: the seeded Optuna sampler.
    """
    name: str
    summary: str
    build: Callable[[SamplerSettings], Any]


def _tpe(settings: SamplerSettings):
    import optuna

    with warnings.catch_warnings():  # multivariate and group are flagged experimental (since Optuna 2.2 / 2.8)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=settings.seed, n_startup_trials=settings.startup(), multivariate=True,
                                          group=True, constant_liar=True)


def _prior(settings: SamplerSettings):
    from raycse.sampling.prior_guided import PriorGuidedSampler

    return PriorGuidedSampler(_tpe(settings), settings.published, settings.prior_width, settings.startup(),
                              seed=settings.seed)


def _optuna_tpe(settings: SamplerSettings):
    import optuna

    return optuna.samplers.TPESampler(seed=settings.seed)


def _random(settings: SamplerSettings):
    import optuna

    return optuna.samplers.RandomSampler(seed=settings.seed)


SAMPLERS: dict[str, Sampler] = {sampler.name: sampler for sampler in (
    Sampler("tpe", "TPE that proposes from its model after startup_trials finished trials (multivariate, grouped "
            "for conditional spaces, a constant liar for the trials still running)", _tpe),
    Sampler("prior", "tpe whose start-up trials are drawn around the published point (a normal of std "
            "prior_width on each parameter's unit range), then TPE", _prior),
    Sampler("tpe-optuna", "Optuna's own TPESampler defaults (10 finished start-up trials)", _optuna_tpe),
    Sampler("random", "Optuna's RandomSampler", _random),
)}
# the names a space file may give: every entry (a benchmark's hand-written grid is no sampler: driver/state.py's
# BenchmarkHook)
FILE_SAMPLER_NAMES = tuple(SAMPLERS)


class SampledSpace(Protocol):
    """What `sampler` reads of a search's plan (raycse.settings.space.SearchSpace has it)."""
    seed: int
    num_samples: int
    sampler: dict[str, Any]

    def points_to_evaluate(self) -> list[dict[str, Any]]: ...


def settings_of(space: SampledSpace) -> SamplerSettings:
    """The factory's inputs from a search's plan: its `search.sampler`, seed, budget and published point(s)."""
    chosen = {**SAMPLER_DEFAULTS, **(space.sampler or {})}
    # Optuna's parameter names: `param`, or `family/param` in a conditional space (every family's published point)
    published = {name: value for point in space.points_to_evaluate() for name, value in point.items() if name != "loss"}
    return SamplerSettings(seed=space.seed, num_samples=space.num_samples, startup_trials=chosen["startup_trials"],
                           prior_width=float(chosen["prior_width"]), published=published)


def sampler_named(name: str | None, space: SampledSpace) -> Sampler:
    """The table's entry for `name`, or for the plan's own `search.sampler.name` when `name` is None."""
    name = name or {**SAMPLER_DEFAULTS, **(space.sampler or {})}["name"]
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}: one of {', '.join(SAMPLERS)}")
    return SAMPLERS[name]


def sampler(space: SampledSpace, name: str | None = None):
    """The seeded Optuna sampler of a search stage.

    Args:
        space: the search's space (a `raycse.settings.space.SearchSpace`).
        name: a name of `SAMPLERS` that overrides the file's `search.sampler.name`.

    Returns:
        An `optuna.samplers.BaseSampler`.

    Raises:
        ValueError: for an unknown name.

    Example:
        >>> from raycse.settings.space import load_space
        >>> type(sampler(load_space("focal"))).__name__
        'TPESampler'
    """
    return sampler_named(name, space).build(settings_of(space))
