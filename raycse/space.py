"""Search-space files (`search_spaces/*.yaml`): loaded and validated whole before anything starts.

A file names the model and corpus, the fixed training settings, the loss (or, for a conditional space, a
set of loss families each with its own parameters), the distributions to search, the paper's published
point (evaluated first), the search settings, the resources of one trial, the MLflow experiment, and a
CPU budget that replaces some of those when the cluster has no GPU. Any mistake raises `ConfigError`
naming the file and the key.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from raycse.config import TrainConfig
from raycse.errors import ConfigError

DISTRIBUTIONS = ("uniform", "loguniform", "int", "categorical")
TRAIN_SEARCHABLE = ("lr", "batch_size", "weight_decay", "max_len")  # training settings a space may search
TOP_KEYS = {"experiment", "description", "model", "corpus", "loss", "reg", "train", "space", "published",
            "families", "search", "resources", "cpu_budget", "paper"}
SEARCH_KEYS = {"num_samples", "max_concurrent", "seed", "scheduler", "test_eval"}
SCHEDULER_KEYS = {"name", "grace_evals", "reduction_factor"}
RESOURCE_KEYS = {"workers", "gpus_per_worker", "cpus_per_worker"}
BUDGET_KEYS = {"num_samples", "train", "resources", "test_eval", "max_concurrent", "scheduler"}
TEST_EVAL = ("all", "best", "none")


@dataclass
class Distribution:
    kind: str
    low: float | None = None
    high: float | None = None
    choices: list | None = None

    def suggest(self, trial, name: str):
        """Optuna define-by-run: ask the trial for a value of this distribution."""
        if self.kind == "categorical":
            return trial.suggest_categorical(name, self.choices)
        if self.kind == "int":
            return trial.suggest_int(name, int(self.low), int(self.high))
        return trial.suggest_float(name, self.low, self.high, log=self.kind == "loguniform")

    def extremes(self) -> list:
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]


@dataclass
class Family:
    """One loss (base or preset, optionally with a regulariser), its searched parameters and published point."""

    loss: str
    reg: str | None
    space: dict[str, Distribution]
    published: dict[str, Any]


@dataclass
class Resources:
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0


@dataclass
class SearchSpace:
    path: str
    experiment: str
    base: TrainConfig                      # fixed training settings (model, corpus, batch size, ...)
    families: dict[str, Family]            # one entry for a single-loss file; several for a conditional one
    num_samples: int = 16
    max_concurrent: int | None = None
    seed: int = 0
    scheduler: dict[str, Any] = field(default_factory=lambda: {"name": "asha", "grace_evals": 1, "reduction_factor": 2})
    test_eval: str = "all"
    resources: Resources = field(default_factory=Resources)
    cpu_budget: dict[str, Any] | None = None
    paper: dict[str, dict[str, float]] = field(default_factory=dict)  # the papers' reported rows, by family
    budget: str = "full"                   # "cpu" once apply_cpu_budget() ran

    @property
    def conditional(self) -> bool:
        return len(self.families) > 1

    def define_by_run(self, trial) -> None:
        """Optuna define-by-run: the family first (conditional files), then that family's parameters."""
        if self.conditional:
            name = trial.suggest_categorical("loss", list(self.families))
            for param, dist in self.families[name].space.items():
                dist.suggest(trial, f"{name}/{param}")  # Ray unflattens 'family/param' into a nested dict
        else:
            for param, dist in next(iter(self.families.values())).space.items():
                dist.suggest(trial, param)

    def points_to_evaluate(self) -> list[dict[str, Any]]:
        """The papers' published configurations, run first so a search can only improve on them."""
        if not self.conditional:
            family = next(iter(self.families.values()))
            return [dict(family.published)] if family.published else []
        return [{"loss": name, **{f"{name}/{k}": v for k, v in fam.published.items()}}
                for name, fam in self.families.items()]

    def trial_config(self, sampled: dict[str, Any]) -> TrainConfig:
        """The TrainConfig of one trial: the fixed settings with the sampled values put in place."""
        if self.conditional:
            name = sampled["loss"]
            values = dict(sampled.get(name, {}))
        else:
            name, values = next(iter(self.families)), dict(sampled)
        family = self.families[name]
        train_values = {k: values.pop(k) for k in list(values) if k in TRAIN_SEARCHABLE}
        hparams = {**self.base.hparams, **values}
        return dataclasses.replace(self.base, loss=family.loss, reg=family.reg, hparams=hparams, **train_values)

    def apply_cpu_budget(self) -> None:
        """No GPU: replace the settings the file's cpu_budget names (fewer, shorter trials)."""
        if not self.cpu_budget:
            return
        budget = self.cpu_budget
        self.num_samples = budget.get("num_samples", self.num_samples)
        self.max_concurrent = budget.get("max_concurrent", self.max_concurrent)
        self.test_eval = budget.get("test_eval", self.test_eval)
        self.scheduler = {**self.scheduler, **budget.get("scheduler", {})}
        if "train" in budget:
            self.base = dataclasses.replace(self.base, **budget["train"])
        if "resources" in budget:
            self.resources = dataclasses.replace(self.resources, **budget["resources"])
        self.budget = "cpu"


