"""What a loss declares about itself, in one form for the built-in losses and for a user's own: its name, paper and
section, its hyperparameters (type, range, default, log scale) and what it needs from the trainer.

A loss file holds a `Term` subclass with ``declaration = Declaration(...)``; a preset (a base loss plus a
regulariser, as a paper trains them) is ``Preset(...)`` at the top of its own file. Nothing here imports torch: the
command line reads the built-in declarations without running their files (raycse/losses/catalogue.py).
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

from ..errors import ConfigError, shown

# A loss's name is a flag value, an MLflow parameter, a family name in a space file and part of a tag: no '+' (it joins
# a base loss and its regulariser), no ':' (it separates a module from a class in a reference), no '/'.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
REGULARISER_WEIGHT = "lambda"  # the hyperparameter that weighs a regulariser against its base loss


@dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter: its published default and the range in which its loss is defined.

    Allowed values run from ``low`` (excluded when ``strict``) to ``high`` (included); either end may be ``math.inf``,
    but both must be given. ``integer`` makes it an int; ``log`` says that it varies on a log scale, which a space
    file's ``declared`` distribution follows.
    """

    default: float
    low: float | None = None
    high: float | None = None
    strict: bool = False
    integer: bool = False
    log: bool = False

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

    def validate(self, loss: str, name: str) -> None:
        """A ConfigError unless this is a usable declaration: a range given, and the default inside it."""
        if self.low is None or self.high is None:
            raise ConfigError(f"loss {loss!r}: hyperparameter {name!r} declares no range: give low= and high= "
                              "(math.inf for an open end)")
        for end in ("low", "high"):
            value = getattr(self, end)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
                raise ConfigError(f"loss {loss!r}: hyperparameter {name!r}: {end}={shown(value)} is not a number")
        if not self.low < self.high:
            raise ConfigError(f"loss {loss!r}: hyperparameter {name!r}: low ({self.low:g}) must be below high "
                              f"({self.high:g})")
        try:
            self.check(name, self.default)
        except ConfigError as err:
            raise ConfigError(f"loss {loss!r}: its default {err}") from None


@dataclass(frozen=True)
class Declaration:
    """One loss or regulariser, as `raycse losses`, the space files, the flags and the trainer read it.

    Every property that code branches on is here, never in a test of the loss's name: the extra forward passes the
    trainer runs (``supervised``: NLI triplets, the contradiction encoded as z3; ``dropout_off_pass``: z0;
    ``complementary``: a frozen complementary model, which stage 0 trains with the default loss when none is given),
    whether it is a regulariser (added with weight ``lambda`` to a base loss, never trained alone) and whether it is
    the default loss (a run that names none trains it; exactly one built-in loss is).
    """

    name: str
    summary: str
    paper: str = ""
    section: str = ""
    hyperparameters: dict[str, Hyperparameter] = field(default_factory=dict)
    supervised: bool = False
    dropout_off_pass: bool = False
    complementary: bool = False
    regulariser: bool = False
    weight: Hyperparameter | None = None  # a regulariser's lambda
    default: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ConfigError(f"loss name {shown(self.name)} is not a name: letters, digits, '-', '_' and '.', "
                              "at most 64")
        if not isinstance(self.summary, str) or not self.summary.strip():
            raise ConfigError(f"loss {self.name!r}: its summary (one line on what it is) is missing")
        if not isinstance(self.hyperparameters, dict):
            raise ConfigError(f"loss {self.name!r}: hyperparameters must be a dict of Hyperparameter by name")
        for key, spec in self.hyperparameters.items():
            if not isinstance(key, str) or not key.isidentifier() or key == REGULARISER_WEIGHT:
                raise ConfigError(f"loss {self.name!r}: hyperparameter name {shown(key)} is not a Python keyword "
                                  f"name (nor may it be {REGULARISER_WEIGHT!r}, a regulariser's weight)")
            if not isinstance(spec, Hyperparameter):
                raise ConfigError(f"loss {self.name!r}: hyperparameter {key!r} is {shown(spec)}, not a Hyperparameter")
            spec.validate(self.name, key)
        if self.regulariser != (self.weight is not None):
            raise ConfigError(f"loss {self.name!r}: a regulariser declares its weight (weight=Hyperparameter(...)), "
                              "and only a regulariser does")
        if self.weight is not None:
            self.weight.validate(self.name, REGULARISER_WEIGHT)


@dataclass(frozen=True)
class Preset:
    """A base loss and a regulariser trained together under one name, as a paper does (ImSimCSE: off-dropout
    InfoNCE + lambda x DCL). ``base`` and ``regulariser`` are the two losses' Term classes (or their names)."""

    name: str
    summary: str
    paper: str
    section: str
    base: object
    regulariser: object

    def __post_init__(self) -> None:
        for part in ("base", "regulariser"):
            value = getattr(self, part)
            if not isinstance(value, str):  # a Term class: its declared name
                object.__setattr__(self, part, value.declaration.name)


def declaration_of(cls: object, where: str) -> Declaration:
    """The `Declaration` a loss class carries, or a ConfigError saying what is missing (`where` names the class)."""
    declaration = getattr(cls, "declaration", None)
    if declaration is None:
        raise ConfigError(f"{where} has no declaration: give it `declaration = Declaration(name=..., summary=..., "
                          "hyperparameters={...})` (raycse.losses.Declaration)")
    if not isinstance(declaration, Declaration):
        raise ConfigError(f"{where}: its declaration is {type(declaration).__name__}, not a raycse.losses.Declaration")
    return declaration


def resolve_hyperparameters(loss: str, specs: dict[str, Hyperparameter], given: dict[str, object]) -> dict[str, float]:
    """Validate ``given`` against ``specs`` and fill in the defaults; ConfigError names the culprit."""
    for key in given:
        if key not in specs:
            raise ConfigError(f"loss {loss!r} does not take hyperparameter {key!r} (it takes: {', '.join(specs)})",
                              key=key)
    return {key: spec.check(key, given.get(key, spec.default)) for key, spec in specs.items()}


__all__ = ["Declaration", "Hyperparameter", "Preset", "declaration_of", "resolve_hyperparameters"]
