"""Contrastive losses for sentence embeddings: SimCSE and the variants whose hyperparameters raycse searches.

Each loss is a pure function of (unnormalised) embeddings, computed in float32 or wider, returning the mean
over the batch as a 0-d tensor; `build_loss` wraps them into the modules the trainer composes.

May import: the leaves (errors) only.
"""

from .dclr import dclr_noise_negatives, debiased_info_nce, false_negative_weights, non_uniformity_loss
from .decorrelation import barlow_twins, cross_correlation, dcl
from .focal import focal_info_nce
from .imsimcse import off_dropout_info_nce
from .infonce import cos_sim, info_nce, paired_cos_sim
from .registry import (
    BASE_LOSSES,
    LOSS_NAMES,
    PRESETS,
    REGULARISERS,
    ContrastiveLoss,
    Embeddings,
    Hyperparameter,
    build_loss,
    hyperparameter_catalogue,
    loss_hyperparameters,
)
from .triplet import hardest_in_batch_negatives, triplet

__all__ = [
    "BASE_LOSSES",
    "LOSS_NAMES",
    "PRESETS",
    "REGULARISERS",
    "ContrastiveLoss",
    "Embeddings",
    "Hyperparameter",
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
