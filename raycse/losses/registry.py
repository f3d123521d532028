"""`build_loss`: the module of a loss by name, built-in or a user's own, plus a regulariser if one is named.

A built-in loss's class is found by importing the file the catalogue says declares it: defining the class registers
it (`term.BUILT_IN`). A user's own loss, named by a reference (``my_loss:MyLoss``), is loaded by raycse/losses/own.py.
"""

from __future__ import annotations

import importlib

from .catalogue import DECLARATIONS, MODULE_OF
from .declaration import REGULARISER_WEIGHT, Declaration, resolve_hyperparameters
from .names import combination, combination_specs
from .term import BUILT_IN, ContrastiveLoss, Regularised, Term


def loss_class(declaration: Declaration, name: str) -> type[Term]:
    """The Term class of a loss: a built-in one's, registered when its file is imported; else the user's, loaded."""
    if DECLARATIONS.get(declaration.name) is declaration:
        importlib.import_module(f"{__package__}.{MODULE_OF[declaration.name]}")
        return BUILT_IN[declaration.name]
    from . import own

    return own.load_term(name)


def build_loss(name: str, reg: str | None = None, **hparams: float) -> ContrastiveLoss:
    """The loss module for a loss, preset or reference ``name``, plus ``lambda`` times regulariser ``reg`` if given.

    Hyperparameters not given take their published default. An unknown name, a hyperparameter the combination does
    not take or a value out of range raises ConfigError, as does a ``reg`` other than the one a preset already
    includes.
    """
    display, base, regulariser = combination(name, reg)
    resolved = resolve_hyperparameters(display, combination_specs(base, regulariser), hparams)
    # a reference (a user's loss) is never part of a preset's name, so `name` and `reg` load it when it is one
    base_term = loss_class(base, name)(**{key: resolved[key] for key in base.hyperparameters})
    if regulariser is None:
        return base_term
    reg_term = loss_class(regulariser, reg)(**{key: resolved[key] for key in regulariser.hyperparameters})
    return Regularised(display, base_term, reg_term, resolved[REGULARISER_WEIGHT])


__all__ = ["build_loss"]
