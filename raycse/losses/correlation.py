"""The cross-correlation between embedding dimensions over a batch, which the two decorrelation regularisers (DCL,
Barlow Twins) act on: both want each dimension to correlate with itself across the two views more than with any other
dimension.
"""

from __future__ import annotations

from torch import Tensor

from .infonce import unit_norm, upcast


def cross_correlation(z1: Tensor, z2: Tensor) -> Tensor:
    """The (H, H) Pearson correlation C_cd between column c of z1 and column d of z2 (both (N, H)).

    Each column is centred over the batch and scaled to unit norm, so C = z1~^T z2~. This is what the
    ImSimCSE and Barlow Twins code computes with an affine-free BatchNorm (the biased variance, 1/N) followed
    by z1~^T z2~ / N; its epsilon (1e-5, added to the variance) and this one (1e-8, on the norm) differ only for
    columns nearly constant over the batch. A constant column centres to zero and gets correlation 0 with
    everything (the norm has an epsilon), not NaN.
    """
    z1, z2 = upcast(z1), upcast(z2)
    return unit_norm(z1 - z1.mean(dim=0), dim=0).T @ unit_norm(z2 - z2.mean(dim=0), dim=0)


# A correlation over the batch, centred per dimension: one row centres to zero, and two rows to +-1 whatever the
# embeddings are, so neither gives a regulariser on it a gradient.
CORRELATION_ROWS = (3, "its correlations over the batch are constant below 3 rows")

__all__ = ["cross_correlation"]
