"""ImSimCSE's dimension-wise contrastive regulariser (DCL): InfoNCE over embedding dimensions instead of sentences.

Paper: Xu et al., 2023, "ImSimCSE: Improving Contrastive Learning for Sentence Embeddings from Two Perspectives",
§4.3 (eq. 5; eq. 6 adds it to off-dropout InfoNCE with weight lambda); tau_dcl = 5 and lambda = 0.1 from §5.1 and
Table 5, tuned on the released code's scale, which raycse keeps (see `dcl`; docs/method.md, "The losses against their
papers and released code").

Needs: nothing beyond the two dropout views; a regulariser, added with weight lambda to a base loss (`reg: dcl`).

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings
    >>> from raycse.losses.dcl_loss import DCL
    >>> z1 = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-1.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    >>> z2 = torch.tensor([[1.0, 0.5, 2.0], [0.0, -1.0, 1.5], [-1.0, 1.5, 0.5], [0.5, 1.0, 1.0]])
    >>> round(DCL(tau_dcl=5.0)(Embeddings(z1, z2)).item(), 4)
    0.9758
"""

from __future__ import annotations

import math

from torch import Tensor

from .correlation import CORRELATION_ROWS, cross_correlation
from .declaration import Declaration, Hyperparameter
from .infonce import _cross_entropy_diagonal, full_precision
from .off_dropout import IMSIMCSE_PAPER
from .term import Embeddings, Term


@full_precision
def dcl(z1: Tensor, z2: Tensor, tau_dcl: float) -> Tensor:
    """Dimension-wise contrastive loss (Xu et al., 2023, ImSimCSE, §4.3, eq. 5): InfoNCE over dimensions,
    where dimension c of z1 must pick out dimension c of z2 among all H dimensions. With C the (H, H) Pearson
    correlation between the columns of z1 and z2 over the batch (`cross_correlation`):

        L = mean_c [ -C_cc/tau_dcl + log sum_d exp(C_cd/tau_dcl) ]

    Unlike Barlow Twins it asks only that C_cc beat C_cd, not that C be the identity, which a batch of
    N < H sentences (rank(C) <= N) cannot reach.

    Scale: the released code's, not the printed equation's. Eq. 5 sums over the H dimensions and its
    similarity is sum_i z~_ic z~_id / tau_dcl with z~ standardised by the sample std (1/(N-1)), i.e.
    (N - 1) C_cd / tau_dcl. The released code (Jiahao004/SimCSE-plus-plus, simcse/models_vicreg.py lines
    227-230: ``cls.bn(z1)``, an affine-free BatchNorm1d; ``cov = (z1_normd.T @ z2_normd) / batch_size / temp``;
    ``(-torch.diagonal(cov) + torch.logsumexp(cov, dim=-1)).mean()``) takes C_cd / tau_dcl and the mean over the
    dimensions: the printed loss is H times this one, its logits N - 1 times these. tau_dcl = 5 and lambda = 0.1
    (Table 5) were swept with that code, so they hold at its scale, which is the one used here.

    Args:
        z1: (N, H) first view.
        z2: (N, H) second view.
        tau_dcl: temperature, > 0.

    Returns:
        The mean over the H dimensions, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    return _cross_entropy_diagonal(cross_correlation(z1, z2) / tau_dcl)


class DCL(Term):
    """ImSimCSE's dimension-wise contrastive regulariser `dcl` on the two dropout views."""

    declaration = Declaration(
        name="dcl",
        summary="dimension-wise contrastive regulariser on the two dropout views",
        paper=IMSIMCSE_PAPER,
        section="§4.3, eq. 5; tau_dcl and lambda §5.1, Table 5",
        hyperparameters={"tau_dcl": Hyperparameter(5.0, low=0.0, strict=True, high=math.inf, log=True)},
        regulariser=True,
        weight=Hyperparameter(0.1, low=0.0, high=math.inf),  # ImSimCSE's lambda (§5.1, Table 5)
    )

    def forward(self, emb: Embeddings) -> Tensor:
        return dcl(emb.z1, emb.z2, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return CORRELATION_ROWS


__all__ = ["dcl"]
