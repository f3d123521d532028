"""How a search's answer is reached (`ConfirmPlan`, the one type of it: a space file's `search.confirm` is parsed into
it, raycse/settings/confirm.py): how many configurations go on to be chosen among, the seeds of each block
(`seed_blocks`: the search stage's one seed, then the choosing block, then the judging block), and the judging looks.

The blocks are disjoint, so that no run that ranked a configuration is counted in a choosing or judging mean, and
no run that chose the winner judges it (raycse/judging/decision.py). The budgets' defaults are measured by
benchmarks/selection_bias.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raycse.judging.seed_scores import SeedScore

# What a budget's answer is judged as (settings/budgets.py's JUDGED_AS maps each budget a search runs onto these):
# the full budget's a decision, the CPU budget's a demonstration of the mechanism.
JUDGED_BUDGETS = ("full", "cpu")
# The figure that judges (`ConfirmPlan.judge_on`): the seven-task test average, or the held-out part of the objective's
# pairs, with their words in the verdict.
TEST = "test"
SPLIT = "split"
JUDGED_WORDS = {TEST: "the seven-task test average", SPLIT: "the held-out part of the objective's pairs"}


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


def default_looks(judge_seeds: int) -> tuple[int, ...]:
    """The judging looks a plan that names none takes: a third, a half, two thirds and all of the judging seeds when
    there are 12 or more (6, 9, 12, 18 of 18), else one look at the end."""
    n = judge_seeds
    return (n // 3, n // 2, 2 * n // 3, n) if n >= 12 else (n,)


def looks_problem(looks: Any, judge_seeds: int) -> str | None:
    """What is wrong with `looks` as a plan's judging looks (None: nothing): whole numbers, rising, from at least 2
    up to judge_seeds."""
    if (not isinstance(looks, (list, tuple)) or not looks or any(type(n) is not int for n in looks)
            or list(looks) != sorted(set(looks)) or looks[0] < 2 or looks[-1] != judge_seeds):
        return f"looks must be rising whole numbers from at least 2 up to judge_seeds ({judge_seeds}), not {looks!r}"
    return None


@dataclass(frozen=True)
class ConfirmPlan:
    """How an answer is reached after the search stage: the `top_k` best configurations are trained on
    `choose_seeds` fresh seeds and the best mean there wins (no choosing block when top_k is 1); the winner and the
    published point are then trained on `judge_seeds` further fresh seeds, which alone judge them.

    The first five fields are a space file's `search.confirm` (raycse/settings/confirm.py parses it); their
    defaults are the full budget's: 18 judging seeds can detect a difference of one seed-std (80% power).
    `test_seeds`: how many of the judging seeds (the first ones) also score the seven test tasks; None, all.
    `looks`: after how many judging seeds the judgment is looked at (sequential judging, which stops when it knows);
    None: `default_looks` (6, 9, 12, 18 of 18; one look under 12 seeds).

    The rest the search fills in when it judges (raycse/driver/confirmation.py): `budget` is "full" or "cpu" (a CPU
    budget's answer is a demonstration of the mechanism, not a decision); `objective` and `test_label` name the two
    figures in the verdict's words; `test_key` is the test figure that judges "beats the untouched model" (the
    seven-task average).
    """

    top_k: int = 3
    choose_seeds: int = 3
    judge_seeds: int = 18
    test_seeds: int | None = None
    looks: tuple[int, ...] | None = None
    budget: str = "full"
    base_seed: int = 42
    num_samples: int | None = None
    objective: str = "objective"
    test_label: str = "seven-task test average"
    test_key: str = "avg"
    judge_on: str = TEST  # the figure that judges: "test" (seven-task average) or "split" (held-out pairs)

    def __post_init__(self):
        if self.budget not in JUDGED_BUDGETS:
            raise ValueError(f"budget must be one of {JUDGED_BUDGETS}, not {self.budget!r}")
        if self.judge_on not in JUDGED_WORDS:
            raise ValueError(f"judge_on must be one of {sorted(JUDGED_WORDS)}, not {self.judge_on!r}")
        if self.looks is not None:
            problem = looks_problem(self.looks, self.judge_seeds)
            if problem:
                raise ValueError(problem)
            object.__setattr__(self, "looks", tuple(self.looks))
        self.seeds()  # checks top_k, choose_seeds and judge_seeds

    @property
    def design_looks(self) -> tuple[int, ...]:
        """The looks the boundaries are computed for: the plan's, or `default_looks`."""
        return self.looks if self.looks is not None else default_looks(self.judge_seeds)

    def judged(self, score: SeedScore) -> float | None:
        """The judged figure of a valid run (None when it has none): its test average or its held-out part."""
        value = score.test.get(self.test_key) if self.judge_on == TEST else score.held_out
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


# The defaults (benchmarks/selection_bias.py measures them). Full budget: ConfirmPlan's own. 18 judging seeds make the
# smallest detectable difference (two-sided 95%, 80% power, paired differences with sd sqrt(2) sigma, df = n - 1) at
# most one seed-std (0.99 sigma; 17 seeds give 1.02); `seeds_to_detect(1.0)` recomputes it. 3 choosing seeds for the
# top 3: against 2 they pick a configuration truly one seed-std better more often (see the benchmark's README
# section) for 3 more trials. CPU budget: no choosing block and 2 judging seeds, the least that gives an
# interval, of which one scores the test tasks (each scoring costs more than a trial's training on 2 cores:
# docs/method.md, "The budgets"): a demonstration of the mechanism,
# which does not judge the winner against the untouched model.
CPU_DEFAULTS = {"top_k": 1, "choose_seeds": 0, "judge_seeds": 2, "test_seeds": 1}


def default_plan(budget: str, **overrides: Any) -> ConfirmPlan:
    """The budget's default plan, with any field overridden."""
    if budget not in JUDGED_BUDGETS:
        raise ValueError(f"budget must be one of {JUDGED_BUDGETS}, not {budget!r}")
    return ConfirmPlan(budget=budget, **{**(CPU_DEFAULTS if budget == "cpu" else {}), **overrides})
