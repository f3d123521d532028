"""The triplet loss on the unit sphere, and the hardest in-batch negative for unsupervised triplets."""

from __future__ import annotations

import torch
from torch import Tensor

from .infonce import cos_sim, full_precision, unit_norm


@full_precision
def triplet(anchor: Tensor, pos: Tensor, neg: Tensor, margin: float) -> Tensor:
    """The triplet loss of the contrastive-learning note (Schroff et al., 2015), on L2-normalised embeddings:

        l_i = max(0, ||a_i - p_i||^2 - ||a_i - n_i||^2 + margin)

    On the unit sphere ||a - p||^2 = 2 - 2 s(a, p), so l_i > 0 exactly when s(a_i, p_i) - s(a_i, n_i) < margin / 2.

    Args:
        anchor: (N, H) anchors.
        pos: (N, H) positives.
        neg: (N, H) negatives, row i being anchor i's.
        margin: >= 0, in squared-distance units (between 0 and 4 on the unit sphere).

    Returns:
        The mean of l_i over the N anchors, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    a, p, n = unit_norm(anchor), unit_norm(pos), unit_norm(neg)
    gap = (a - p).pow(2).sum(dim=-1) - (a - n).pow(2).sum(dim=-1) + margin
    return gap.clamp_min(0).mean()


@torch.no_grad()
@full_precision
def hardest_in_batch_negatives(anchor: Tensor, candidates: Tensor) -> Tensor:
    """For each anchor i, the index j != i of the candidate most cosine-similar to it.

    Indices rather than rows, so that the caller can gather ``candidates[j]`` with gradient: the choice is
    not differentiable, the chosen rows are. Needs N >= 2.
    """
    sim = cos_sim(anchor, candidates)
    sim.fill_diagonal_(-torch.inf)  # a sentence's positive is not its negative
    return sim.argmax(dim=1)