# ------------------------------------------------------------------------------------------ loading
def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise ConfigError(f"space file {where!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not a UTF-8 text file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error{line}: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of settings at the top level")
    return parse_space(raw, where)


def parse_space(raw: dict, where: str) -> SearchSpace:
    _no_unknown(raw, TOP_KEYS, where, "")
    train = _mapping(raw.get("train", {}), where, "train")
    for key in ("model", "corpus"):
        if key in raw:
            train[key] = raw[key]
    base = TrainConfig.from_dict(train, where=f"{where}: train") if train else TrainConfig()
    families = _parse_families(raw, where)
    search = _mapping(raw.get("search", {}), where, "search")
    _no_unknown(search, SEARCH_KEYS, where, "search.")
    scheduler = {"name": "asha", "grace_evals": 1, "reduction_factor": 2,
                 **_mapping(search.get("scheduler", {}), where, "search.scheduler")}
    _no_unknown(scheduler, SCHEDULER_KEYS, where, "search.scheduler.")
    resources = _mapping(raw.get("resources", {}), where, "resources")
    _no_unknown(resources, RESOURCE_KEYS, where, "resources.")
    budget = raw.get("cpu_budget")
    if budget is not None:
        budget = _mapping(budget, where, "cpu_budget")
        _no_unknown(budget, BUDGET_KEYS, where, "cpu_budget.")
        _no_unknown(_mapping(budget.get("train", {}), where, "cpu_budget.train"),
                    {f.name for f in dataclasses.fields(TrainConfig)}, where, "cpu_budget.train.")
        _no_unknown(_mapping(budget.get("resources", {}), where, "cpu_budget.resources"), RESOURCE_KEYS,
                    where, "cpu_budget.resources.")
        _no_unknown(_mapping(budget.get("scheduler", {}), where, "cpu_budget.scheduler"), SCHEDULER_KEYS,
                    where, "cpu_budget.scheduler.")
    space = SearchSpace(
        path=where,
        experiment=str(raw.get("experiment") or f"raycse-{Path(where).stem}"),
        base=base,
        families=families,
        num_samples=search.get("num_samples", 16),
        max_concurrent=search.get("max_concurrent"),
        seed=search.get("seed", 0),
        scheduler=scheduler,
        test_eval=search.get("test_eval", "all"),
        resources=Resources(**resources),
        cpu_budget=budget,
        paper=_mapping(raw.get("paper", {}), where, "paper"),
    )
    validate_space(space)
    if budget:  # the budget must be valid too, checked now rather than on a GPU-less machine later
        cpu = copy.deepcopy(space)
        cpu.apply_cpu_budget()
        validate_space(cpu, prefix="cpu_budget: ")
    return space


def _parse_families(raw: dict, where: str) -> dict[str, Family]:
    from raycse.losses import LOSS_NAMES

    if "families" in raw:
        for key in ("loss", "space", "published"):
            if key in raw:
                raise ConfigError(f"{where}: '{key}' and 'families' exclude each other (put '{key}' inside each family)")
        families = _mapping(raw["families"], where, "families")
        if not families:
            raise ConfigError(f"{where}: 'families' is empty")
        parsed = {}
        for name, body in families.items():
            body = _mapping(body, where, f"families.{name}")
            _no_unknown(body, {"loss", "reg", "space", "published"}, where, f"families.{name}.")
            loss = body.get("loss", name)
            parsed[str(name)] = _family(loss, body.get("reg"), body.get("space", {}), body.get("published", {}),
                                        where, f"families.{name}.")
        return parsed
    if "loss" not in raw:
        raise ConfigError(f"{where}: missing key 'loss' (one of {', '.join(LOSS_NAMES)}), or 'families' for a conditional space")
    loss = raw["loss"]
    return {str(loss): _family(loss, raw.get("reg"), raw.get("space", {}), raw.get("published", {}), where, "")}


