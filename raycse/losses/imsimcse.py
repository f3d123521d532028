"""ImSimCSE's off-dropout InfoNCE: negatives from a dropout-off pass (Xu et al., 2023, §3.2)."""

from __future__ import annotations

import math

from torch import Tensor

from .infonce import _cross_entropy_diagonal, cos_sim, full_precision, paired_cos_sim


@full_precision
def off_dropout_info_nce(z1: Tensor, z2: Tensor, z0: Tensor, tau: float, m: float) -> Tensor:
    """Off-dropout InfoNCE (Xu et al., 2023, "ImSimCSE: Improving Contrastive Learning for Sentence
    Embeddings from Two Perspectives", eq. 3):

        l_i = -s(z1_i, z2_i)/tau + log( exp(s(z1_i, z2_i)/tau) + m sum_{j != i} exp(s(z0_i, z0_j)/tau) )

    The positive keeps its dropout noise (the paper finds that diversity helps), while the negatives come
    from the dropout-off embeddings z0, whose noise only hurts. m multiplies the negatives, so it enters as
    log m added to their logits. (The released code scales the positive by a "pos_ratio" instead; the
    paper's m on the negatives is what this computes.)

    Args:
        z1: (N, H) anchors (first dropout view).
        z2: (N, H) positives (second dropout view).
        z0: (N, H) the same sentences encoded with dropout off.
        tau: temperature, > 0.
        m: weight of the negatives, > 0.

    Returns:
        The mean of l_i over the N anchors, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    logits = (cos_sim(z0, z0) / tau + math.log(m)).diagonal_scatter(paired_cos_sim(z1, z2) / tau)
    return _cross_entropy_diagonal(logits)
