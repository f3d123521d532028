"""A search-space file (`search_spaces/*.yaml`, or a packaged one by name) as a search runs it, `SearchSpace`: loaded
and validated whole before anything starts.

A file names the model and corpus, the fixed training settings, the loss (or, for a conditional space, a
set of loss families each with its own parameters: `families`), the distributions to search (`distributions`), the
paper's published point (evaluated first), the search settings, how the answer is confirmed (`confirm`), the
resources of one trial, the MLflow experiment, and named budgets that replace some of those settings (budgets.py):
the CPU budget when the cluster has no GPU, the paper's own recipe when asked for. Any mistake raises `ConfigError`
naming the file and the key.

Every key of `search:` and `resources:` is a row of one table (space_keys.py): the keys each section accepts, the
checks of their values, the `SearchSpace` and `Resources` fields that hold them and what a budget may replace are
made from it, so a file leaves out what takes the row's default, and the reference (raycse/settings/reference.py)
documents the same rows.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycse.errors import ConfigError, shown
from raycse.judging.confirmation_plan import ConfirmPlan
from raycse.records import loss_hash_tag
from raycse.settings.budgets import BUDGETS, FULL, OPTIONAL_BUDGETS
from raycse.settings.checks import check_name, check_path_text, mapping, no_unknown
from raycse.settings.config import TrainConfig
from raycse.settings.confirm import parse_confirm
from raycse.settings.distributions import parse_distribution
from raycse.settings.families import TRAIN_SEARCHABLE, Family, override_space, parse_families
from raycse.settings.gpu_share import AUTO as AUTO_GPUS
from raycse.settings.paper_rows import paper_rows
from raycse.settings.space_files import resolve_space
from raycse.settings.space_keys import (
    TestScoring,
    checked_keys,
    coerce_keys,
    defaults_of,
    key_fields,
    keys_of,
    names_of,
)
from raycse.settings.strict_yaml import load_settings

TOP_KEYS = {"experiment", "description", "model", "corpus", "objective", "loss", "reg", "train", "space", "published",
            "families", "search", "resources", "cpu_budget", "paper_budget", "paper"}
# The keys of each section, from the key table (space_keys.py); search.sampler: which strategy proposes trials
# (raycse/sampling/samplers.py) and its prior's settings
SEARCH_KEYS = names_of("search")
SCHEDULER_KEYS = names_of("search.scheduler")
SAMPLER_KEYS = names_of("search.sampler")
RESOURCE_KEYS = names_of("resources")
TOP_TRAIN_KEYS = ("model", "corpus", "objective")  # written at a file's (and a budget's) top level, merged into train
# A budget's section: the search keys whose row says a budget may replace them, and the sections it merges over
BUDGET_LEAVES = tuple(key for key in keys_of("search") if key.budget)
BUDGET_KEYS = {*(key.name for key in BUDGET_LEAVES), "train", "resources", "scheduler", "confirm", "space",
               *TOP_TRAIN_KEYS}
SCHEDULER_DEFAULTS = defaults_of("search.scheduler")
SPACE_FILE_BYTES = 1 << 20  # the shipped files are 2 to 4 KB


@dataclass
@key_fields("resources")
class Resources:
    """What one trial gets: its fields are the `resources.*` rows of the key table (workers, gpus_per_worker, which
    may be "auto": trials a GPU from a recorded measurement, settings/gpu_share.py, and cpus_per_worker)."""

    if TYPE_CHECKING:  # the fields key_fields makes, for the reader and the type checker
        workers: int
        gpus_per_worker: float | str
        cpus_per_worker: float

    @property
    def auto_gpus(self) -> bool:
        """Whether the GPU share is left to the plan (`gpus_per_worker: auto`), which resolves it to a number."""
        return self.gpus_per_worker == AUTO_GPUS


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
@key_fields("search")
class SearchSpace:
    """A space file as a search runs it. Its `search:` values (num_samples, max_concurrent, seed, test_eval, and
    any other `search.*` row of the key table) are fields made from the table, after those declared here."""

    if TYPE_CHECKING:  # the fields key_fields makes, for the reader and the type checker
        num_samples: int
        max_concurrent: int | None
        seed: int
        test_eval: TestScoring

    path: str
    experiment: str
    base: TrainConfig                      # fixed training settings (model, corpus, batch size, ...)
    families: dict[str, Family]            # one entry for a single-loss file; several for a conditional one
    scheduler: dict[str, Any] = field(default_factory=lambda: defaults_of("search.scheduler"))
    sampler: dict[str, Any] = field(default_factory=lambda: defaults_of("search.sampler"))
    resources: Resources = field(default_factory=Resources)
    cpu_budget: dict[str, Any] | None = None     # the sections of BUDGETS, as parsed
    paper_budget: dict[str, Any] | None = None
    paper: dict[str, dict] = field(default_factory=dict)  # reported rows by family: {model, corpus, figures}
    confirm: ConfirmPlan | None = field(default_factory=ConfirmPlan)  # None: no confirmation stage
    budget: str = FULL                     # the budget `with_budget(name)` applied: a name of BUDGETS

    def __post_init__(self):
        coerce_keys(self, "search")  # test_eval given as its string, in code, becomes a TestScoring

    @property
    def conditional(self) -> bool:
        return len(self.families) > 1

    def loss_sources(self) -> list:
        """The user's own losses its families train (raycse.losses.own.LossSource), each once: what a search ships
        to its trials and records."""
        found = {source.key: source for family in self.families.values() for source in family.sources}
        return list(found.values())

    def loss_tags(self, family: str) -> dict[str, str]:
        """The MLflow tags of a run that trains `family`: the SHA-256 of each user's loss file it trains."""
        return {loss_hash_tag(source.name): source.sha256 for source in self.families[family].sources}

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

    @property
    def judges_published_ahead(self) -> bool:
        """Whether the published point's first judging look trains beside the choosing runs (raycse/driver/stages/
        choose.py): with a choosing block (top_k above 1) and one published point whatever wins, that is, in a
        space that is not conditional (a conditional one sets the winner against its own family's)."""
        return (self.confirm is not None and self.confirm.top_k > 1 and not self.conditional
                and self.published_sampled() is not None)

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
                gpus = 0.0 if self.resources.auto_gpus else self.resources.gpus_per_worker  # resolved by the plan
                config = dataclasses.replace(self.trial_config(sampled), workers=self.resources.workers,
                                             gpus_per_worker=gpus)
                yield family_name, corner, config

    def budget_section(self, name: str) -> dict[str, Any] | None:
        """The file's section of the named budget (None where it has none); a ConfigError for a budget the file
        cannot run: an unknown name, or the paper's recipe in a file that states none."""
        if name not in BUDGETS:
            raise ConfigError.at("budget", f"{shown(name)} is not a budget (budgets: {FULL}, {', '.join(BUDGETS)})")
        section = getattr(self, BUDGETS[name])
        if section is None and name not in OPTIONAL_BUDGETS:
            raise ConfigError.at("budget", f"{self.path} has no {BUDGETS[name]} section (a paper's own model, corpus "
                                           f"and training settings), so it has no {name} budget to run: use "
                                           f"--budget {FULL} or cpu, or add one (docs/spaces.md)")
        return section

    def with_budget(self, name: str) -> SearchSpace:
        """The space a budget runs: the file's own for 'full'; else a copy with the settings the budget's section
        names replaced (the CPU budget: fewer, shorter trials; the paper's: its model, corpus and recipe)."""
        if name == FULL:
            return self
        budget = self.budget_section(name)
        if not budget:  # a file without a cpu_budget: its own settings, run on CPUs
            return dataclasses.replace(self, budget=name)
        families = self.families
        if "space" in budget:  # distributions replaced, or removed with null, in every family that searches them
            families = {family_name: override_space(family, budget["space"])
                        for family_name, family in self.families.items()}
        confirm = self.confirm
        if "confirm" in budget:  # over the file's own confirmation settings, checked again as merged
            confirm = None if budget["confirm"] is None else parse_confirm(budget["confirm"], self.path,
                                                                           f"{BUDGETS[name]}.confirm", base=confirm)
        return dataclasses.replace(
            self,
            **{key.name: budget[key.name] for key in BUDGET_LEAVES if key.name in budget},
            scheduler={**self.scheduler, **budget.get("scheduler", {})},
            base=dataclasses.replace(self.base, **budget.get("train", {})),
            resources=dataclasses.replace(self.resources, **budget.get("resources", {})),
            families=families,
            confirm=confirm,
            budget=name,
        )

    def with_cpu_budget(self) -> SearchSpace:
        """No GPU: a copy with the settings the file's cpu_budget names replaced (fewer, shorter trials)."""
        return self.with_budget("cpu")


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
    """A space file's top-level mapping, read from `where` (which every message names), as a validated space."""
    no_unknown(raw, TOP_KEYS, where, "")
    experiment = raw.get("experiment")
    try:  # the name becomes Tune's directory, the MLflow experiment, the study and the registered model
        experiment = check_name("experiment", f"raycse-{Path(where).stem}" if experiment is None else experiment)
        if raw.get("description") is not None and not isinstance(raw["description"], str):
            raise ConfigError.at("description", f"must be text, got {type(raw['description']).__name__}")
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    train = mapping(raw.get("train", {}), where, "train")
    top_level = {key: raw[key] for key in ("model", "corpus", "objective") if key in raw}
    TrainConfig.check_values(top_level, where)  # a mistake named where the file has it: `corpus:`, not `train:`
    train.update(top_level)
    base = TrainConfig.from_dict(train, where=f"{where}: train") if train else TrainConfig()
    families = parse_families(raw, where)
    search = mapping(raw.get("search", {}), where, "search")
    no_unknown(search, SEARCH_KEYS, where, "search.")
    scheduler = {**SCHEDULER_DEFAULTS, **mapping(search.get("scheduler", {}), where, "search.scheduler")}
    no_unknown(scheduler, SCHEDULER_KEYS, where, "search.scheduler.")
    sampler = {**defaults_of("search.sampler"), **mapping(search.get("sampler", {}), where, "search.sampler")}
    no_unknown(sampler, SAMPLER_KEYS, where, "search.sampler.")
    resources = mapping(raw.get("resources", {}), where, "resources")
    no_unknown(resources, RESOURCE_KEYS, where, "resources.")
    budgets = {section: _budget(raw[section], where, section) for section in BUDGETS.values()
               if raw.get(section) is not None}
    for section, budget in budgets.items():
        _searched_only(budget.get("space") or {}, families, where, section)
    confirm = search.get("confirm", {})
    given = checked_keys(search, "search", where)  # checked before it is held (test_eval: a TestScoring)
    space = SearchSpace(
        path=where,
        experiment=experiment,
        base=base,
        families=families,
        scheduler=scheduler,
        sampler=sampler,
        resources=Resources(**resources),
        **budgets,
        paper=paper_rows(raw.get("paper", {}), where),
        confirm=None if confirm is None else parse_confirm(confirm, where, "search.confirm"),
        **given,  # what the file leaves out keeps SearchSpace's defaults
    )
    validate_space(space)
    for name, section in BUDGETS.items():  # each budget must be valid too, checked now rather than when it runs
        if section in budgets:
            validate_space(space.with_budget(name), prefix=f"{section}: ")
    return space


