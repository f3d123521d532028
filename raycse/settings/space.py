"""Search-space files (`search_spaces/*.yaml`, or a packaged one by name): loaded and validated whole before anything
starts.

A file names the model and corpus, the fixed training settings, the loss (or, for a conditional space, a
set of loss families each with its own parameters), the distributions to search, the paper's published
point (evaluated first), the search settings, the resources of one trial, the MLflow experiment, and a
CPU budget that replaces some of those when the cluster has no GPU. Any mistake raises `ConfigError`
naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError, shown
from raycse.sampling.samplers import FILE_SAMPLER_NAMES, SAMPLER_DEFAULTS
from raycse.settings.checks import CONFIRM_SEEDS_LIMIT, INT_LIMIT, SEED_LIMIT, check_choice, check_name, check_path_text
from raycse.settings.checks import mapping as _mapping
from raycse.settings.checks import no_unknown as _no_unknown
from raycse.settings.config import TrainConfig, check_int, check_number, searchable_settings
from raycse.settings.paper_rows import paper_rows
from raycse.settings.space_files import resolve_space
from raycse.settings.strict_yaml import load_settings

DISTRIBUTIONS = ("uniform", "loguniform", "int", "categorical")
TRAIN_SEARCHABLE = searchable_settings()  # training settings a space may search (lr, batch_size, pooler, ...)
TOP_KEYS = {"experiment", "description", "model", "corpus", "objective", "loss", "reg", "train", "space", "published",
            "families", "search", "resources", "cpu_budget", "paper"}
SEARCH_KEYS = {"num_samples", "max_concurrent", "seed", "scheduler", "sampler", "test_eval", "confirm"}
# search.sampler: which strategy proposes trials (raycse/sampling/samplers.py) and its prior's settings
SCHEDULER_KEYS = {"name", "grace_evals", "reduction_factor"}
RESOURCE_KEYS = {"workers", "gpus_per_worker", "cpus_per_worker"}
CONFIRM_KEYS = {"top_k", "choose_seeds", "judge_seeds", "test_seeds", "looks"}
BUDGET_KEYS = {"num_samples", "train", "resources", "test_eval", "max_concurrent", "scheduler", "confirm", "space"}
TEST_EVAL = ("all", "best", "none")
SPACE_FILE_BYTES = 1 << 20  # the shipped files are 2 to 4 KB


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

    def contains(self, value) -> bool:
        if self.kind == "categorical":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return self.low <= value <= self.high and (self.kind != "int" or value == int(value))

    def describe(self) -> str:
        if self.kind == "categorical":
            return f"one of {self.choices}"
        return f"in [{self.low:g}, {self.high:g}]" + (" (integers)" if self.kind == "int" else "")


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
class Confirm:
    """How the answer is reached after the search stage (raycse/judging/decision.py): the `top_k` best configurations
    are trained on `choose_seeds` fresh seeds and the best mean there wins (no choosing block when top_k is 1); the
    winner and the published point are then trained on `judge_seeds` further fresh seeds, which alone judge them.
    The defaults are the full budget's: 18 judging seeds can detect a difference of one seed-std (80% power).
    `test_seeds`: how many of the judging seeds (the first ones) also score the seven test tasks; None, all.
    `looks`: after how many judging seeds the judgment is looked at (sequential judging, which stops when it knows);
    None: a third, a half, two thirds and all of them when there are 12 or more (6, 9, 12, 18), else one look."""

    top_k: int = 3
    choose_seeds: int = 3
    judge_seeds: int = 18
    test_seeds: int | None = None
    looks: tuple[int, ...] | None = None

    def judging_looks(self) -> tuple[int, ...]:
        if self.looks is not None:
            return tuple(self.looks)
        n = self.judge_seeds
        return (n // 3, n // 2, 2 * n // 3, n) if n >= 12 else (n,)

    def judging_seeds_on_test(self) -> int:
        return self.judge_seeds if self.test_seeds is None else min(self.test_seeds, self.judge_seeds)


@dataclass(frozen=True)
class TrialSpec:
    """What one Tune trial runs: the sampled values (as the search algorithm gives them), a seed, a stage, and
    whether its best checkpoint is scored on the test tasks whatever the space's test_eval (a judging run's)."""

    sampled: dict
    seed: int
    stage: str  # one of records.STAGES
    test: bool = False

    @classmethod
    def of(cls, tune_config: dict, base_seed: int) -> TrialSpec:
        """Search-stage trials carry only the sampled values; other stages' trials carry a `raycse_trial` dict."""
        spec = tune_config.get("raycse_trial")
        if spec is None:
            return cls(dict(tune_config), base_seed, "search")
        return cls(dict(spec["sampled"]), int(spec["seed"]), spec["stage"], bool(spec.get("test", False)))

    def as_tune_config(self) -> dict:
        return {"raycse_trial": {"sampled": self.sampled, "seed": self.seed, "stage": self.stage, "test": self.test}}


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
    sampler: dict[str, Any] = field(default_factory=lambda: dict(SAMPLER_DEFAULTS))
    test_eval: str = "all"
    resources: Resources = field(default_factory=Resources)
    cpu_budget: dict[str, Any] | None = None
    paper: dict[str, dict] = field(default_factory=dict)  # reported rows by family: {model, corpus, figures}
    confirm: Confirm | None = field(default_factory=Confirm)  # None: no confirmation stage
    budget: str = "full"                   # "cpu" for the space `with_cpu_budget()` returns

    @property
    def conditional(self) -> bool:
        return len(self.families) > 1

    def family_of(self, sampled: dict) -> str:
        """The family a sampled configuration belongs to (the only family of a single-loss space)."""
        return sampled["loss"] if self.conditional else next(iter(self.families))

    def params_of(self, sampled: dict) -> dict:
        """The sampled values of a configuration without the family nesting of conditional spaces."""
        return dict(sampled.get(sampled["loss"], {})) if self.conditional else dict(sampled)

    def sampled_of(self, family: str, params: dict) -> dict:
        """The inverse of `family_of` / `params_of`: the configuration as the search algorithm samples it."""
        return {"loss": family, family: dict(params)} if self.conditional else dict(params)

    def published_sampled(self, family: str | None = None) -> dict | None:
        """The published point of `family` (the first family with one if None), as sampled values."""
        names = [family] if family else list(self.families)
        for name in names:
            if self.families[name].published:
                return self.sampled_of(name, self.families[name].published)
        return None

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

    def trial_config(self, sampled: dict[str, Any], seed: int | None = None) -> TrainConfig:
        """The TrainConfig of one trial: the fixed settings with the sampled values (and seed) put in place."""
        name = self.family_of(sampled)
        values = self.params_of(sampled)
        family = self.families[name]
        train_values = {k: values.pop(k) for k in list(values) if k in TRAIN_SEARCHABLE}
        if seed is not None:
            train_values["seed"] = seed
        hparams = {**self.base.hparams, **values}
        return dataclasses.replace(self.base, loss=family.loss, reg=family.reg, hparams=hparams, **train_values)

    def config_key(self, sampled: dict[str, Any]) -> str:
        """A stable name for a configuration (seed excluded): runs with the same key differ only in their seed."""
        family = self.family_of(sampled)
        params = self.params_of(sampled)
        return json.dumps({"family": family, **{k: params[k] for k in sorted(params)}}, sort_keys=False,
                          separators=(",", ":"))

    def corners(self):
        """(family, corner, TrainConfig) for the fixed settings, each searched parameter at each end of its range
        (each choice of a categorical) and the published point, with this space's workers: what validation checks,
        so that every configuration the search can sample is valid."""
        for family_name, family in self.families.items():
            corners = [{}] + [{param: value} for param, dist in family.space.items() for value in dist.extremes()]
            corners.append(dict(family.published))
            for corner in corners:
                sampled = {"loss": family_name, family_name: corner} if self.conditional else corner
                config = dataclasses.replace(self.trial_config(sampled), workers=self.resources.workers,
                                             gpus_per_worker=self.resources.gpus_per_worker)
                yield family_name, corner, config

    def with_cpu_budget(self) -> SearchSpace:
        """No GPU: a copy with the settings the file's cpu_budget names replaced (fewer, shorter trials)."""
        if not self.cpu_budget:
            return dataclasses.replace(self, budget="cpu")
        budget = self.cpu_budget
        families = self.families
        if "space" in budget:  # distributions replaced, or removed with null, in every family that searches them
            families = {name: _override_space(family, budget["space"]) for name, family in self.families.items()}
        confirm = self.confirm
        if "confirm" in budget:  # over the file's own confirmation settings, checked again as merged
            confirm = None if budget["confirm"] is None else _confirm(budget["confirm"], self.path,
                                                                      "cpu_budget.confirm", base=confirm)
        return dataclasses.replace(
            self,
            num_samples=budget.get("num_samples", self.num_samples),
            max_concurrent=budget.get("max_concurrent", self.max_concurrent),
            test_eval=budget.get("test_eval", self.test_eval),
            scheduler={**self.scheduler, **budget.get("scheduler", {})},
            base=dataclasses.replace(self.base, **budget.get("train", {})),
            resources=dataclasses.replace(self.resources, **budget.get("resources", {})),
            families=families,
            confirm=confirm,
            budget="cpu",
        )


