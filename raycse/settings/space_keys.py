"""Every key of a space file's `search:` and `resources:` sections, declared once, in one table (`SPACE_KEYS`), as
TrainConfig's settings are declared by their fields (config.py): each row says where the key sits, its type, its
default, its range or choices, what it does, and whether a budget's section (`cpu_budget:`, `paper_budget:`) may
replace it.

From the table come the keys the parser accepts (space.py: `SEARCH_KEYS`, `SCHEDULER_KEYS`, `RESOURCE_KEYS`,
`BUDGET_KEYS`; confirm.py: `CONFIRM_KEYS`), the checks of their values, the `SearchSpace` and `Resources` fields
that hold the `search:` and `resources:` values (`key_fields`), what a budget replaces (`SearchSpace.with_budget`),
and their entries in docs/reference.md and space.schema.json (reference.py). So a new search key is one row here;
the code that uses it reads `space.<name>`.

The defaults of `search.sampler` are the sampler table's (raycse/sampling/samplers.py) and those of
`search.confirm` the confirmation plan's (raycse/judging/confirmation_plan.py); the rows read them from there.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from raycse.errors import ConfigError, shown
from raycse.judging.confirmation_plan import ConfirmPlan
from raycse.sampling.samplers import FILE_SAMPLER_NAMES, SAMPLER_DEFAULTS, SAMPLERS
from raycse.settings.checks import (
    CONFIRM_SEEDS_LIMIT,
    INT_LIMIT,
    SEED_LIMIT,
    check_choice,
    check_int,
    check_number,
)
from raycse.settings.gpu_share import AUTO as AUTO_GPUS


class TestScoring(StrEnum):
    """Which runs score the seven STS test tasks (`search.test_eval`): every finished trial, the judging runs and
    the untouched model (the default), or none. A string enum: it is written, logged and shown as its value."""

    __test__ = False  # not a pytest test class, whatever its name

    ALL = "all"
    BEST = "best"
    NONE = "none"

    @property
    def scores_any(self) -> bool:
        """Whether any run scores the test tasks (the judging runs, the untouched model)."""
        return self is not TestScoring.NONE

    @property
    def scores_every_run(self) -> bool:
        """Whether every finished trial of the search stage scores them too."""
        return self is TestScoring.ALL


SCHEDULERS = ("asha", "fifo")


def _gpus(name: str, value: Any) -> None:
    """resources.gpus_per_worker: a number >= 0, or `auto` (settings/gpu_share.py)."""
    if isinstance(value, str) and value != AUTO_GPUS:
        raise ConfigError.at(name, f"must be a number >= 0 or {AUTO_GPUS}, got {shown(value)}")
    if value != AUTO_GPUS:
        check_number(name, value, low=0)


@dataclass(frozen=True)
class SpaceKey:
    """One key of a space file: where it sits ('search.num_samples'), its type (int, float, an Enum of its
    choices, or another type whose `schema` and `rule` say the rest), its default, what it does in the reference's
    words, its range (`low`, `high`) or `choices`, whether it may be null, and whether a budget may replace it."""

    path: str
    kind: type
    default: Any
    words: str
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    null: bool = False
    budget: bool = False  # a budget's section may replace it (`cpu_budget.num_samples`)
    schema: dict | None = None  # the JSON Schema, where the kind and range do not say it
    rule: Callable[[str, Any], None] | None = None  # the check, where the kind and range do not say it

    @property
    def section(self) -> str:
        return self.path.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[1]

    @property
    def allowed(self) -> tuple | None:
        """The values a key of choices may take (an Enum kind's values)."""
        if isinstance(self.kind, type) and issubclass(self.kind, Enum):
            return tuple(member.value for member in self.kind)
        return self.choices

    def check(self, name: str, value: Any, *, low: float | None = None, high: float | None = None) -> None:
        """A ConfigError naming `name` unless `value` is right for this key (`low`, `high`: a range narrowed by
        another key's value, as choose_seeds' by top_k's)."""
        if value is None and self.null:
            return
        if self.rule is not None:
            self.rule(name, value)
        elif self.allowed is not None:
            check_choice(name, value, self.allowed)
        elif self.kind is int:
            check_int(name, value, low=self.low if low is None else low, high=self.high if high is None else high)
        elif self.kind is float:
            check_number(name, value, low=self.low if low is None else low, high=self.high if high is None else high)


def _confirm(name: str) -> Any:
    """A default of `search.confirm`: the confirmation plan's."""
    return next(f.default for f in dataclasses.fields(ConfirmPlan) if f.name == name)


SPACE_KEYS: tuple[SpaceKey, ...] = (
    SpaceKey("search.num_samples", int, 16, "trials of the search stage (the published point first)", low=1,
             high=INT_LIMIT, budget=True),
    SpaceKey("search.max_concurrent", int, None, "trials at once (null: as many as the resources fit)", low=1,
             high=INT_LIMIT, null=True, budget=True),
    SpaceKey("search.seed", int, 0, "the sampler's seed", low=0, high=SEED_LIMIT),
    SpaceKey("search.test_eval", TestScoring, TestScoring.BEST, "which runs score the seven STS test tasks: all "
             "(every finished trial), best (the judging runs and the untouched model), none", budget=True),
    SpaceKey("search.scheduler.name", str, "asha", "asha stops weak trials early at its rungs; fifo runs every trial "
             "to its end", choices=SCHEDULERS),
    SpaceKey("search.scheduler.grace_evals", float, 1, "evaluations every trial gets before ASHA may stop it", low=1),
    SpaceKey("search.scheduler.reduction_factor", float, 2, "ASHA keeps 1 in this many trials at each rung", low=2),
    SpaceKey("search.sampler.name", str, SAMPLER_DEFAULTS["name"], "what proposes the search stage's configurations: "
             + "; ".join(f"{name}: {SAMPLERS[name].summary}" for name in FILE_SAMPLER_NAMES),
             choices=FILE_SAMPLER_NAMES),
    SpaceKey("search.sampler.startup_trials", int, SAMPLER_DEFAULTS["startup_trials"], "finished trials before TPE's "
             "model proposes (null: max(2, num_samples / 4))", low=1, high=INT_LIMIT, null=True),
    SpaceKey("search.sampler.prior_width", float, SAMPLER_DEFAULTS["prior_width"], "prior: the std of the start-up "
             "draws, on each parameter's unit range (log scale for loguniform ones)", low=0.01, high=10),
    SpaceKey("search.confirm.top_k", int, _confirm("top_k"), "the search stage's best configurations taken on to the "
             "choosing block (1: no choosing block, the search stage chose)", low=1, high=INT_LIMIT),
    SpaceKey("search.confirm.choose_seeds", int, _confirm("choose_seeds"), "fresh seeds each of the top_k is trained "
             "on; the best mean there is the winner (at least 1 when top_k > 1)", low=0, high=CONFIRM_SEEDS_LIMIT),
    SpaceKey("search.confirm.judge_seeds", int, _confirm("judge_seeds"), "further fresh seeds on which the winner "
             "and the published point are trained; only these judge them", low=2,  # 2: the least for an interval
             high=CONFIRM_SEEDS_LIMIT),
    SpaceKey("search.confirm.test_seeds", int, _confirm("test_seeds"), "how many of the judging seeds (the first "
             "ones) also score the seven STS test tasks (null: all; at most judge_seeds)", low=1,
             high=CONFIRM_SEEDS_LIMIT, null=True),
    SpaceKey("search.confirm.looks", list, _confirm("looks"), "after how many judging seeds the judgment is looked "
             "at (sequential judging stops when a boundary is crossed), increasing, the last equal to judge_seeds "
             "(null: 6, 9, 12, 18 of 18, or one look under 12 seeds)", null=True,  # the rule: confirm.py
             schema={"type": ["array", "null"], "minItems": 1, "items": {"type": "integer", "minimum": 2}}),
    SpaceKey("resources.workers", int, 1, "data-parallel workers of one trial (Ray Train)", low=1, high=INT_LIMIT),
    SpaceKey("resources.gpus_per_worker", float, 0.0, "GPUs per worker; fractions share a GPU between trials; auto: "
             "as many trials a GPU as raised the GPU's steps a second by 10% or more in a recorded measurement of the "
             "model's shape and batch (one where none is recorded), none without a GPU", low=0, rule=_gpus,
             schema={"anyOf": [{"type": "number", "minimum": 0}, {"const": AUTO_GPUS}]}),
    SpaceKey("resources.cpus_per_worker", float, 1.0, "CPU cores per worker", low=0),
)


def keys_of(section: str) -> tuple[SpaceKey, ...]:
    """The rows of one section ('search', 'search.scheduler', 'resources', ...), in the table's order."""
    return tuple(key for key in SPACE_KEYS if key.section == section)


def key_at(path: str) -> SpaceKey:
    """The row of the key at `path` ('search.confirm.judge_seeds')."""
    return next(key for key in SPACE_KEYS if key.path == path)


def names_of(section: str) -> set[str]:
    """What a space file may write in `section`: its keys, and the sections under it (search: scheduler, ...)."""
    return {key.path.removeprefix(section + ".").split(".")[0] for key in SPACE_KEYS
            if key.path.startswith(section + ".")}


def defaults_of(section: str) -> dict[str, Any]:
    return {key.name: key.default for key in keys_of(section)}


def checked_keys(values: dict, section: str, where: str, prefix: str = "") -> dict:
    """The keys of `section` that `values` gives, each checked (a ConfigError naming the file and the key)."""
    for key in keys_of(section):
        if key.name in values:
            try:
                key.check(key.path, values[key.name])
            except ConfigError as err:
                raise ConfigError(f"{where}: {prefix}{err}") from None
    return {key.name: values[key.name] for key in keys_of(section) if key.name in values}


def key_fields(section: str):
    """A class decorator (under @dataclass): a field for each key of `section`, with the row's default and, for a
    key of choices, its value made the row's Enum (`coerce_keys`), after the fields the class declares itself."""

    def add(cls):
        annotations = dict(cls.__dict__.get("__annotations__", {}))
        for key in keys_of(section):
            if key.name not in annotations:
                annotations[key.name] = key.kind.__name__ + (" | None" if key.null else "")
                setattr(cls, key.name, key.default)
        cls.__annotations__ = annotations
        return cls

    return add


def coerce_keys(instance, section: str) -> None:
    """The values of `section`'s keys of an Enum kind made members (a space built in code may give the string)."""
    for key in keys_of(section):
        if isinstance(key.kind, type) and issubclass(key.kind, Enum):
            value = getattr(instance, key.name)
            if value is not None and not isinstance(value, key.kind):
                object.__setattr__(instance, key.name, key.kind(value))
