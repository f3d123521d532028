"""Barlow Twins' redundancy-reduction regulariser on the two dropout views (the baseline of ImSimCSE §4.1).

Paper: Zbontar et al., 2021, "Barlow Twins: Self-Supervised Learning via Redundancy Reduction", §2 (eq. 1); the
trade-off lambda_bt = 0.0051 is its released code's default.

Needs: nothing beyond the two dropout views; a regulariser, added with weight lambda to a base loss (`reg: barlow`).

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings
    >>> from raycse.losses.barlow import BarlowTwins
    >>> z1 = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-1.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    >>> z2 = torch.tensor([[1.0, 0.5, 2.0], [0.0, -1.0, 1.5], [-1.0, 1.5, 0.5], [0.5, 1.0, 1.0]])
    >>> round(BarlowTwins(lambda_bt=0.0051)(Embeddings(z1, z2)).item(), 4)
    0.0347
"""

from __future__ import annotations

import math

from torch import Tensor

from .correlation import CORRELATION_ROWS, cross_correlation
from .declaration import Declaration, Hyperparameter
from .infonce import full_precision
from .term import Embeddings, Term


@full_precision
def barlow_twins(z1: Tensor, z2: Tensor, lambda_bt: float) -> Tensor:
    """Barlow Twins' redundancy-reduction loss (Zbontar et al., 2021; the baseline of ImSimCSE §4.1), with C the
    (H, H) Pearson correlation between the columns of z1 and z2 over the batch (`cross_correlation`):

        L = sum_c (1 - C_cc)^2 + lambda_bt sum_c sum_{d != c} C_cd^2

    The first term makes the two views agree dimension by dimension, the second decorrelates the
    dimensions from each other.

    Form: Barlow Twins' released code (facebookresearch/barlowtwins, main.py lines 212-220:
    ``c = self.bn(z1).T @ self.bn(z2)`` with an affine-free BatchNorm1d, ``c.div_(self.args.batch_size)``,
    ``on_diag + self.args.lambd * off_diag``, both sums; ``--lambd`` defaults to 0.0051, line 39): the columns are
    centred and scaled over the batch, and the terms are summed over dimensions, not averaged. ImSimCSE's eq. 4
    prints C uncentred (the cosine between raw columns) and a stray minus before the first sum; its own code for
    this baseline (Jiahao004/SimCSE-plus-plus, simcse/models_re_vicreg.py lines 426-435, ``scd_loss``) centres with
    the same BatchNorm, as here, with an off-diagonal weight of 0.012. raycse keeps Barlow Twins' 0.0051 as the
    default and searches lambda_bt over a range holding both (barlow.yaml).

    Args:
        z1: (N, H) first view.
        z2: (N, H) second view.
        lambda_bt: weight of the off-diagonal (redundancy) term, >= 0.

    Returns:
        A 0-d tensor in float32 (float64 for float64 inputs); a sum over dimensions, not a mean.
    """
    c = cross_correlation(z1, z2)
    on_diagonal = c.diagonal()
    off_diagonal_squares = c.pow(2).sum() - on_diagonal.pow(2).sum()
    return (1 - on_diagonal).pow(2).sum() + lambda_bt * off_diagonal_squares


class BarlowTwins(Term):
    """The Barlow Twins regulariser `barlow_twins` on the two dropout views."""

    declaration = Declaration(
        name="barlow",
        summary="Barlow Twins' redundancy reduction on the two dropout views",
        paper="Zbontar et al., 2021: Barlow Twins: Self-Supervised Learning via Redundancy Reduction",
        section="§2, eq. 1; lambda_bt the released code's default",
        hyperparameters={"lambda_bt": Hyperparameter(0.0051, low=0.0, high=math.inf)},
        regulariser=True,
        # No paper reports a weight for adding Barlow Twins to SimCSE: the same default as DCL's (ImSimCSE §5.1).
        weight=Hyperparameter(0.1, low=0.0, high=math.inf),
    )

    def forward(self, emb: Embeddings) -> Tensor:
        return barlow_twins(emb.z1, emb.z2, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return CORRELATION_ROWS


__all__ = ["barlow_twins"]