def _override_space(family: Family, overrides: dict[str, Distribution | None]) -> Family:
    space = {k: v for k, v in family.space.items() if overrides.get(k, v) is not None}
    space.update({k: v for k, v in overrides.items() if v is not None and k in family.space})
    published = {k: v for k, v in family.published.items() if k in space}
    return dataclasses.replace(family, space=space, published=published)


# ------------------------------------------------------------------------------------------ loading
def load_space(path: str | Path) -> SearchSpace:
    """A space file by path, or by the name of a packaged one ('focal'), loaded and validated whole."""
    where = check_path_text("space file", str(path))
    resolved = resolve_space(path)
    if resolved != Path(path):  # a packaged space, by name: messages and the record name its file
        where = str(resolved)
    path = Path(where)
    if not path.is_file():
        raise ConfigError(f"space file {shown(where)} " + ("is a directory" if path.is_dir() else "does not exist"))
    size = path.stat().st_size
    if size > SPACE_FILE_BYTES:  # read no further: parsing megabytes of YAML takes minutes
        raise ConfigError(f"{where}: {size:,} bytes, more than a space file's {SPACE_FILE_BYTES:,} (is it the right "
                          "file?)")
    try:
        raw = load_settings(path.read_text(encoding="utf-8"), where)  # a key written twice is an error
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where}: not a UTF-8 text file (byte {err.object[err.start]:#04x} at offset "
                          f"{err.start})") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot read it ({err.strerror})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of settings at the top level, got "
                          f"{'an empty file' if raw is None else type(raw).__name__}")
    return parse_space(raw, where)


