"""The losses a space file searches: one `Family` for a single-loss file (`loss`, `reg`, `space`, `published` at the
top level), several for a conditional one (`families:`), each a loss with its searched parameters and the paper's
published point, checked against the loss registry.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_name, mapping, no_unknown
from raycse.settings.config import searchable_settings
from raycse.settings.distributions import Distribution, parse_distribution

TRAIN_SEARCHABLE = searchable_settings()  # training settings a space may search (lr, batch_size, pooler, ...)
FAMILY_KEYS = {"loss", "reg", "space", "published"}


@dataclass
class Family:
    """One loss (base or preset, optionally with a regulariser), its searched parameters and published point."""

    loss: str
    reg: str | None
    space: dict[str, Distribution]
    published: dict[str, Any]


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
    space = mapping(space, where, f"{prefix}space")
    dists = {}
    for param, spec in space.items():
        key = f"{prefix}space.{param}"
        if param not in takes and param not in TRAIN_SEARCHABLE:
            allowed = ", ".join(list(takes) + list(TRAIN_SEARCHABLE))
            raise ConfigError(f"{where}: {key}: loss {loss!r} does not take {shown(param)} (searchable: {allowed})")
        dists[str(param)] = parse_distribution(spec, where, key)
    published = mapping(published, where, f"{prefix}published")
    for param, value in published.items():
        if param not in dists:
            raise ConfigError(f"{where}: {prefix}published.{param}: not a searched parameter "
                              f"(searched: {', '.join(dists) or 'none'})")
        if not dists[param].contains(value):
            raise ConfigError(f"{where}: {prefix}published.{param}: {shown(value)} lies outside its searched range "
                              f"({dists[param].describe()})")
    return Family(loss=str(loss), reg=reg, space=dists, published=published)
