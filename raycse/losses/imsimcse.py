"""ImSimCSE's loss: off-dropout InfoNCE plus lambda times its dimension-wise contrastive regulariser (DCL), a preset
of the two losses in the files beside this one.

Paper: Xu et al., 2023, "ImSimCSE: Improving Contrastive Learning for Sentence Embeddings from Two Perspectives",
§4.3 (eq. 6: off-dropout InfoNCE, eq. 3, plus lambda times DCL, eq. 5); lambda = 0.1 and tau_dcl = 5 from §5.1 and
Table 5. §5.1 sets eq. 3's trading-off ratio m = 0.9. The released code has no m: in its place it scales the
positive logit (Jiahao004/SimCSE-plus-plus, simcse/models_re_vicreg.py line 283,
``pos_sim = pos_ratio * cls.sim(z1, z2)``), so raycse reads §5.1's m = 0.9 as pos_ratio = 0.9 and keeps eq. 3's m at 1
(off_dropout.py says why).

Needs: a dropout-off pass (z0), as off-dropout InfoNCE does.

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings, build_loss
    >>> from raycse.losses.imsimcse import IMSIMCSE
    >>> z1 = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-1.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    >>> z2 = torch.tensor([[1.0, 0.5, 2.0], [0.0, -1.0, 1.5], [-1.0, 1.5, 0.5], [0.5, 1.0, 1.0]])
    >>> z0 = torch.tensor([[1.0, 0.2, 2.0], [0.2, -1.0, 1.2], [-1.0, 1.8, 0.2], [0.2, 1.0, 1.0]])
    >>> loss = build_loss(IMSIMCSE.name)
    >>> sorted(loss.hparams) == ["lambda", "m", "pos_ratio", "tau", "tau_dcl"], loss.needs_z0
    (True, True)
    >>> round(loss(Embeddings(z1, z2, z0=z0)).item(), 4)
    0.1664
"""

from __future__ import annotations

from .dcl_loss import DCL
from .declaration import Preset
from .off_dropout import IMSIMCSE_PAPER, OffDropoutInfoNCE

IMSIMCSE = Preset(
    name="imsimcse",
    summary="off-dropout InfoNCE + lambda x the dimension-wise contrastive regulariser",
    paper=IMSIMCSE_PAPER,
    section="§4.3, eq. 6; lambda and tau_dcl §5.1, Table 5; §5.1's m = 0.9 as pos_ratio",
    base=OffDropoutInfoNCE,
    regulariser=DCL,
)

__all__: list[str] = []