def parse_space(raw: dict, where: str) -> SearchSpace:
    _no_unknown(raw, TOP_KEYS, where, "")
    experiment = raw.get("experiment")
    try:  # the name becomes Tune's directory, the MLflow experiment, the study and the registered model
        experiment = check_name("experiment", f"raycse-{Path(where).stem}" if experiment is None else experiment)
        if raw.get("description") is not None and not isinstance(raw["description"], str):
            raise ConfigError.at("description", f"must be text, got {type(raw['description']).__name__}")
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    train = _mapping(raw.get("train", {}), where, "train")
    for key in ("model", "corpus", "objective"):
        if key in raw:
            train[key] = raw[key]
    base = TrainConfig.from_dict(train, where=f"{where}: train") if train else TrainConfig()
    families = _parse_families(raw, where)
    search = _mapping(raw.get("search", {}), where, "search")
    _no_unknown(search, SEARCH_KEYS, where, "search.")
    scheduler = {"name": "asha", "grace_evals": 1, "reduction_factor": 2,
                 **_mapping(search.get("scheduler", {}), where, "search.scheduler")}
    _no_unknown(scheduler, SCHEDULER_KEYS, where, "search.scheduler.")
    sampler = {**SAMPLER_DEFAULTS, **_mapping(search.get("sampler", {}), where, "search.sampler")}
    _no_unknown(sampler, set(SAMPLER_DEFAULTS), where, "search.sampler.")
    resources = _mapping(raw.get("resources", {}), where, "resources")
    _no_unknown(resources, RESOURCE_KEYS, where, "resources.")
    budget = raw.get("cpu_budget")
    if budget is not None:
        budget = _mapping(budget, where, "cpu_budget")
        _no_unknown(budget, BUDGET_KEYS, where, "cpu_budget.")
        for part, allowed in (("train", {f.name for f in dataclasses.fields(TrainConfig)}),
                              ("resources", RESOURCE_KEYS), ("scheduler", SCHEDULER_KEYS)):
            if part in budget:  # an empty part (`train:` with nothing) is an empty mapping
                budget[part] = _mapping(budget[part], where, f"cpu_budget.{part}")
                _no_unknown(budget[part], allowed, where, f"cpu_budget.{part}.")
        TrainConfig.check_values(budget.get("train", {}), f"{where}: cpu_budget.train")
        if "space" in budget:
            budget["space"] = {str(k): None if v is None else _distribution(v, where, f"cpu_budget.space.{k}")
                               for k, v in _mapping(budget["space"], where, "cpu_budget.space").items()}
    confirm = search.get("confirm", {})
    space = SearchSpace(
        path=where,
        experiment=experiment,
        base=base,
        families=families,
        num_samples=search.get("num_samples", 16),
        max_concurrent=search.get("max_concurrent"),
        seed=search.get("seed", 0),
        scheduler=scheduler,
        sampler=sampler,
        test_eval=search.get("test_eval", "all"),
        resources=Resources(**resources),
        cpu_budget=budget,
        paper=paper_rows(raw.get("paper", {}), where),
        confirm=None if confirm is None else _confirm(confirm, where, "search.confirm"),
    )
    validate_space(space)
    if budget:  # the budget must be valid too, checked now rather than on a GPU-less machine later
        validate_space(space.with_cpu_budget(), prefix="cpu_budget: ")
    return space


