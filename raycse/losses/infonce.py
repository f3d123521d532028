"""InfoNCE (SimCSE) and the pieces every InfoNCE-style loss in this package shares.

Every variant here is "InfoNCE with different logits": it builds an (N, M) logit matrix whose column i is
anchor i's positive, then calls `_cross_entropy_diagonal`. Masking or re-weighting a negative is done in log
space, by adding log(weight) to its logit, so that one logsumexp path serves them all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

# Guards the division by the norm: a zero vector then has cosine 0 with everything instead of NaN.
EPS = 1e-8


def full_precision(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run a loss with autocast off, so that its matmuls and logsumexps stay in float32 (or float64).

    Under bf16 autocast a matmul would be recomputed in bf16 even after the inputs are upcast; with
    a temperature of 0.05 a bf16 logit carries an error of about 0.1, which is too coarse for a softmax.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        device = next(a.device for a in (*args, *kwargs.values()) if isinstance(a, Tensor))
        with torch.autocast(device.type, enabled=False):
            return fn(*args, **kwargs)

    return wrapper


def upcast(x: Tensor) -> Tensor:
    """x in float32, or in its own dtype when that is wider (float64 stays float64 for gradcheck)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def unit_norm(x: Tensor, dim: int = -1) -> Tensor:
    """x / max(||x||, EPS) along `dim`, upcast first."""
    return F.normalize(upcast(x), p=2.0, dim=dim, eps=EPS)


def cos_sim(a: Tensor, b: Tensor) -> Tensor:
    """The (N, M) matrix of cosine similarities s(a_i, b_j) between the rows of a (N, H) and b (M, H)."""
    a, b = unit_norm(a), unit_norm(b)
    dtype = torch.promote_types(a.dtype, b.dtype)  # matmul, unlike *, does not promote by itself
    return a.to(dtype) @ b.to(dtype).T


def paired_cos_sim(a: Tensor, b: Tensor) -> Tensor:
    """The N cosine similarities s(a_i, b_i) between matching rows of a and b (both (N, H))."""
    return (unit_norm(a) * unit_norm(b)).sum(dim=-1)


def _cross_entropy_diagonal(logits: Tensor) -> Tensor:
    """mean_i [ -logits[i, i] + log sum_j exp(logits[i, j]) ] for logits of shape (N, M >= N).

    Row i's target is column i. A logit of -inf drops its column from row i's sum (log of weight 0).
    """
    return (torch.logsumexp(logits, dim=1) - logits.diagonal()).mean()


@full_precision
def info_nce(
    z1: Tensor, z2: Tensor, tau: float, hard_neg: Tensor | None = None, hard_neg_weight: float = 0.0
) -> Tensor:
    """SimCSE's InfoNCE loss with in-batch negatives (Gao et al., 2021, unsupervised and supervised objectives).

        l_i = -s(z1_i, z2_i)/tau + log sum_j exp(s(z1_i, z2_j)/tau)

    With ``hard_neg`` (supervised SimCSE: the contradiction of sentence i), the sum also runs over the N
    logits s(z1_i, hard_neg_j)/tau, and anchor i's own hard negative gets ``hard_neg_weight`` added to its
    logit (log alpha in SimCSE's weighting; 0, i.e. alpha = 1, weights it like any other negative).

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
