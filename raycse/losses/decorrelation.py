"""Regularisers on the cross-correlation between embedding dimensions: ImSimCSE's dimension-wise
contrastive loss (DCL) and Barlow Twins.

Both act on the H x H matrix C of Pearson correlations between dimension c of z1 and dimension d of z2
over the batch, and both want each dimension to correlate with itself across the two views more than
with any other dimension.
"""

from __future__ import annotations

from torch import Tensor

from .infonce import _cross_entropy_diagonal, full_precision, unit_norm, upcast


def cross_correlation(z1: Tensor, z2: Tensor) -> Tensor:
    """The (H, H) Pearson correlation C_cd between column c of z1 and column d of z2 (both (N, H)).

    Each column is centred over the batch and scaled to unit norm, so C = z1~^T z2~. This is what the
    ImSimCSE code computes with an affine-free BatchNorm followed by z1~^T z2~ / N. A constant column
    centres to zero and gets correlation 0 with everything (the norm has an epsilon), not NaN.
    """
    z1, z2 = upcast(z1), upcast(z2)
    return unit_norm(z1 - z1.mean(dim=0), dim=0).T @ unit_norm(z2 - z2.mean(dim=0), dim=0)


@full_precision
def dcl(z1: Tensor, z2: Tensor, tau_dcl: float) -> Tensor:
    """Dimension-wise contrastive loss (Xu et al., 2023, ImSimCSE, eq. 5): InfoNCE over dimensions,
    where dimension c of z1 must pick out dimension c of z2 among all H dimensions:

        L = mean_c [ -C_cc/tau_dcl + log sum_d exp(C_cd/tau_dcl) ]

    Unlike Barlow Twins it asks only that C_cc beat C_cd, not that C be the identity, which a batch of
    N < H sentences (rank(C) <= N) cannot reach. The paper's eq. 5 omits the 1/N in C; its tau_dcl = 5
    belongs to the released code's correlation scale, which is used here.

    Args:
        z1: (N, H) first view.
        z2: (N, H) second view.
        tau_dcl: temperature, > 0.

    Returns:
        The mean over the H dimensions, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    return _cross_entropy_diagonal(cross_correlation(z1, z2) / tau_dcl)


@full_precision
def barlow_twins(z1: Tensor, z2: Tensor, lambda_bt: float) -> Tensor:
    """Barlow Twins' redundancy-reduction loss (Zbontar et al., 2021; the baseline of ImSimCSE §4.1):

        L = sum_c (1 - C_cc)^2 + lambda_bt sum_c sum_{d != c} C_cd^2

    The first term makes the two views agree dimension by dimension, the second decorrelates the
    dimensions from each other.

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
