"""Focal-InfoNCE: InfoNCE whose logits up-weight hard negatives (Hou and Li, 2023)."""

from __future__ import annotations

from torch import Tensor

from .infonce import _cross_entropy_diagonal, cos_sim, full_precision


@full_precision
def focal_info_nce(z1: Tensor, z2: Tensor, tau: float, m: float) -> Tensor:
    """Focal-InfoNCE (Hou and Li, 2023, "Improving Contrastive Learning of Sentence Embeddings with
    Focal-InfoNCE", eq. 2), with s_ij = s(z1_i, z2_j):

        l_i = -s_ii^2/tau + log( exp(s_ii^2/tau) + sum_{j != i} exp(s_ij (s_ij + m)/tau) )

    A negative with s_ij > 1 - m is pushed up (it is "hard"), one below is pushed down; squaring the
    positive gives less weight to positive pairs that dropout made dissimilar.

    Args:
        z1: (N, H) anchors (first dropout view).
        z2: (N, H) positives (second dropout view); z2_j for j != i are i's negatives.
        tau: temperature, > 0.
        m: hardness, in [0, 1].

    Returns:
        The mean of l_i over the N anchors, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    sim = cos_sim(z1, z2)
    logits = (sim * (sim + m) / tau).diagonal_scatter(sim.diagonal() ** 2 / tau)
    return _cross_entropy_diagonal(logits)
