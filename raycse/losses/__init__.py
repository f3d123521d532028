"""Contrastive losses for sentence embeddings: SimCSE and the variants whose hyperparameters raycse searches.

Each loss is a pure function of (unnormalised) embeddings, computed in float32 or wider, returning the mean
over the batch as a 0-d tensor; `build_loss` wraps them into the modules the trainer composes.

What each loss is (its paper, its hyperparameters' defaults and ranges, the presets) lives in `catalogue`, which
needs no torch: it is imported here at once. The functions and modules, which need torch, are imported the first
time one of them is asked for, so that the command line reads the catalogue without paying for torch.

May import: the leaves (errors) only.
"""

import importlib

from .catalogue import (
    BASE_LOSSES,
    BASES,
    LOSS_NAMES,
    PRESETS,
    REGULARISER_INFO,
    REGULARISERS,
    Hyperparameter,
    LossInfo,
    hyperparameter_catalogue,
    loss_hyperparameters,
)

# name -> the submodule that defines it (imported on first use: each needs torch). No submodule bears a function's
# name (triplet_loss.py, not triplet.py): importing a submodule sets the package's attribute of that name to it.
_LAZY = {
    "dclr_noise_negatives": "dclr", "debiased_info_nce": "dclr", "false_negative_weights": "dclr",
    "non_uniformity_loss": "dclr",
    "barlow_twins": "decorrelation", "cross_correlation": "decorrelation", "dcl": "decorrelation",
    "focal_info_nce": "focal",
    "off_dropout_info_nce": "imsimcse",
    "cos_sim": "infonce", "info_nce": "infonce", "paired_cos_sim": "infonce",
    "hardest_in_batch_negatives": "triplet_loss", "triplet": "triplet_loss",
    "ContrastiveLoss": "registry", "Embeddings": "registry", "build_loss": "registry",
}

_SUBMODULES = {*_LAZY.values(), "catalogue"}


def __getattr__(name: str):
    if name in _SUBMODULES:  # `raycse.losses.registry` before anything imported it
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value  # once: later look-ups find it without coming here
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "BASES",
    "BASE_LOSSES",
    "LOSS_NAMES",
    "PRESETS",
    "REGULARISERS",
    "REGULARISER_INFO",
    "ContrastiveLoss",
    "Embeddings",
    "Hyperparameter",
    "LossInfo",
    "barlow_twins",
    "build_loss",
    "cos_sim",
    "cross_correlation",
    "dcl",
    "dclr_noise_negatives",
    "debiased_info_nce",
    "false_negative_weights",
    "focal_info_nce",
    "hardest_in_batch_negatives",
    "info_nce",
    "hyperparameter_catalogue",
    "loss_hyperparameters",
    "non_uniformity_loss",
    "off_dropout_info_nce",
    "paired_cos_sim",
    "triplet",
]
