"""The loss modules the trainer composes, and `build_loss`, which builds one by name.

A module wraps one pure function of `raycse.losses`: it holds that loss's hyperparameters (under the papers'
names, which are also the functions' keyword names) and says which forward passes the trainer must run for
it. `build_loss("focal", reg="dcl", tau=0.05)` returns focal + lambda * dcl; presets name common pairs.

A module may also record statistics of its last forward pass (`ContrastiveLoss.stats`), such as how many
negatives DCLR's threshold removed, so that a run can show whether a hyperparameter acts at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from .catalogue import (
    BASES,
    REGULARISER_INFO,
    Hyperparameter,
    combination,
    combination_specs,
    resolve_hyperparameters,
)
from .dclr import dclr_noise_negatives, debiased_info_nce, false_negative_weights
from .decorrelation import barlow_twins, dcl
from .focal import focal_info_nce
from .imsimcse import off_dropout_info_nce
from .infonce import cos_sim, full_precision, info_nce
from .triplet_loss import hardest_in_batch_negatives, triplet


@dataclass
class Embeddings:
    """What the trainer hands a loss each step, already all-gathered across workers."""

    z1: Tensor  # (N, H) anchors: first dropout view (unsupervised) or sent0 (supervised)
    z2: Tensor  # (N, H) positives: second dropout view (unsupervised) or sent1 (supervised)
    z3: Tensor | None = None  # (N, H) hard negatives (supervised NLI 'hard_neg')
    z0: Tensor | None = None  # (N, H) z1's sentences encoded with dropout off (if loss.needs_z0)
    complementary: Tensor | None = None  # (N, H) frozen complementary encoder (if loss.needs_complementary)


def _require(emb: Embeddings, field: str, loss: str) -> Tensor:
    value = getattr(emb, field)
    if value is None:
        raise ValueError(f"loss {loss!r} needs Embeddings.{field}, which the trainer did not compute")
    return value


class ContrastiveLoss(nn.Module):
    """Base class of every module `build_loss` returns: ``forward(emb)`` gives a 0-d float32 loss.

    The ``needs_*`` flags tell the trainer which extra forward passes to run: a dropout-off pass (z0),
    supervised triplets (z3), the frozen complementary encoder (complementary).
    """

    name: str
    hparams: dict[str, float]
    needs_z0: bool = False
    needs_hard_neg: bool = False
    needs_complementary: bool = False

    def __init__(self) -> None:
        super().__init__()
        self._stats: dict[str, Tensor] = {}

    def forward(self, emb: Embeddings) -> Tensor:
        raise NotImplementedError

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        """The fewest rows (sentences, or NLI triplets) one step must give this loss for it to learn anything, and
        why: below it the loss has nothing to contrast and trains to a constant (a loss of 0 that teaches nothing)."""
        return 2, "its negatives are the other rows of the step"

    def stats(self) -> dict[str, Tensor]:
        """Statistics of the last `forward`, by name: detached 0-d float32 tensors on the embeddings' device.

        They stay on the device so that recording them costs no host synchronisation; the caller moves them
        to the host when it logs. A loss with nothing to report returns {}.
        """
        return dict(self._stats)


class Term(ContrastiveLoss):
    """One paper's loss: a pure function of `raycse.losses` and its hyperparameters.

    ``hyperparameters`` maps each name the function takes as keyword to its default and range, so that
    the subclass can call the function with ``**self.hparams``.
    """

    hyperparameters: ClassVar[dict[str, Hyperparameter]]

    def __init__(self, **hparams: float) -> None:
        super().__init__()
        self.hparams = resolve_hyperparameters(self.name, self.hyperparameters, hparams)

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value:g}" for key, value in self.hparams.items())


class SimCSE(Term):
    """Unsupervised SimCSE: `info_nce` between two dropout views."""

    name = "simcse"
    hyperparameters = BASES[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        return info_nce(emb.z1, emb.z2, **self.hparams)


class SupervisedSimCSE(Term):
    """Supervised SimCSE: `info_nce` over NLI (premise, entailment, contradiction) triplets."""

    name = "simcse-sup"
    needs_hard_neg = True
    hyperparameters = BASES[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        return info_nce(emb.z1, emb.z2, hard_neg=_require(emb, "z3", self.name), **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return 1, "each anchor's contradiction is a negative"


class FocalInfoNCE(Term):
    """`focal_info_nce` between two dropout views."""

    name = "focal"
    hyperparameters = BASES[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        return focal_info_nce(emb.z1, emb.z2, **self.hparams)


class OffDropoutInfoNCE(Term):
    """ImSimCSE's `off_dropout_info_nce`: negatives from a dropout-off pass, in both parametrisations."""

    name = "off-dropout"
    needs_z0 = True
    hyperparameters = BASES[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        return off_dropout_info_nce(emb.z1, emb.z2, _require(emb, "z0", self.name), **self.hparams)


class DCLR(Term):
    """DCLR: `debiased_info_nce` with false negatives removed and K = round(k N) noise negatives.

    The noise is drawn from the default torch generator on each call, so a seeded run reproduces.
    """

    name = "dclr"
    needs_complementary = True
    hyperparameters = BASES[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        h = self.hparams
        n, dim = emb.z1.shape
        init = torch.randn(round(h["k"] * n), dim, device=emb.z1.device, dtype=torch.float32) * h["noise_sigma"]
        noise = dclr_noise_negatives(emb.z1, emb.z2, init, h["noise_steps"], h["noise_beta"], h["tau_u"])
        weights = false_negative_weights(_require(emb, "complementary", self.name), h["phi"])
        self._stats = dclr_stats(emb.z1, noise, weights, h["tau"])
        return debiased_info_nce(emb.z1, emb.z2, noise, weights, h["tau"])


@torch.no_grad()
@full_precision
def dclr_stats(z1: Tensor, noise: Tensor, weights: Tensor, tau: float) -> dict[str, Tensor]:
    """Whether DCLR's phi and k act on a batch (DCLR degenerates into SimCSE when neither does):

        dclr_removed_fraction  the fraction of the N(N - 1) in-batch negatives whose weight alpha_ij is 0
        dclr_noise_logit       mean over anchors i and noise vectors k of s(z1_i, noise_k)/tau
                               (absent when there is no noise vector, K = 0)
    """
    n = len(weights)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=weights.device)
    removed = ((weights == 0) & off_diagonal).sum(dtype=torch.float32) / max(n * (n - 1), 1)
    stats = {"dclr_removed_fraction": removed}
    if len(noise) > 0:
        stats["dclr_noise_logit"] = (cos_sim(z1.detach(), noise) / tau).mean().float()
    return stats


class Triplet(Term):
    """`triplet` with the contradiction as negative, or without one the hardest in-batch negative."""

    name = "triplet"
    hyperparameters = BASES[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        neg = emb.z3 if emb.z3 is not None else emb.z2[hardest_in_batch_negatives(emb.z1, emb.z2)]
        return triplet(emb.z1, emb.z2, neg, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        if supervised:
            return 1, "each anchor's contradiction is its negative"
        return 2, "without NLI data its negative is the hardest other row of the step"


# A correlation over the batch, centred per dimension: one row centres to zero, and two rows to +-1 whatever the
# embeddings are, so neither gives the regulariser a gradient.
CORRELATION_ROWS = (3, "its correlations over the batch are constant below 3 rows")


class DCL(Term):
    """ImSimCSE's dimension-wise contrastive regulariser `dcl` on the two dropout views."""

    name = "dcl"
    hyperparameters = REGULARISER_INFO[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        return dcl(emb.z1, emb.z2, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return CORRELATION_ROWS


class BarlowTwins(Term):
    """The Barlow Twins regulariser `barlow_twins` on the two dropout views."""

    name = "barlow"
    hyperparameters = REGULARISER_INFO[name].hyperparameters

    def forward(self, emb: Embeddings) -> Tensor:
        return barlow_twins(emb.z1, emb.z2, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return CORRELATION_ROWS


class Regularised(ContrastiveLoss):
    """base + lambda * regulariser, each term computed on the same embeddings."""

    def __init__(self, name: str, base: Term, regulariser: Term, weight: float) -> None:
        super().__init__()
        self.name, self.base, self.regulariser, self.weight = name, base, regulariser, weight
        self.hparams = {**base.hparams, "lambda": weight, **regulariser.hparams}
        self.needs_z0 = base.needs_z0 or regulariser.needs_z0
        self.needs_hard_neg = base.needs_hard_neg or regulariser.needs_hard_neg
        self.needs_complementary = base.needs_complementary or regulariser.needs_complementary

    def forward(self, emb: Embeddings) -> Tensor:
        return self.base(emb) + self.weight * self.regulariser(emb)

    def stats(self) -> dict[str, Tensor]:
        return {**self.base.stats(), **self.regulariser.stats()}

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return max(self.base.rows_needed(supervised), self.regulariser.rows_needed(supervised))

    def extra_repr(self) -> str:
        return f"name={self.name!r}, lambda={self.weight:g}"


_BASES: dict[str, type[Term]] = {
    cls.name: cls for cls in (SimCSE, SupervisedSimCSE, FocalInfoNCE, OffDropoutInfoNCE, DCLR, Triplet)
}
_REGULARISERS: dict[str, type[Term]] = {cls.name: cls for cls in (DCL, BarlowTwins)}


def build_loss(name: str, reg: str | None = None, **hparams: float) -> ContrastiveLoss:
    """The loss module for a base loss or preset ``name``, plus ``lambda`` times regulariser ``reg`` if given.

    Hyperparameters not given take their published default. An unknown name, a hyperparameter the
    combination does not take or a value out of range raises ConfigError, as does a ``reg`` other than
    the one a preset already includes.
    """
    display_name, base_name, reg_name = combination(name, reg)
    resolved = resolve_hyperparameters(display_name, combination_specs(base_name, reg_name), hparams)
    base, regulariser = _BASES[base_name], _REGULARISERS.get(reg_name)
    base_term = base(**{key: resolved[key] for key in base.hyperparameters})
    if regulariser is None:
        return base_term
    reg_term = regulariser(**{key: resolved[key] for key in regulariser.hyperparameters})
    return Regularised(display_name, base_term, reg_term, resolved["lambda"])