def _budget(raw, where: str, section: str) -> dict[str, Any]:
    """A budget's section (`cpu_budget:`, `paper_budget:`), each part checked as the section it replaces, its
    top-level model, corpus and objective merged into its train (as the file's own are), its distributions read
    (null: unsearched)."""
    budget = mapping(raw, where, section)
    no_unknown(budget, BUDGET_KEYS, where, f"{section}.")
    for part, allowed in (("train", {f.name for f in dataclasses.fields(TrainConfig)}),
                          ("resources", RESOURCE_KEYS), ("scheduler", SCHEDULER_KEYS)):
        if part in budget:  # an empty part (`train:` with nothing) is an empty mapping
            budget[part] = mapping(budget[part], where, f"{section}.{part}")
            no_unknown(budget[part], allowed, where, f"{section}.{part}.")
    checked_keys(budget, "search", where, f"{section}: ")  # what it replaces, checked as the file's own
    top_level = {key: budget.pop(key) for key in TOP_TRAIN_KEYS if key in budget}
    TrainConfig.check_values(top_level, f"{where}: {section}")  # named where the file has it: `corpus:`
    TrainConfig.check_values(budget.get("train", {}), f"{where}: {section}.train")
    if top_level:
        budget["train"] = {**budget.get("train", {}), **top_level}
    if "space" in budget:
        budget["space"] = {str(k): None if v is None else parse_distribution(v, where, f"{section}.space.{k}")
                           for k, v in mapping(budget["space"], where, f"{section}.space").items()}
    return budget


