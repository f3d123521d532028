"""The loss modules the trainer composes, and `build_loss`, which builds one by name.

A module wraps one pure function of `raycse.losses`: it holds that loss's hyperparameters (under the papers'
names, which are also the functions' keyword names) and says which forward passes the trainer must run for
it. `build_loss("focal", reg="dcl", tau=0.05)` returns focal + lambda * dcl; presets name common pairs.

A module may also record statistics of its last forward pass (`ContrastiveLoss.stats`), such as how many
negatives DCLR's threshold removed, so that a run can show whether a hyperparameter acts at all.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from ..errors import ConfigError, shown
from .dclr import dclr_noise_negatives, debiased_info_nce, false_negative_weights
from .decorrelation import barlow_twins, dcl
from .focal import focal_info_nce
from .imsimcse import off_dropout_info_nce
from .infonce import cos_sim, full_precision, info_nce
from .triplet import hardest_in_batch_negatives, triplet


@dataclass
class Embeddings:
    """What the trainer hands a loss each step, already all-gathered across workers."""

    z1: Tensor  # (N, H) anchors: first dropout view (unsupervised) or sent0 (supervised)
    z2: Tensor  # (N, H) positives: second dropout view (unsupervised) or sent1 (supervised)
    z3: Tensor | None = None  # (N, H) hard negatives (supervised NLI 'hard_neg')
    z0: Tensor | None = None  # (N, H) z1's sentences encoded with dropout off (if loss.needs_z0)
    complementary: Tensor | None = None  # (N, H) frozen complementary encoder (if loss.needs_complementary)


@dataclass(frozen=True)
class Hyperparameter:
    """A hyperparameter's published default and the range in which its loss is defined.

    Allowed values run from ``low`` (excluded when ``strict``) to ``high`` (included).
    """

    default: float
    low: float = -math.inf
    strict: bool = False
    high: float = math.inf
    integer: bool = False

    @property
    def allowed(self) -> str:
        if self.integer:
            return f"must be an integer >= {self.low:g}"
        if self.high < math.inf:
            return f"must be in {'(' if self.strict else '['}{self.low:g}, {self.high:g}]"
        if self.low > -math.inf:
            return f"must be {'>' if self.strict else '>='} {self.low:g}"
        return "must be finite"

    def check(self, name: str, value: object) -> float:
        """``value`` as a float (an int for integer hyperparameters), or a ConfigError naming it."""
        # bool is an int to Python, but `noise_steps=True` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name}={shown(value)} is not a number: {self.allowed}", key=name)
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer beyond any float
            finite = False
        if not finite:
            raise ConfigError(f"{name}={shown(value)} is not a finite number: {self.allowed}", key=name)
        below = value <= self.low if self.strict else value < self.low
        if below or value > self.high or (self.integer and value != int(value)):
            raise ConfigError(f"{name}={shown(value)} is out of range: {self.allowed}", key=name)
        return int(value) if self.integer else float(value)


def _positive(default: float) -> Hyperparameter:
    return Hyperparameter(default, low=0.0, strict=True)


def _non_negative(default: float) -> Hyperparameter:
    return Hyperparameter(default, low=0.0)


def _unit_interval(default: float) -> Hyperparameter:
    return Hyperparameter(default, low=0.0, high=1.0)


# Unsupervised and supervised SimCSE (Gao et al., 2021) train with tau = 0.05; so do DCLR (§5.1) and ImSimCSE (§5.1).
SIMCSE_TAU = _positive(0.05)


def resolve_hyperparameters(loss: str, specs: dict[str, Hyperparameter], given: dict[str, object]) -> dict[str, float]:
    """Validate ``given`` against ``specs`` and fill in the defaults; ConfigError names the culprit."""
    for key in given:
        if key not in specs:
            raise ConfigError(f"loss {loss!r} does not take hyperparameter {key!r} (it takes: {', '.join(specs)})",
                              key=key)
    return {key: spec.check(key, given.get(key, spec.default)) for key, spec in specs.items()}


def _require(emb: Embeddings, field: str, loss: str) -> Tensor:
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
    """One paper's loss: a pure function of `raycse.losses` and its hyperparameters.

    ``hyperparameters`` maps each name the function takes as keyword to its default and range, so that
    the subclass can call the function with ``**self.hparams``.
    """

    hyperparameters: ClassVar[dict[str, Hyperparameter]]

    def __init__(self, **hparams: float) -> None:
        super().__init__()
        self.hparams = resolve_hyperparameters(self.name, self.hyperparameters, hparams)

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value:g}" for key, value in self.hparams.items())


class SimCSE(Term):
    """Unsupervised SimCSE: `info_nce` between two dropout views."""

    name = "simcse"
    hyperparameters = {"tau": SIMCSE_TAU}

    def forward(self, emb: Embeddings) -> Tensor:
        return info_nce(emb.z1, emb.z2, **self.hparams)


class SupervisedSimCSE(Term):
    """Supervised SimCSE: `info_nce` over NLI (premise, entailment, contradiction) triplets."""

    name = "simcse-sup"
    needs_hard_neg = True
    # SimCSE's best hard-negative weight is alpha = 1, i.e. nothing added to the logit.
    hyperparameters = {"tau": SIMCSE_TAU, "hard_neg_weight": Hyperparameter(0.0)}

    def forward(self, emb: Embeddings) -> Tensor:
        return info_nce(emb.z1, emb.z2, hard_neg=_require(emb, "z3", self.name), **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return 1, "each anchor's contradiction is a negative"


class FocalInfoNCE(Term):
    """`focal_info_nce` between two dropout views."""

    name = "focal"
    hyperparameters = {
        # Focal-InfoNCE §4 prints tau = 0.7 for BERT-base, but its Table 4 sweeps 0.03-0.1 and the 79.31
        # STS-B it reports (Tables 3 and 5) is the tau = 0.07 entry: the 0.7 lacks a zero.
        "tau": _positive(0.07),
        # m = 0.3 (§4, unsupervised setting; Table 5 finds 0.2-0.3 best). Every real m gives finite logits;
        # [0, 1] is where the paper's reading holds: negatives with s > 1 - m count as hard and get pushed
        # up, so the threshold 1 - m stays within the cosines [0, 1] that a hard negative can have.
        "m": _unit_interval(0.3),
    }

    def forward(self, emb: Embeddings) -> Tensor:
        return focal_info_nce(emb.z1, emb.z2, **self.hparams)


class OffDropoutInfoNCE(Term):
    """ImSimCSE's `off_dropout_info_nce`: negatives from a dropout-off pass, in both parametrisations."""

    name = "off-dropout"
    needs_z0 = True
    hyperparameters = {
        "tau": SIMCSE_TAU,
        # Eq. 3's weight of the negatives; it enters as log m, hence m > 0. 1 switches it off: the paper's
        # m = 0.9 was measured on pos_ratio (below), so it is not eq. 3's default here.
        "m": _positive(1.0),
        # The released code's factor on the positive logit, which produced Table 5's sweep and its optimum 0.9.
        "pos_ratio": _positive(0.9),
    }

    def forward(self, emb: Embeddings) -> Tensor:
        return off_dropout_info_nce(emb.z1, emb.z2, _require(emb, "z0", self.name), **self.hparams)