def _family(loss, reg, space, published, where: str, prefix: str) -> Family:
    from raycse.losses import LOSS_NAMES, loss_hyperparameters

    if loss not in LOSS_NAMES:
        raise ConfigError(f"{where}: {prefix}loss: unknown loss {loss!r} (choose from {', '.join(LOSS_NAMES)})")
    try:
        takes = loss_hyperparameters(loss, reg)
    except ConfigError as err:
        raise ConfigError(f"{where}: {prefix}reg: {err}") from None
    space = _mapping(space, where, f"{prefix}space")
    dists = {}
    for param, spec in space.items():
        key = f"{prefix}space.{param}"
        if param not in takes and param not in TRAIN_SEARCHABLE:
            allowed = ", ".join(list(takes) + list(TRAIN_SEARCHABLE))
            raise ConfigError(f"{where}: {key}: loss {loss!r} does not take {param!r} (searchable: {allowed})")
        dists[str(param)] = _distribution(spec, where, key)
    published = _mapping(published, where, f"{prefix}published")
    for param, value in published.items():
        if param not in dists:
            raise ConfigError(f"{where}: {prefix}published.{param}: not a searched parameter (searched: {', '.join(dists) or 'none'})")
    return Family(loss=str(loss), reg=reg, space=dists, published=published)


def _distribution(spec, where: str, key: str) -> Distribution:
    spec = _mapping(spec, where, key)
    kind = spec.get("type")
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: {key}.type: {kind!r} is not one of {', '.join(DISTRIBUTIONS)}")
    if kind == "categorical":
        _no_unknown(spec, {"type", "choices"}, where, f"{key}.")
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: {key}.choices: must be a non-empty list")
        return Distribution(kind, choices=choices)
    _no_unknown(spec, {"type", "low", "high"}, where, f"{key}.")
    low, high = spec.get("low"), spec.get("high")
    for name, value in (("low", low), ("high", high)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"{where}: {key}.{name}: must be a finite number, got {value!r}")
        if kind == "int" and int(value) != value:
            raise ConfigError(f"{where}: {key}.{name}: must be an integer for type int, got {value!r}")
    if not low < high:
        raise ConfigError(f"{where}: {key}: low ({low}) must be below high ({high})")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: {key}.low: must be > 0 for loguniform, got {low}")
    return Distribution(kind, low=low, high=high)


def validate_space(space: SearchSpace, prefix: str = "") -> None:
    """Every corner of every family's space must give a valid training (ranges checked by the registry)."""
    where = space.path
    for name, value in (("search.num_samples", space.num_samples), ("resources.workers", space.resources.workers)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{where}: {prefix}{name}: must be an integer >= 1, got {value!r}")
    if space.max_concurrent is not None and (not isinstance(space.max_concurrent, int) or space.max_concurrent < 1):
        raise ConfigError(f"{where}: {prefix}search.max_concurrent: must be an integer >= 1, got {space.max_concurrent!r}")
    if not isinstance(space.seed, int) or isinstance(space.seed, bool):
        raise ConfigError(f"{where}: {prefix}search.seed: must be an integer, got {space.seed!r}")
    if space.test_eval not in TEST_EVAL:
        raise ConfigError(f"{where}: {prefix}search.test_eval: {space.test_eval!r} is not one of {', '.join(TEST_EVAL)}")
    sched = space.scheduler
    if sched.get("name") not in ("asha", "fifo"):
        raise ConfigError(f"{where}: {prefix}search.scheduler.name: {sched.get('name')!r} is not one of asha, fifo")
    for key, low in (("grace_evals", 1), ("reduction_factor", 2)):
        value = sched.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < low:
            raise ConfigError(f"{where}: {prefix}search.scheduler.{key}: must be a number >= {low}, got {value!r}")
    for key in ("gpus_per_worker", "cpus_per_worker"):
        value = getattr(space.resources, key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{where}: {prefix}resources.{key}: must be a number >= 0, got {value!r}")
    for family_name, family in space.families.items():
        corners = [{}] + [{param: value} for param, dist in family.space.items() for value in dist.extremes()]
        corners.append(dict(family.published))
        for corner in corners:
            sampled = {"loss": family_name, family_name: corner} if space.conditional else corner
            config = space.trial_config(sampled)
            config = dataclasses.replace(config, workers=space.resources.workers,
                                         gpus_per_worker=space.resources.gpus_per_worker)
            try:
                config.validate()
            except ConfigError as err:
                culprit = ", ".join(f"{k}={v}" for k, v in corner.items()) or "the fixed settings"
                raise ConfigError(f"{where}: {prefix}{family_name} at {culprit}: {err}") from None


def _mapping(value, where: str, key: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key or 'top level'}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def _no_unknown(mapping: dict, allowed: set, where: str, prefix: str) -> None:
    unknown = sorted(set(map(str, mapping)) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key '{prefix}{unknown[0]}' (allowed: {', '.join(sorted(allowed))})")