def _searched_only(overrides: dict, families: dict, where: str, section: str) -> None:
    """A budget's `space:` replaces or removes distributions the file searches: a key no family searches (left from
    a copied file, or mistyped) would change nothing, so it is an error naming the key."""
    searched = sorted({name for family in families.values() for name in family.space})
    for key in overrides:
        if key not in searched:
            raise ConfigError(f"{where}: {section}.space.{key}: {key!r} is not a parameter this file searches "
                              f"(it searches {', '.join(searched) or 'none'}): remove it, or search it in space:")


def validate_space(space: SearchSpace, prefix: str = "") -> None:
    """Every corner of every family's space must give a valid training (ranges checked by the registry)."""
    where = space.path

    values = {"search": vars(space), "search.scheduler": space.scheduler, "search.sampler": space.sampler,
              "resources": vars(space.resources)}  # search.confirm is checked as it is parsed (confirm.py)
    for section, given in values.items():
        for key in keys_of(section):
            try:
                key.check(key.path, given.get(key.name))
            except ConfigError as err:
                raise ConfigError(f"{where}: {prefix}{err}") from None
    for family_name, corner, config in space.corners():
        try:
            config.validate()
        except ConfigError as err:
            culprit = ", ".join(f"{k}={shown(v)}" for k, v in corner.items()) or "the fixed settings"
            raise ConfigError(f"{where}: {prefix}{family_name} at {culprit}: {err}") from None