class DCLR(Term):
    """DCLR: `debiased_info_nce` with false negatives removed and K = round(k N) noise negatives.

    The noise is drawn from the default torch generator on each call, so a seeded run reproduces.
    """

    name = "dclr"
    needs_complementary = True
    # DCLR §5.1, BERT-base: phi = 0.9, k = 1, noise std 1, four ascent steps with learning rate 1e-3.
    # The paper gives no separate value for tau_u (eq. 2), only tau = 0.05, so tau_u defaults to it.
    hyperparameters = {
        "tau": SIMCSE_TAU,
        "phi": _unit_interval(0.9),
        "k": _non_negative(1.0),
        "noise_steps": Hyperparameter(4, low=0, integer=True),
        "noise_beta": _non_negative(1e-3),
        "noise_sigma": _positive(1.0),
        "tau_u": SIMCSE_TAU,
    }

    def forward(self, emb: Embeddings) -> Tensor:
        h = self.hparams
        n, dim = emb.z1.shape
        init = torch.randn(round(h["k"] * n), dim, device=emb.z1.device, dtype=torch.float32) * h["noise_sigma"]
        noise = dclr_noise_negatives(emb.z1, emb.z2, init, h["noise_steps"], h["noise_beta"], h["tau_u"])
        weights = false_negative_weights(_require(emb, "complementary", self.name), h["phi"])
        self._stats = dclr_stats(emb.z1, noise, weights, h["tau"])
        return debiased_info_nce(emb.z1, emb.z2, noise, weights, h["tau"])