def _confirm(raw, where: str, key: str, base: Confirm | None = None) -> Confirm:
    """`{top_k, choose_seeds, judge_seeds, test_seeds}`, over `base` (the defaults, or the full budget's for
    cpu_budget)."""
    values = _mapping(raw, where, key)
    _no_unknown(values, CONFIRM_KEYS, where, f"{key}.")
    confirm = dataclasses.replace(base or Confirm(), **values)
    try:
        check_int("top_k", confirm.top_k, low=1, high=INT_LIMIT)
        check_int("choose_seeds", confirm.choose_seeds, low=1 if confirm.top_k > 1 else 0, high=CONFIRM_SEEDS_LIMIT)
        check_int("judge_seeds", confirm.judge_seeds, low=2, high=CONFIRM_SEEDS_LIMIT)  # 2: the least for an interval
        if confirm.test_seeds is not None:
            check_int("test_seeds", confirm.test_seeds, low=1, high=confirm.judge_seeds)
        if confirm.looks is not None:
            looks = confirm.looks
            if (not isinstance(looks, (list, tuple)) or not looks or any(type(n) is not int for n in looks)
                    or list(looks) != sorted(set(looks)) or looks[0] < 2 or looks[-1] != confirm.judge_seeds):
                raise ConfigError(f"looks must be rising whole numbers from at least 2 up to judge_seeds "
                                  f"({confirm.judge_seeds}), not {looks!r}")
            confirm = dataclasses.replace(confirm, looks=tuple(looks))
    except ConfigError as err:
        raise ConfigError(f"{where}: {key}.{err}") from None
    return confirm


def _parse_families(raw: dict, where: str) -> dict[str, Family]:
    from raycse.losses import LOSS_NAMES

    if "families" in raw:
        for key in ("loss", "space", "published"):
            if key in raw:
                raise ConfigError(f"{where}: '{key}' and 'families' exclude each other "
                                  f"(put '{key}' inside each family)")
        families = _mapping(raw["families"], where, "families")
        if not families:
            raise ConfigError(f"{where}: 'families' is empty")
        parsed = {}
        for name, body in families.items():
            try:  # a family's name prefixes its parameters' names in Optuna ('focal/tau')
                check_name(f"families.{name}", str(name))
            except ConfigError as err:
                raise ConfigError(f"{where}: {err}") from None
            body = _mapping(body, where, f"families.{name}")
            _no_unknown(body, {"loss", "reg", "space", "published"}, where, f"families.{name}.")
            loss = body.get("loss", name)
            parsed[str(name)] = _family(loss, body.get("reg"), body.get("space", {}), body.get("published", {}),
                                        where, f"families.{name}.")
        return parsed
    if "loss" not in raw:
        raise ConfigError(f"{where}: missing key 'loss' (one of {', '.join(LOSS_NAMES)}), "
                          "or 'families' for a conditional space")
    loss = raw["loss"]
    return {str(loss): _family(loss, raw.get("reg"), raw.get("space", {}), raw.get("published", {}), where, "")}


