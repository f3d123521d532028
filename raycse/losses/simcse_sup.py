"""Supervised SimCSE: InfoNCE over NLI (premise, entailment, contradiction) triplets, the contradiction as a hard
negative.

Paper: Gao, Yao and Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings", §4 (eq. 5); its best
hard-negative weight is alpha = 1 (Table 7), i.e. nothing added to the logit: hard_neg_weight = log alpha = 0.

Needs: supervised triplets (`sup_data`, an NLI csv with sent0, sent1, hard_neg).

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings
    >>> from raycse.losses.simcse_sup import SupervisedSimCSE
    >>> premise = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0]])
    >>> entailment = torch.tensor([[1.0, 0.5, 2.0], [0.0, -1.0, 1.5]])
    >>> contradiction = torch.tensor([[1.0, 0.2, 1.9], [-1.0, 1.5, 0.5]])
    >>> loss = SupervisedSimCSE(tau=0.05)
    >>> round(loss(Embeddings(premise, entailment, z3=contradiction)).item(), 4)
    0.4602
"""

from __future__ import annotations

import math

from torch import Tensor

from .declaration import Declaration, Hyperparameter
from .simcse import SIMCSE_PAPER, SIMCSE_TAU, info_nce
from .term import Embeddings, Term, require


class SupervisedSimCSE(Term):
    """Supervised SimCSE: `info_nce` over NLI (premise, entailment, contradiction) triplets."""

    declaration = Declaration(
        name="simcse-sup",
        summary="InfoNCE over NLI triplets, the contradiction as hard negative (needs --sup-data)",
        paper=SIMCSE_PAPER,
        section="§4, eq. 5; alpha Table 7",
        hyperparameters={"tau": SIMCSE_TAU,
                         "hard_neg_weight": Hyperparameter(0.0, low=-math.inf, high=math.inf)},
        supervised=True,
    )

    def forward(self, emb: Embeddings) -> Tensor:
        return info_nce(emb.z1, emb.z2, hard_neg=require(emb, "z3", self.name), **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return 1, "each anchor's contradiction is a negative"


__all__: list[str] = []
