"""How a space file draws one searched parameter (`space.PARAM`): uniform, loguniform, int or categorical, read from
the file and checked whole, then asked of Optuna trial by trial.
"""
from __future__ import annotations

from dataclasses import dataclass

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_number, mapping, no_unknown

DISTRIBUTIONS = ("uniform", "loguniform", "int", "categorical")


@dataclass
class Distribution:
    kind: str
    low: float | None = None
    high: float | None = None
    choices: list | None = None

    def suggest(self, trial, name: str):
        """Optuna define-by-run: ask the trial for a value of this distribution."""
        if self.kind == "categorical":
            return trial.suggest_categorical(name, self.choices)
        if self.kind == "int":
            return trial.suggest_int(name, int(self.low), int(self.high))
        return trial.suggest_float(name, self.low, self.high, log=self.kind == "loguniform")

    def extremes(self) -> list:
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]

    def contains(self, value) -> bool:
        if self.kind == "categorical":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return self.low <= value <= self.high and (self.kind != "int" or value == int(value))

    def describe(self) -> str:
        if self.kind == "categorical":
            return f"one of {self.choices}"
        return f"in [{self.low:g}, {self.high:g}]" + (" (integers)" if self.kind == "int" else "")


def parse_distribution(spec, where: str, key: str) -> Distribution:
    """`{type, low, high}` or `{type: categorical, choices}` at `key` of the file `where`."""
    spec = mapping(spec, where, key)
    kind = spec.get("type")
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: {key}.type: {shown(kind)} is not one of {', '.join(DISTRIBUTIONS)}")
    if kind == "categorical":
        no_unknown(spec, {"type", "choices"}, where, f"{key}.")
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: {key}.choices: must be a non-empty list, got {shown(choices)}")
        odd = next((c for c in choices if c is not None and not isinstance(c, (bool, int, float, str))), None)
        if odd is not None:  # what Optuna can store as a categorical's value
            raise ConfigError(f"{where}: {key}.choices: each must be a number, a string, true/false or null, "
                              f"got {shown(odd)}")
        return Distribution(kind, choices=choices)
    no_unknown(spec, {"type", "low", "high"}, where, f"{key}.")
    low, high = spec.get("low"), spec.get("high")
    for name, value in (("low", low), ("high", high)):
        try:
            check_number(f"{key}.{name}", value)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        if kind == "int" and int(value) != value:
            raise ConfigError(f"{where}: {key}.{name}: must be an integer for type int, got {shown(value)}")
    if not low < high:
        raise ConfigError(f"{where}: {key}: low ({low}) must be below high ({high})")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: {key}.low: must be > 0 for loguniform, got {low}")
    return Distribution(kind, low=low, high=high)
