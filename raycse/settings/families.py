"""The losses a space file searches: one `Family` for a single-loss file (`loss`, `reg`, `space`, `published` at the
top level), several for a conditional one (`families:`), each a loss with its searched parameters and the paper's
published point, checked against the loss's declaration.

A loss is a built-in one by name, or a user's own by reference (``./my_loss.py:MyLoss``, relative to the space file;
``package.module:MyLoss``; an installed entry point's name): loaded and tried before anything starts, and then known
by its declared name (the family's name) and by the module its trials import it from (`Family.loss`). A searched
parameter's distribution may be the word ``declared``: the range, type and log scale its loss declares.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_name, mapping, no_unknown
from raycse.settings.config import searchable_settings
from raycse.settings.distributions import Distribution, parse_distribution

TRAIN_SEARCHABLE = searchable_settings()  # training settings a space may search (lr, batch_size, pooler, ...)
FAMILY_KEYS = {"loss", "reg", "space", "published"}
DECLARED = "declared"  # a distribution read from the loss's declaration
OWN_LOSS_FORMS = "./my_loss.py:MyLoss, package.module:MyLoss, or an installed raycse.losses entry point"


@dataclass
class Family:
    """One loss (base or preset, optionally with a regulariser), its searched parameters and published point."""

    loss: str
    reg: str | None
    space: dict[str, Distribution]
    published: dict[str, Any]
    sources: tuple = field(default_factory=tuple)  # the LossSource of each user's loss it trains (raycse.losses.own)

    @property
    def own_loss(self):
        """The LossSource of its loss when that is a user's own (None for a built-in loss)."""
        return next((source for source in self.sources if source.key == self.loss), None)


def override_space(family: Family, overrides: dict[str, Distribution | None]) -> Family:
    """`family` with the distributions of `overrides` that it searches replaced, or removed where None (the published
    point losing what is no longer searched)."""
    space = {k: v for k, v in family.space.items() if overrides.get(k, v) is not None}
    space.update({k: v for k, v in overrides.items() if v is not None and k in family.space})
    published = {k: v for k, v in family.published.items() if k in space}
    return dataclasses.replace(family, space=space, published=published)


def parse_families(raw: dict, where: str) -> dict[str, Family]:
    """The families of a space file's top-level mapping `raw`, by name (the loss's name for a single-loss file)."""
    from raycse.losses import LOSS_NAMES

    if "families" in raw:
        for key in ("loss", "space", "published"):
            if key in raw:
                raise ConfigError(f"{where}: '{key}' and 'families' exclude each other "
                                  f"(put '{key}' inside each family)")
        families = mapping(raw["families"], where, "families")
        if not families:
            raise ConfigError(f"{where}: 'families' is empty")
        parsed = {}
        for name, body in families.items():
            try:  # a family's name prefixes its parameters' names in Optuna ('focal/tau')
                check_name(f"families.{name}", str(name))
            except ConfigError as err:
                raise ConfigError(f"{where}: {err}") from None
            body = mapping(body, where, f"families.{name}")
            no_unknown(body, FAMILY_KEYS, where, f"families.{name}.")
            loss = body.get("loss", name)
            parsed[str(name)] = _family(loss, body.get("reg"), body.get("space", {}), body.get("published", {}),
                                        where, f"families.{name}.")
        return parsed
    if "loss" not in raw:
        raise ConfigError(f"{where}: missing key 'loss' (one of {', '.join(LOSS_NAMES)}, or your own: "
                          f"{OWN_LOSS_FORMS}), or 'families' for a conditional space")
    family = _family(raw["loss"], raw.get("reg"), raw.get("space", {}), raw.get("published", {}), where, "")
    return {family.own_loss.name if family.own_loss else str(raw["loss"]): family}


def _own(value, role: str, where: str, prefix: str):
    """(the name trials use, its LossSource) for a user's loss or regulariser; (value, None) for a built-in one."""
    from raycse.losses.own import is_reference, resolve

    if not is_reference(value):
        return value, None
    try:
        source = resolve(value, Path(where).parent)
    except ConfigError as err:
        raise ConfigError(f"{where}: {prefix}{role}: {err}") from None
    return source.key, source


def _family(loss, reg, space, published, where: str, prefix: str) -> Family:
    from raycse.losses import LOSS_NAMES
    from raycse.losses.catalogue import is_built_in
    from raycse.losses.names import combination, combination_specs

    if reg is not None and not isinstance(reg, str):
        raise ConfigError(f"{where}: {prefix}reg: must be a regulariser's name, got {shown(reg)}")
    loss, loss_source = _own(loss, "loss", where, prefix)
    reg, reg_source = _own(reg, "reg", where, prefix)
    if loss_source is None and (not isinstance(loss, str) or not is_built_in(loss)):
        raise ConfigError(f"{where}: {prefix}loss: unknown loss {shown(loss)} (choose from {', '.join(LOSS_NAMES)}, "
                          f"or your own: {OWN_LOSS_FORMS})")
    try:
        _, base, regulariser = combination(loss, reg)
    except ConfigError as err:
        raise ConfigError(f"{where}: {prefix}{err.key or 'reg'}: {err}") from None
    takes = combination_specs(base, regulariser)
    clashes = sorted(set(takes) & set(TRAIN_SEARCHABLE))
    if clashes:
        raise ConfigError(f"{where}: {prefix}loss: {base.name!r} declares hyperparameter(s) {', '.join(clashes)}, "
                          "which are training settings' names: rename them in its declaration")
    space = mapping(space, where, f"{prefix}space")
    dists = {}
    for param, spec in space.items():
        key = f"{prefix}space.{param}"
        if param not in takes and param not in TRAIN_SEARCHABLE:
            allowed = ", ".join(list(takes) + list(TRAIN_SEARCHABLE))
            raise ConfigError(f"{where}: {key}: loss {base.name!r} does not take {shown(param)} (searchable: "
                              f"{allowed})")
        dists[str(param)] = (declared_distribution(takes.get(param), where, key) if spec == DECLARED
                             else parse_distribution(spec, where, key))
    published = mapping(published, where, f"{prefix}published")
    for param, value in published.items():
        if param not in dists:
            raise ConfigError(f"{where}: {prefix}published.{param}: not a searched parameter "
                              f"(searched: {', '.join(dists) or 'none'})")
        if not dists[param].contains(value):
            raise ConfigError(f"{where}: {prefix}published.{param}: {shown(value)} lies outside its searched range "
                              f"({dists[param].describe()})")
    sources = tuple(source for source in (loss_source, reg_source) if source is not None)
    return Family(loss=str(loss), reg=reg, space=dists, published=published, sources=sources)


def declared_distribution(spec, where: str, key: str) -> Distribution:
    """The distribution of `declared`: the hyperparameter's declared range, on its declared scale (int, log)."""
    if spec is None:
        raise ConfigError(f"{where}: {key}: {DECLARED!r} reads a loss hyperparameter's declaration, and a training "
                          "setting has none: give its distribution ({type, low, high})")
    if spec.strict or not (math.isfinite(spec.low) and math.isfinite(spec.high)) or (spec.log and spec.low <= 0):
        raise ConfigError(f"{where}: {key}: {DECLARED!r} needs a closed, finite declared range (and low > 0 on a log "
                          f"scale), and this one {spec.allowed}: give its distribution ({{type, low, high}})")
    kind = "int" if spec.integer else "loguniform" if spec.log else "uniform"
    return parse_distribution({"type": kind, "low": spec.low, "high": spec.high}, where, key)
