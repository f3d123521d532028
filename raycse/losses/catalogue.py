"""What each loss is, without torch: its paper, its hyperparameters (published default and range) and the presets.

The loss modules (registry.py) take their hyperparameters from here, and so do the command line's flags, the space
files' validation and `raycse losses`, which must answer without importing torch. A new loss is one `LossInfo`
here and one module in registry.py.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..errors import ConfigError, shown


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


@dataclass(frozen=True)
class LossInfo:
    """One base loss or regulariser: its name (`--loss`, `--reg`), what it is, its paper and its hyperparameters
    under the papers' names (which are also its pure function's keyword names)."""

    name: str
    summary: str
    paper: str
    hyperparameters: dict[str, Hyperparameter]


# Unsupervised and supervised SimCSE (Gao et al., 2021) train with tau = 0.05; so do DCLR (§5.1) and ImSimCSE (§5.1).
SIMCSE_TAU = _positive(0.05)
SIMCSE_PAPER = "Gao, Yao and Chen, 2021: SimCSE: Simple Contrastive Learning of Sentence Embeddings"
IMSIMCSE_PAPER = ("Xu et al., 2023: ImSimCSE: Improving Contrastive Learning for Sentence Embeddings from Two "
                  "Perspectives")

BASES: dict[str, LossInfo] = {info.name: info for info in (
    LossInfo("simcse", "InfoNCE between two dropout views, in-batch negatives", SIMCSE_PAPER, {"tau": SIMCSE_TAU}),
    # SimCSE's best hard-negative weight is alpha = 1, i.e. nothing added to the logit.
    LossInfo("simcse-sup", "InfoNCE over NLI triplets, the contradiction as hard negative (needs --sup-data)",
             SIMCSE_PAPER, {"tau": SIMCSE_TAU, "hard_neg_weight": Hyperparameter(0.0)}),
    LossInfo("focal", "InfoNCE whose logits up-weight hard negatives",
             "Hou and Li, 2023: Improving Contrastive Learning of Sentence Embeddings with Focal-InfoNCE", {
                 # Focal-InfoNCE §4 prints tau = 0.7 for BERT-base, but its Table 4 sweeps 0.03-0.1 and the 79.31
                 # STS-B it reports (Tables 3 and 5) is the tau = 0.07 entry: the 0.7 lacks a zero.
                 "tau": _positive(0.07),
                 # m = 0.3 (§4, unsupervised setting; Table 5 finds 0.2-0.3 best). Every real m gives finite
                 # logits; [0, 1] is where the paper's reading holds: negatives with s > 1 - m count as hard and
                 # get pushed up, so the threshold 1 - m stays within the cosines [0, 1] a hard negative can have.
                 "m": _unit_interval(0.3),
             }),
    LossInfo("off-dropout", "InfoNCE with negatives from a dropout-off pass", IMSIMCSE_PAPER, {
        "tau": SIMCSE_TAU,
        # Eq. 3's weight of the negatives; it enters as log m, hence m > 0. 1 switches it off: the paper's
        # m = 0.9 was measured on pos_ratio (below), so it is not eq. 3's default here.
        "m": _positive(1.0),
        # The released code's factor on the positive logit, which produced Table 5's sweep and its optimum 0.9.
        "pos_ratio": _positive(0.9),
    }),
    # DCLR §5.1, BERT-base: phi = 0.9, k = 1, noise std 1, four ascent steps with learning rate 1e-3.
    # The paper gives no separate value for tau_u (eq. 2), only tau = 0.05, so tau_u defaults to it.
    LossInfo("dclr", "InfoNCE with false negatives removed (by a frozen model) and noise negatives added",
             "Zhou et al., 2022: Debiased Contrastive Learning of Unsupervised Sentence Representations", {
                 "tau": SIMCSE_TAU,
                 "phi": _unit_interval(0.9),
                 "k": _non_negative(1.0),
                 "noise_steps": Hyperparameter(4, low=0, integer=True),
                 "noise_beta": _non_negative(1e-3),
                 "noise_sigma": _positive(1.0),
                 "tau_u": SIMCSE_TAU,
             }),
    # The note gives no margin. On the unit sphere margin 0.5 asks s(a, p) to beat s(a, n) by 0.25: a clear gap,
    # yet one that the hardest in-batch negative, often a near-paraphrase (half of SimCSE's in-batch negatives
    # have cosine > 0.7, DCLR Fig. 1), does not keep active on every triplet.
    LossInfo("triplet", "the triplet loss on the unit sphere; negative: the contradiction, else the hardest "
             "in-batch row", "Schroff, Kalenichenko and Philbin, 2015: FaceNet", {"margin": _non_negative(0.5)}),
)}

REGULARISER_INFO: dict[str, LossInfo] = {info.name: info for info in (
    LossInfo("dcl", "dimension-wise contrastive regulariser on the two dropout views", IMSIMCSE_PAPER,
             {"tau_dcl": _positive(5.0)}),  # ImSimCSE §5.1, Table 5
    # Barlow Twins' trade-off (Zbontar et al., 2021, §2 and its released code's default 0.0051).
    LossInfo("barlow", "Barlow Twins' redundancy reduction on the two dropout views",
             "Zbontar et al., 2021: Barlow Twins: Self-Supervised Learning via Redundancy Reduction",
             {"lambda_bt": _non_negative(0.0051)}),
)}

# lambda = 0.1 is ImSimCSE's weight for DCL (§5.1, Table 5). No paper reports a weight for adding Barlow
# Twins to SimCSE, so it shares the same default.
LAMBDA = _non_negative(0.1)

BASE_LOSSES: tuple[str, ...] = tuple(BASES)
REGULARISERS: tuple[str, ...] = tuple(REGULARISER_INFO)
PRESETS: dict[str, tuple[str, str]] = {
    "imsimcse": ("off-dropout", "dcl"),  # ImSimCSE eq. 6: off-dropout InfoNCE + lambda * DCL
    "simcse+dcl": ("simcse", "dcl"),
    "simcse+barlow": ("simcse", "barlow"),
}
LOSS_NAMES: tuple[str, ...] = BASE_LOSSES + tuple(PRESETS)


def resolve_hyperparameters(loss: str, specs: dict[str, Hyperparameter], given: dict[str, object]) -> dict[str, float]:
    """Validate ``given`` against ``specs`` and fill in the defaults; ConfigError names the culprit."""
    for key in given:
        if key not in specs:
            raise ConfigError(f"loss {loss!r} does not take hyperparameter {key!r} (it takes: {', '.join(specs)})",
                              key=key)
    return {key: spec.check(key, given.get(key, spec.default)) for key, spec in specs.items()}


def combination(name: str, reg: str | None) -> tuple[str, str, str | None]:
    """(display name, base loss, regulariser or None) of loss ``name`` plus ``reg``; ConfigError for an unknown
    name or a ``reg`` other than the one a preset already includes."""
    if reg is not None and reg not in REGULARISER_INFO:
        raise ConfigError(f"unknown regulariser {shown(reg)} (choose from {', '.join(REGULARISERS)})", key="reg")
    if name in PRESETS:
        base, preset_reg = PRESETS[name]
        if reg is not None and reg != preset_reg:
            raise ConfigError(f"loss {name!r} already includes regulariser {preset_reg!r}, so reg={reg!r} conflicts",
                              key="reg")
        return name, base, preset_reg
    if name not in BASES:
        raise ConfigError(f"unknown loss {shown(name)} (choose from {', '.join(LOSS_NAMES)})", key="loss")
    if reg is None:
        return name, name, None
    return f"{name}+{reg}", name, reg


def combination_specs(base: str, reg: str | None) -> dict[str, Hyperparameter]:
    """The hyperparameters of base loss ``base`` plus ``lambda`` times regulariser ``reg`` (if not None)."""
    if reg is None:
        return dict(BASES[base].hyperparameters)
    return {**BASES[base].hyperparameters, "lambda": LAMBDA, **REGULARISER_INFO[reg].hyperparameters}


def loss_hyperparameters(name: str, reg: str | None = None) -> dict[str, float]:
    """The hyperparameters that loss ``name`` (plus regulariser ``reg``) takes, with their published defaults."""
    _, base, regulariser = combination(name, reg)
    return {key: spec.default for key, spec in combination_specs(base, regulariser).items()}


def hyperparameter_catalogue() -> dict[str, dict[str, Hyperparameter]]:
    """Every hyperparameter name any loss or regulariser takes -> {loss or regulariser name: its spec there}.

    What the command line generates its loss flags from: a new loss's hyperparameters get flags by themselves.
    """
    catalogue: dict[str, dict[str, Hyperparameter]] = {}
    for owner, specs in [*((name, info.hyperparameters) for name, info in BASES.items()),
                         *((name, {"lambda": LAMBDA, **info.hyperparameters})
                           for name, info in REGULARISER_INFO.items())]:
        for key, spec in specs.items():
            catalogue.setdefault(key, {})[owner] = spec
    return catalogue
