"""The seed-level scores a decision reads (raycse/judging/decision.py): each confirmation run of a configuration by
block, and the untouched model's figures. Filled from the search's records by raycse/driver/confirmation.py."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from raycse.records import FINISHED


@dataclass(frozen=True)
class SeedScore:
    """One confirmation run: its seed, how it ended, its dev objective (the best over its curve) and its test
    figures by task (empty when the test tasks were off). Only a finished run with a finite dev value is valid."""

    seed: int
    status: str
    dev: float | None = None
    test: Mapping[str, float] = field(default_factory=dict)
    held_out: float | None = None  # the objective on its held-out part of the pairs, when the objective is split

    @property
    def valid(self) -> bool:
        return self.status == FINISHED and self.dev is not None and math.isfinite(self.dev)


@dataclass(frozen=True)
class ConfigScores:
    """A configuration's runs in each block. `search_rank` is its place in the search stage's ranking (1 = best;
    None for the published point when it did not rank among the top_k)."""

    key: str
    search_rank: int | None
    choose: tuple[SeedScore, ...] = ()
    judge: tuple[SeedScore, ...] = ()


@dataclass(frozen=True)
class UntouchedFigures:
    """The untouched model's figures: its dev objective (one evaluation) and its test figures by task."""

    dev: float | None = None
    test: Mapping[str, float] = field(default_factory=dict)
