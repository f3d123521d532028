"""SimCSE's InfoNCE between two dropout views, with in-batch negatives: the default loss.

Paper: Gao, Yao and Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings", §3 (eq. 1, the
unsupervised objective; eq. 5, the supervised one with hard negatives); tau = 0.05 throughout (§3, Appendix A).

Needs: nothing beyond the two dropout views.

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings
    >>> from raycse.losses.simcse import SimCSE
    >>> z1 = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-1.0, 2.0, 0.0]])
    >>> z2 = torch.tensor([[1.0, 0.5, 2.0], [0.0, -1.0, 1.5], [-1.0, 1.5, 0.5]])
    >>> loss = SimCSE(tau=0.05)
    >>> round(loss(Embeddings(z1, z2)).item(), 4)
    0.0036
    >>> round(SimCSE(tau=1.0)(Embeddings(z1, z2)).item(), 4)  # a higher temperature softens the softmax
    0.64
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .declaration import Declaration, Hyperparameter
from .infonce import _cross_entropy_diagonal, cos_sim, full_precision
from .term import Embeddings, Term

SIMCSE_PAPER = "Gao, Yao and Chen, 2021: SimCSE: Simple Contrastive Learning of Sentence Embeddings"
# SimCSE's temperature, which DCLR (§5.1) and ImSimCSE (§5.1) train with too.
SIMCSE_TAU = Hyperparameter(0.05, low=0.0, strict=True, high=math.inf, log=True)


@full_precision
def info_nce(
    z1: Tensor, z2: Tensor, tau: float, hard_neg: Tensor | None = None, hard_neg_weight: float = 0.0
) -> Tensor:
    """SimCSE's InfoNCE loss with in-batch negatives (Gao et al., 2021, unsupervised and supervised objectives).

        l_i = -s(z1_i, z2_i)/tau + log sum_j exp(s(z1_i, z2_j)/tau)

    With ``hard_neg`` (supervised SimCSE: the contradiction of sentence i), the sum also runs over the N
    logits s(z1_i, hard_neg_j)/tau, and anchor i's own hard negative gets ``hard_neg_weight`` added to its
    logit (log alpha in SimCSE's weighting; 0, i.e. alpha = 1, weights it like any other negative).

    Form and scale: SimCSE's released code (princeton-nlp/SimCSE, simcse/models.py line 46, cosine / temp;
    lines 194-198, the in-batch and the hard-negative logits side by side; lines 204-210, ``hard_negative_weight``
    added to anchor i's own hard negative, "the logit of weight"; lines 201 and 212, ``nn.CrossEntropyLoss``: the
    mean over anchors). Eqs. 1 and 5 print l_i for one anchor; the code's mean is the scale tau and lr were tuned on.

    Args:
        z1: (N, H) anchors (first dropout view, or the premise).
        z2: (N, H) positives (second dropout view, or the entailment); z2_j for j != i are i's negatives.
        tau: temperature, > 0.
        hard_neg: optional (N, H) hard negatives.
        hard_neg_weight: added to logit (i, N + i).

    Returns:
        The mean of l_i over the N anchors, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    logits = cos_sim(z1, z2) / tau
    if hard_neg is not None:
        own_hard_neg = torch.eye(len(z1), dtype=logits.dtype, device=logits.device) * hard_neg_weight
        logits = torch.cat([logits, cos_sim(z1, hard_neg) / tau + own_hard_neg], dim=1)
    return _cross_entropy_diagonal(logits)


class SimCSE(Term):
    """Unsupervised SimCSE: `info_nce` between two dropout views."""

    declaration = Declaration(
        name="simcse",
        summary="InfoNCE between two dropout views, in-batch negatives",
        paper=SIMCSE_PAPER,
        section="§3, eq. 1; tau §3 and Appendix A",
        hyperparameters={"tau": SIMCSE_TAU},
        default=True,
    )

    def forward(self, emb: Embeddings) -> Tensor:
        return info_nce(emb.z1, emb.z2, **self.hparams)


__all__ = ["info_nce"]
