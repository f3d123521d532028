"""How a search's answer is reached (`ConfirmPlan`): how many configurations go on to be chosen among, and the seeds
of each block (`seed_blocks`): the search stage's one seed, then the choosing block, then the judging block.

The blocks are disjoint, so that no run that ranked a configuration is counted in a choosing or judging mean, and
no run that chose the winner judges it (raycse/judging/decision.py). The budgets' defaults are measured by
benchmarks/selection_bias.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raycse.judging import judgment
from raycse.judging.seed_scores import SeedScore

BUDGETS = ("full", "cpu")


@dataclass(frozen=True)
class SeedBlocks:
    """The seeds of each stage: the search stage's one seed, then the choosing block, then the judging block."""

    search: int
    choose: tuple[int, ...]
    judge: tuple[int, ...]


def seed_blocks(base_seed: int, *, top_k: int, choose_seeds: int, judge_seeds: int) -> SeedBlocks:
    """base_seed for the search stage; base + 1 ... for choosing (none when top_k == 1); judging after those.

    The blocks are consecutive and disjoint, and none holds the search stage's seed: no run that ranked a
    configuration is counted in a choosing or judging mean, and no run that chose the winner judges it.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, not {top_k}")
    if judge_seeds < 1:
        raise ValueError(f"judge_seeds must be at least 1, not {judge_seeds}")
    if top_k > 1 and choose_seeds < 1:
        raise ValueError(f"top_k {top_k} needs at least one choosing seed, not {choose_seeds}")
    n_choose = choose_seeds if top_k > 1 else 0
    choose = tuple(base_seed + 1 + i for i in range(n_choose))
    judge = tuple(base_seed + 1 + n_choose + i for i in range(judge_seeds))
    return SeedBlocks(base_seed, choose, judge)


@dataclass(frozen=True)
class ConfirmPlan:
    """How an answer is reached: how many configurations go on to be chosen among, and the seeds of each block.

    `budget` is "full" or "cpu"; a CPU budget's answer is a demonstration of the mechanism, not a decision.
    `objective` and `test_label` name the two figures in the verdict's words; `test_key` is the test figure that
    judges "beats the untouched model" (the seven-task average).
    """

    budget: str
    top_k: int
    choose_seeds: int
    judge_seeds: int
    base_seed: int = 42
    test_seeds: int | None = None  # how many judging seeds score the test tasks (the first ones); None: all
    num_samples: int | None = None
    objective: str = "objective"
    test_label: str = "seven-task test average"
    test_key: str = "avg"
    judge_on: str = judgment.TEST  # the figure that judges: "test" (seven-task average) or "split" (held-out pairs)
    looks: tuple[int, ...] | None = None  # interim looks of the judging block (seeds run); None: one look at the end

    def __post_init__(self):
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, not {self.budget!r}")
        if self.judge_on not in judgment.JUDGED_WORDS:
            raise ValueError(f"judge_on must be one of {sorted(judgment.JUDGED_WORDS)}, not {self.judge_on!r}")
        if self.looks is not None and (list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 2
                                       or self.looks[-1] != self.judge_seeds):
            raise ValueError(f"looks must rise from at least 2 to judge_seeds {self.judge_seeds}, not {self.looks}")
        self.seeds()  # checks top_k, choose_seeds and judge_seeds

    @property
    def design_looks(self) -> tuple[int, ...]:
        """The looks the boundaries are computed for: the plan's, or one look at judge_seeds."""
        return tuple(self.looks) if self.looks else (self.judge_seeds,)

    def judged(self, score: SeedScore) -> float | None:
        """The judged figure of a valid run (None when it has none): its test average or its held-out part."""
        value = score.test.get(self.test_key) if self.judge_on == judgment.TEST else score.held_out
        return value if value is not None and math.isfinite(value) else None

    def seeds(self) -> SeedBlocks:
        return seed_blocks(self.base_seed, top_k=self.top_k, choose_seeds=self.choose_seeds,
                           judge_seeds=self.judge_seeds)

    @property
    def judging_seeds_on_test(self) -> int:
        """How many judging seeds (the first ones) score the test tasks."""
        return self.judge_seeds if self.test_seeds is None else min(self.test_seeds, self.judge_seeds)

    @property
    def has_choosing(self) -> bool:
        return self.top_k > 1


# The defaults (benchmarks/selection_bias.py measures them). Full budget: 18 judging seeds make the smallest
# detectable difference (two-sided 95%, 80% power, paired differences with sd sqrt(2) sigma, df = n - 1) at most
# one seed-std (0.99 sigma; 17 seeds give 1.02); `seeds_to_detect(1.0)` recomputes it. 3 choosing seeds for the
# top 3: against 2 they pick a configuration truly one seed-std better more often (see the benchmark's README
# section) for 3 more trials. CPU budget: no choosing block and 2 judging seeds, the least that gives an
# interval, of which one scores the test tasks (about 2 minutes on 2 cores each): a demonstration of the mechanism,
# which does not judge the winner against the untouched model.
FULL_DEFAULTS = {"top_k": 3, "choose_seeds": 3, "judge_seeds": 18, "looks": (6, 9, 12, 18)}
CPU_DEFAULTS = {"top_k": 1, "choose_seeds": 0, "judge_seeds": 2, "test_seeds": 1}


def default_plan(budget: str, **overrides: Any) -> ConfirmPlan:
    """The budget's default plan, with any field overridden."""
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, not {budget!r}")
    return ConfirmPlan(budget=budget, **{**(FULL_DEFAULTS if budget == "full" else CPU_DEFAULTS), **overrides})