def _family(loss, reg, space, published, where: str, prefix: str) -> Family:
    from raycse.losses import LOSS_NAMES, loss_hyperparameters

    if not isinstance(loss, str) or loss not in LOSS_NAMES:
        raise ConfigError(f"{where}: {prefix}loss: unknown loss {shown(loss)} (choose from {', '.join(LOSS_NAMES)})")
    if reg is not None and not isinstance(reg, str):
        raise ConfigError(f"{where}: {prefix}reg: must be a regulariser's name, got {shown(reg)}")
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
            raise ConfigError(f"{where}: {key}: loss {loss!r} does not take {shown(param)} (searchable: {allowed})")
        dists[str(param)] = _distribution(spec, where, key)
    published = _mapping(published, where, f"{prefix}published")
    for param, value in published.items():
        if param not in dists:
            raise ConfigError(f"{where}: {prefix}published.{param}: not a searched parameter "
                              f"(searched: {', '.join(dists) or 'none'})")
        if not dists[param].contains(value):
            raise ConfigError(f"{where}: {prefix}published.{param}: {shown(value)} lies outside its searched range "
                              f"({dists[param].describe()})")
    return Family(loss=str(loss), reg=reg, space=dists, published=published)


def _distribution(spec, where: str, key: str) -> Distribution:
    spec = _mapping(spec, where, key)
    kind = spec.get("type")
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: {key}.type: {shown(kind)} is not one of {', '.join(DISTRIBUTIONS)}")
    if kind == "categorical":
        _no_unknown(spec, {"type", "choices"}, where, f"{key}.")
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: {key}.choices: must be a non-empty list, got {shown(choices)}")
        odd = next((c for c in choices if c is not None and not isinstance(c, (bool, int, float, str))), None)
        if odd is not None:  # what Optuna can store as a categorical's value
            raise ConfigError(f"{where}: {key}.choices: each must be a number, a string, true/false or null, "
                              f"got {shown(odd)}")
        return Distribution(kind, choices=choices)
    _no_unknown(spec, {"type", "low", "high"}, where, f"{key}.")
    low, high = spec.get("low"), spec.get("high")
    for name, value in (("low", low), ("high", high)):
        try:
            check_number(f"{key}.{name}", value)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        if kind == "int" and int(value) != value:
            raise ConfigError(f"{where}: {key}.{name}: must be an integer for type int, got {shown(value)}")
    if not low < high:
        raise ConfigError(f"{where}: {key}: low ({low}) must be below high ({high})")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: {key}.low: must be > 0 for loguniform, got {low}")
    return Distribution(kind, low=low, high=high)


def validate_space(space: SearchSpace, prefix: str = "") -> None:
    """Every corner of every family's space must give a valid training (ranges checked by the registry)."""
    where = space.path

    def check(key: str, checker, *args, **kwargs) -> None:
        try:
            checker(key, *args, **kwargs)
        except ConfigError as err:
            raise ConfigError(f"{where}: {prefix}{err}") from None

    check("search.num_samples", check_int, space.num_samples, low=1, high=INT_LIMIT)
    check("resources.workers", check_int, space.resources.workers, low=1, high=INT_LIMIT)
    if space.max_concurrent is not None:
        check("search.max_concurrent", check_int, space.max_concurrent, low=1, high=INT_LIMIT)
    check("search.seed", check_int, space.seed, low=0, high=SEED_LIMIT)
    check("search.test_eval", check_choice, space.test_eval, TEST_EVAL)
    sched = space.scheduler
    check("search.scheduler.name", check_choice, sched.get("name"), ("asha", "fifo"))
    check("search.scheduler.grace_evals", check_number, sched.get("grace_evals"), low=1)
    check("search.scheduler.reduction_factor", check_number, sched.get("reduction_factor"), low=2)
    sampler = space.sampler
    check("search.sampler.name", check_choice, sampler.get("name"), FILE_SAMPLER_NAMES)
    if sampler.get("startup_trials") is not None:
        check("search.sampler.startup_trials", check_int, sampler["startup_trials"], low=1)
    check("search.sampler.prior_width", check_number, sampler.get("prior_width"), low=0.01, high=10)
    check("resources.gpus_per_worker", check_number, space.resources.gpus_per_worker, low=0)
    check("resources.cpus_per_worker", check_number, space.resources.cpus_per_worker, low=0)
    for family_name, corner, config in space.corners():
        try:
            config.validate()
        except ConfigError as err:
            culprit = ", ".join(f"{k}={shown(v)}" for k, v in corner.items()) or "the fixed settings"
            raise ConfigError(f"{where}: {prefix}{family_name} at {culprit}: {err}") from None
