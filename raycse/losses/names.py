"""What a loss's name means, for every name a setting may hold: a built-in loss, a preset, a `base+reg` combination,
or a user's own loss by reference (raycse/losses/own.py); and the hyperparameters that the combination takes.

Without torch for the built-in names (the command line's flags and the space files' checks read them); a reference
imports the user's file.
"""

from __future__ import annotations

from ..errors import ConfigError, shown
from . import own
from .catalogue import (
    DECLARATIONS,
    DEFAULT_LOSS,
    LOSS_NAMES,
    PRESETS,
    REGULARISERS,
)
from .declaration import REGULARISER_WEIGHT, Declaration, Hyperparameter


def declaration(name: str, role: str = "loss") -> Declaration:
    """The declaration of a built-in loss or regulariser, or of a user's own (a reference, loaded: own.py)."""
    if name in DECLARATIONS:
        return DECLARATIONS[name]
    if own.is_reference(name):
        return own.load_term(name).declaration
    choices = LOSS_NAMES if role == "loss" else REGULARISERS
    raise ConfigError(f"unknown {role} {shown(name)} (choose from {', '.join(choices)})",
                      key="loss" if role == "loss" else "reg")


def combination(name: str, reg: str | None) -> tuple[str, Declaration, Declaration | None]:
    """(display name, base loss, regulariser or None) of loss ``name`` plus ``reg``; ConfigError for an unknown
    name, a regulariser trained alone, or a ``reg`` other than the one a preset (or `base+reg`) already includes."""
    if not isinstance(name, str):
        raise ConfigError(f"unknown loss {shown(name)} (choose from {', '.join(LOSS_NAMES)})", key="loss")
    if reg is not None and not isinstance(reg, str):
        raise ConfigError(f"unknown regulariser {shown(reg)} (choose from {', '.join(REGULARISERS)})", key="reg")
    included = PRESETS.get(name)
    if included is None and name.count("+") == 1 and ":" not in name and name not in DECLARATIONS:
        included = tuple(name.split("+"))  # 'focal+dcl'
    if included is not None:
        if reg is not None and reg != included[1]:
            raise ConfigError(f"loss {name!r} already includes regulariser {included[1]!r}, so reg={reg!r} conflicts",
                              key="reg")
        base_name, reg = included
    else:
        base_name = name
    regulariser = None if reg is None else declaration(reg, "regulariser")
    if regulariser is not None and not regulariser.regulariser:
        raise ConfigError(f"{shown(reg)} is a loss, not a regulariser (choose from {', '.join(REGULARISERS)})",
                          key="reg")
    base = declaration(base_name)
    if base.regulariser:
        raise ConfigError(f"{shown(base_name)} is a regulariser: add it to a loss (reg: {base.name}), or name the "
                          f"combination ('{DEFAULT_LOSS}+{base.name}')", key="loss")
    if included is not None:
        return name, base, regulariser
    return (base.name if regulariser is None else f"{base.name}+{regulariser.name}"), base, regulariser


def combination_specs(base: Declaration, reg: Declaration | None) -> dict[str, Hyperparameter]:
    """The hyperparameters of base loss ``base`` plus ``lambda`` times regulariser ``reg`` (if not None)."""
    if reg is None:
        return dict(base.hyperparameters)
    return {**base.hyperparameters, REGULARISER_WEIGHT: reg.weight, **reg.hyperparameters}


def loss_hyperparameters(name: str, reg: str | None = None) -> dict[str, float]:
    """The hyperparameters that loss ``name`` (plus regulariser ``reg``) takes, with their published defaults."""
    _, base, regulariser = combination(name, reg)
    return {key: spec.default for key, spec in combination_specs(base, regulariser).items()}


__all__ = ["loss_hyperparameters"]
