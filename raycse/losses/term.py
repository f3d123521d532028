"""The modules the trainer composes: `Term`, the base class of every loss (built-in or a user's own), and
`Regularised`, a base loss plus lambda times a regulariser.

A Term subclass wraps one pure function of embeddings. Its class attribute ``declaration`` (raycse.losses.Declaration)
names it, lists its hyperparameters (the function's keyword names) and says which forward passes the trainer must run
for it; the subclass only writes ``forward``. Defining a Term subclass inside raycse.losses registers it under its
declared name: the registry finds a built-in loss by importing its file.

A module may also record statistics of its last forward pass (`ContrastiveLoss.stats`), such as how many negatives
DCLR's threshold removed, so that a run can show whether a hyperparameter acts at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from .declaration import Declaration, resolve_hyperparameters

BUILT_IN: dict[str, type[Term]] = {}  # declared name -> class, filled as raycse.losses' own loss files are imported


@dataclass
class Embeddings:
    """What the trainer hands a loss each step, already all-gathered across workers."""

    z1: Tensor  # (N, H) anchors: first dropout view (unsupervised) or sent0 (supervised)
    z2: Tensor  # (N, H) positives: second dropout view (unsupervised) or sent1 (supervised)
    z3: Tensor | None = None  # (N, H) hard negatives (supervised NLI 'hard_neg')
    z0: Tensor | None = None  # (N, H) z1's sentences encoded with dropout off (if loss.needs_z0)
    complementary: Tensor | None = None  # (N, H) frozen complementary encoder (if loss.needs_complementary)


def require(emb: Embeddings, field: str, loss: str) -> Tensor:
    """``emb.<field>``, or a ValueError naming the loss that needs it when the trainer did not compute it."""
    value = getattr(emb, field)
    if value is None:
        raise ValueError(f"loss {loss!r} needs Embeddings.{field}, which the trainer did not compute")
    return value


class ContrastiveLoss(nn.Module):
    """Base class of every module `build_loss` returns: ``forward(emb)`` gives a 0-d float32 loss.

    The ``needs_*`` flags tell the trainer which extra forward passes to run: a dropout-off pass (z0),
    supervised triplets (z3), the frozen complementary encoder (complementary).
    """

    name: str
    hparams: dict[str, float]
    needs_z0: bool = False
    needs_hard_neg: bool = False
    needs_complementary: bool = False

    def __init__(self) -> None:
        super().__init__()
        self._stats: dict[str, Tensor] = {}

    def forward(self, emb: Embeddings) -> Tensor:
        raise NotImplementedError

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        """The fewest rows (sentences, or NLI triplets) one step must give this loss for it to learn anything, and
        why: below it the loss has nothing to contrast and trains to a constant (a loss of 0 that teaches nothing)."""
        return 2, "its negatives are the other rows of the step"

    def stats(self) -> dict[str, Tensor]:
        """Statistics of the last `forward`, by name: detached 0-d float32 tensors on the embeddings' device.

        They stay on the device so that recording them costs no host synchronisation; the caller moves them
        to the host when it logs. A loss with nothing to report returns {}.
        """
        return dict(self._stats)


class Term(ContrastiveLoss):
    """One loss: a pure function of embeddings and its declared hyperparameters, held in ``self.hparams`` under
    the function's keyword names (so that ``forward`` can call it with ``**self.hparams``)."""

    declaration: ClassVar[Declaration]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        declaration = cls.__dict__.get("declaration")
        if not isinstance(declaration, Declaration):
            return  # not a loss yet (an intermediate class), or a user's class without one: the loader says so
        cls.name = declaration.name
        cls.needs_hard_neg = declaration.supervised
        cls.needs_z0 = declaration.dropout_off_pass
        cls.needs_complementary = declaration.complementary
        if cls.__module__.startswith(f"{__package__}."):  # a built-in loss file registers its loss
            BUILT_IN[declaration.name] = cls

    def __init__(self, **hparams: float) -> None:
        super().__init__()
        self.hparams = resolve_hyperparameters(self.name, self.declaration.hyperparameters, hparams)

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value:g}" for key, value in self.hparams.items())


class Regularised(ContrastiveLoss):
    """base + lambda * regulariser, each term computed on the same embeddings."""

    def __init__(self, name: str, base: Term, regulariser: Term, weight: float) -> None:
        super().__init__()
        self.name, self.base, self.regulariser, self.weight = name, base, regulariser, weight
        self.hparams = {**base.hparams, "lambda": weight, **regulariser.hparams}
        self.needs_z0 = base.needs_z0 or regulariser.needs_z0
        self.needs_hard_neg = base.needs_hard_neg or regulariser.needs_hard_neg
        self.needs_complementary = base.needs_complementary or regulariser.needs_complementary

    def forward(self, emb: Embeddings) -> Tensor:
        return self.base(emb) + self.weight * self.regulariser(emb)

    def stats(self) -> dict[str, Tensor]:
        return {**self.base.stats(), **self.regulariser.stats()}

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return max(self.base.rows_needed(supervised), self.regulariser.rows_needed(supervised))

    def extra_repr(self) -> str:
        return f"name={self.name!r}, lambda={self.weight:g}"


__all__ = ["ContrastiveLoss", "Embeddings", "Regularised", "Term"]
