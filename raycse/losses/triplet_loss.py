"""The triplet loss on the unit sphere; its negative is the NLI contradiction when there is one, else the hardest
other row of the batch.

Paper: Schroff, Kalenichenko and Philbin, 2015, "FaceNet: A Unified Embedding for Face Recognition and Clustering",
§3.1 (eq. 1), on L2-normalised embeddings.

Needs: nothing beyond the two views; with supervised triplets (`sup_data`) the contradiction is the negative.

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings
    >>> from raycse.losses.triplet_loss import Triplet
    >>> anchors = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    >>> positives = torch.tensor([[1.0, 0.0, 0.1], [0.0, 1.0, 0.5], [0.2, 0.9, 1.0]])
    >>> round(Triplet(margin=0.5)(Embeddings(anchors, positives)).item(), 4)
    0.0115
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .declaration import Declaration, Hyperparameter
from .infonce import cos_sim, full_precision, unit_norm
from .term import Embeddings, Term


@full_precision
def triplet(anchor: Tensor, pos: Tensor, neg: Tensor, margin: float) -> Tensor:
    """The triplet loss of the contrastive-learning note (Schroff et al., 2015), on L2-normalised embeddings:

        l_i = max(0, ||a_i - p_i||^2 - ||a_i - n_i||^2 + margin)

    On the unit sphere ||a - p||^2 = 2 - 2 s(a, p), so l_i > 0 exactly when s(a_i, p_i) - s(a_i, n_i) < margin / 2.

    Scale: the mean over the N triplets, where the note prints one triplet's loss and FaceNet's sum runs over
    all triplets. Neither releases code nor tunes a learning rate for sentences, so nothing was tuned on either
    scale; the mean keeps a step's size independent of N, as every other loss here does.

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


class Triplet(Term):
    """`triplet` with the contradiction as negative, or without one the hardest in-batch negative."""

    # The note gives no margin. On the unit sphere margin 0.5 asks s(a, p) to beat s(a, n) by 0.25: a clear gap, yet
    # one that the hardest in-batch negative, often a near-paraphrase (half of SimCSE's in-batch negatives have
    # cosine > 0.7, DCLR Fig. 1), does not keep active on every triplet.
    declaration = Declaration(
        name="triplet",
        summary="the triplet loss on the unit sphere; negative: the contradiction, else the hardest in-batch row",
        paper="Schroff, Kalenichenko and Philbin, 2015: FaceNet",
        section="§3.1, eq. 1",
        hyperparameters={"margin": Hyperparameter(0.5, low=0.0, high=math.inf)},
    )

    def forward(self, emb: Embeddings) -> Tensor:
        neg = emb.z3 if emb.z3 is not None else emb.z2[hardest_in_batch_negatives(emb.z1, emb.z2)]
        return triplet(emb.z1, emb.z2, neg, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        if supervised:
            return 1, "each anchor's contradiction is its negative"
        return 2, "without NLI data its negative is the hardest other row of the step"


__all__ = ["hardest_in_batch_negatives", "triplet"]
