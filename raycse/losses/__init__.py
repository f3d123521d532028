"""Contrastive losses for sentence embeddings: SimCSE and the variants whose hyperparameters raycse searches, and the
form in which a user writes a loss of their own.

One file per loss: its pure function of (unnormalised) embeddings, computed in float32 or wider and returning the
mean over the batch as a 0-d tensor; its `Term` module with ``declaration = Declaration(...)`` (paper and section,
hyperparameters with their defaults and ranges, whether it needs supervised triplets, a dropout-off pass or a
complementary model); and a docstring with its paper and a runnable example. `build_loss` builds any of them by name.

  declaration  Declaration, Hyperparameter, Preset: the form (no torch)
  catalogue    every built-in loss, read from the loss files without running them (no torch), and the names they
               combine into (presets, `base+reg`)
  names        what a loss's name means (built-in, preset, base+reg, a user's reference) and what it takes (no torch)
  term         Term, the base class of every loss module, Regularised, Embeddings (what the trainer hands a loss)
  registry     build_loss
  own          a user's loss named by a reference (./my_loss.py:MyLoss, package.module:Name, an entry point):
               loaded, checked, hashed, shipped to the trials
  listing      `raycse losses`
  infonce, correlation   the pieces several losses share (cosine similarities in full precision, the diagonal
                         cross-entropy; the cross-correlation of dimensions)
  every other file   one built-in loss each, found by the catalogue: simcse.py, simcse_sup.py, focal.py,
                     off_dropout.py, imsimcse.py, dcl_loss.py, barlow.py, dclr.py, triplet_loss.py

The catalogue and the declaration classes are imported at once (the command line reads them without torch); every
other name is imported the first time it is asked for. No file bears the name of a function it exports
(triplet_loss.py, not triplet.py): importing a submodule sets the package's attribute of that name to it.

May import: the leaves (errors, records) only.
"""

import importlib

from .catalogue import (
    BASE_LOSSES,
    BASES,
    DEFAULT_LOSS,
    EXPORTS,
    FILES,
    LOSS_NAMES,
    PRESET_INFO,
    PRESETS,
    REGULARISER_INFO,
    REGULARISERS,
    LossInfo,
    hyperparameter_catalogue,
)
from .declaration import Declaration, Hyperparameter, Preset
from .names import loss_hyperparameters

_SUBMODULES = set(FILES)  # every file of the package, as the catalogue read them


def __getattr__(name: str):
    if name in _SUBMODULES:  # `raycse.losses.registry` before anything imported it
        return importlib.import_module(f"{__name__}.{name}")
    if name in EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
        globals()[name] = value  # once: later look-ups find it without coming here
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = ["BASES", "BASE_LOSSES", "DEFAULT_LOSS", "Declaration", "Hyperparameter", "LOSS_NAMES", "LossInfo", "PRESETS",
           "PRESET_INFO", "Preset", "REGULARISERS", "REGULARISER_INFO", "hyperparameter_catalogue",
           "loss_hyperparameters"]
__all__ += sorted(set(EXPORTS) - set(__all__))  # noqa: PLE0605 - what the loss files export, read by the catalogue