@torch.no_grad()
@full_precision
def dclr_stats(z1: Tensor, noise: Tensor, weights: Tensor, tau: float) -> dict[str, Tensor]:
    """Whether DCLR's phi and k act on a batch (DCLR degenerates into SimCSE when neither does):

        dclr_removed_fraction  the fraction of the N(N - 1) in-batch negatives whose weight alpha_ij is 0
        dclr_noise_logit       mean over anchors i and noise vectors k of s(z1_i, noise_k)/tau
                               (absent when there is no noise vector, K = 0)
    """
    n = len(weights)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=weights.device)
    removed = ((weights == 0) & off_diagonal).sum(dtype=torch.float32) / max(n * (n - 1), 1)
    stats = {"dclr_removed_fraction": removed}
    if len(noise) > 0:
        stats["dclr_noise_logit"] = (cos_sim(z1.detach(), noise) / tau).mean().float()
    return stats


class Triplet(Term):
    """`triplet` with the contradiction as negative, or without one the hardest in-batch negative."""

    name = "triplet"
    # The note gives no margin. On the unit sphere margin 0.5 asks s(a, p) to beat s(a, n) by 0.25:
    # a clear gap, yet one that the hardest in-batch negative, often a near-paraphrase (half of SimCSE's
    # in-batch negatives have cosine > 0.7, DCLR Fig. 1), does not keep active on every triplet.
    hyperparameters = {"margin": _non_negative(0.5)}

    def forward(self, emb: Embeddings) -> Tensor:
        neg = emb.z3 if emb.z3 is not None else emb.z2[hardest_in_batch_negatives(emb.z1, emb.z2)]
        return triplet(emb.z1, emb.z2, neg, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        if supervised:
            return 1, "each anchor's contradiction is its negative"
        return 2, "without NLI data its negative is the hardest other row of the step"


# A correlation over the batch, centred per dimension: one row centres to zero, and two rows to +-1 whatever the
# embeddings are, so neither gives the regulariser a gradient.
CORRELATION_ROWS = (3, "its correlations over the batch are constant below 3 rows")


class DCL(Term):
    """ImSimCSE's dimension-wise contrastive regulariser `dcl` on the two dropout views."""

    name = "dcl"
    hyperparameters = {"tau_dcl": _positive(5.0)}  # ImSimCSE §5.1, Table 5

    def forward(self, emb: Embeddings) -> Tensor:
        return dcl(emb.z1, emb.z2, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return CORRELATION_ROWS


class BarlowTwins(Term):
    """The Barlow Twins regulariser `barlow_twins` on the two dropout views."""

    name = "barlow"
    # Barlow Twins' trade-off (Zbontar et al., 2021, §2 and its released code's default 0.0051).
    hyperparameters = {"lambda_bt": _non_negative(0.0051)}

    def forward(self, emb: Embeddings) -> Tensor:
        return barlow_twins(emb.z1, emb.z2, **self.hparams)

    def rows_needed(self, supervised: bool) -> tuple[int, str]:
        return CORRELATION_ROWS


# lambda = 0.1 is ImSimCSE's weight for DCL (§5.1, Table 5). No paper reports a weight for adding Barlow
# Twins to SimCSE, so it shares the same default.
LAMBDA = _non_negative(0.1)


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


_BASES: dict[str, type[Term]] = {
    cls.name: cls for cls in (SimCSE, SupervisedSimCSE, FocalInfoNCE, OffDropoutInfoNCE, DCLR, Triplet)
}
_REGULARISERS: dict[str, type[Term]] = {cls.name: cls for cls in (DCL, BarlowTwins)}

BASE_LOSSES: tuple[str, ...] = tuple(_BASES)
REGULARISERS: tuple[str, ...] = tuple(_REGULARISERS)
PRESETS: dict[str, tuple[str, str]] = {
    "imsimcse": ("off-dropout", "dcl"),  # ImSimCSE eq. 6: off-dropout InfoNCE + lambda * DCL
    "simcse+dcl": ("simcse", "dcl"),
    "simcse+barlow": ("simcse", "barlow"),
}
LOSS_NAMES: tuple[str, ...] = BASE_LOSSES + tuple(PRESETS)


def _parts(name: str, reg: str | None) -> tuple[str, type[Term], type[Term] | None]:
    """The display name, base class and regulariser class (or None) of a combination."""
    if reg is not None and reg not in _REGULARISERS:
        raise ConfigError(f"unknown regulariser {shown(reg)} (choose from {', '.join(REGULARISERS)})", key="reg")
    if name in PRESETS:
        base, preset_reg = PRESETS[name]
        if reg is not None and reg != preset_reg:
            raise ConfigError(f"loss {name!r} already includes regulariser {preset_reg!r}, so reg={reg!r} conflicts",
                              key="reg")
        return name, _BASES[base], _REGULARISERS[preset_reg]
    if name not in _BASES:
        raise ConfigError(f"unknown loss {shown(name)} (choose from {', '.join(LOSS_NAMES)})", key="loss")
    if reg is None:
        return name, _BASES[name], None
    return f"{name}+{reg}", _BASES[name], _REGULARISERS[reg]


def _specs(base: type[Term], regulariser: type[Term] | None) -> dict[str, Hyperparameter]:
    if regulariser is None:
        return dict(base.hyperparameters)
    return {**base.hyperparameters, "lambda": LAMBDA, **regulariser.hyperparameters}


def loss_hyperparameters(name: str, reg: str | None = None) -> dict[str, float]:
    """The hyperparameters that loss ``name`` (plus regulariser ``reg``) takes, with their published defaults."""
    _, base, regulariser = _parts(name, reg)
    return {key: spec.default for key, spec in _specs(base, regulariser).items()}


def hyperparameter_catalogue() -> dict[str, dict[str, Hyperparameter]]:
    """Every hyperparameter name any loss or regulariser takes -> {loss or regulariser name: its spec there}.

    What the command line generates its loss flags from: a new loss's hyperparameters get flags by themselves.
    """
    catalogue: dict[str, dict[str, Hyperparameter]] = {}
    for owner, specs in [*((name, cls.hyperparameters) for name, cls in _BASES.items()),
                         *((name, {"lambda": LAMBDA, **cls.hyperparameters}) for name, cls in _REGULARISERS.items())]:
        for key, spec in specs.items():
            catalogue.setdefault(key, {})[owner] = spec
    return catalogue


def build_loss(name: str, reg: str | None = None, **hparams: float) -> ContrastiveLoss:
    """The loss module for a base loss or preset ``name``, plus ``lambda`` times regulariser ``reg`` if given.

    Hyperparameters not given take their published default. An unknown name, a hyperparameter the
    combination does not take or a value out of range raises ConfigError, as does a ``reg`` other than
    the one a preset already includes.
    """
    display_name, base, regulariser = _parts(name, reg)
    resolved = resolve_hyperparameters(display_name, _specs(base, regulariser), hparams)
    base_term = base(**{key: resolved[key] for key in base.hyperparameters})
    if regulariser is None:
        return base_term
    reg_term = regulariser(**{key: resolved[key] for key in regulariser.hyperparameters})
    return Regularised(display_name, base_term, reg_term, resolved["lambda"])
