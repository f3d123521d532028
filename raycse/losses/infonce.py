"""The pieces every InfoNCE-style loss of this package shares: cosine similarities computed in full precision, and
the cross-entropy whose target is the diagonal.

Every variant is "InfoNCE with different logits": it builds an (N, M) logit matrix whose column i is anchor i's
positive, then calls `_cross_entropy_diagonal`. Masking or re-weighting a negative is done in log space, by adding
log(weight) to its logit, so that one logsumexp path serves them all. A user's own loss may use them too
(`from raycse.losses import cos_sim`).
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


__all__ = ["cos_sim", "full_precision", "paired_cos_sim", "unit_norm", "upcast"]
