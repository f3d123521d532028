"""How a search's answer is reached after its search stage: the `search.confirm` settings of a space file
(`Confirm`), their defaults, and their checks, which `cpu_budget.confirm` goes through again as merged.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from raycse.errors import ConfigError
from raycse.settings.checks import CONFIRM_SEEDS_LIMIT, INT_LIMIT, check_int, mapping, no_unknown

CONFIRM_KEYS = {"top_k", "choose_seeds", "judge_seeds", "test_seeds", "looks"}


@dataclass
class Confirm:
    """How the answer is reached after the search stage (raycse/judging/decision.py): the `top_k` best configurations
    are trained on `choose_seeds` fresh seeds and the best mean there wins (no choosing block when top_k is 1); the
    winner and the published point are then trained on `judge_seeds` further fresh seeds, which alone judge them.
    The defaults are the full budget's: 18 judging seeds can detect a difference of one seed-std (80% power).
    `test_seeds`: how many of the judging seeds (the first ones) also score the seven test tasks; None, all.
    `looks`: after how many judging seeds the judgment is looked at (sequential judging, which stops when it knows);
    None: a third, a half, two thirds and all of them when there are 12 or more (6, 9, 12, 18), else one look."""

    top_k: int = 3
    choose_seeds: int = 3
    judge_seeds: int = 18
    test_seeds: int | None = None
    looks: tuple[int, ...] | None = None

    def judging_looks(self) -> tuple[int, ...]:
        if self.looks is not None:
            return tuple(self.looks)
        n = self.judge_seeds
        return (n // 3, n // 2, 2 * n // 3, n) if n >= 12 else (n,)

    def judging_seeds_on_test(self) -> int:
        return self.judge_seeds if self.test_seeds is None else min(self.test_seeds, self.judge_seeds)


def parse_confirm(raw, where: str, key: str, base: Confirm | None = None) -> Confirm:
    """`{top_k, choose_seeds, judge_seeds, test_seeds}`, over `base` (the defaults, or the full budget's for
    cpu_budget)."""
    values = mapping(raw, where, key)
    no_unknown(values, CONFIRM_KEYS, where, f"{key}.")
    confirm = dataclasses.replace(base or Confirm(), **values)
    try:
        check_int("top_k", confirm.top_k, low=1, high=INT_LIMIT)
        check_int("choose_seeds", confirm.choose_seeds, low=1 if confirm.top_k > 1 else 0, high=CONFIRM_SEEDS_LIMIT)
        check_int("judge_seeds", confirm.judge_seeds, low=2, high=CONFIRM_SEEDS_LIMIT)  # 2: the least for an interval
        if confirm.test_seeds is not None:
            check_int("test_seeds", confirm.test_seeds, low=1, high=confirm.judge_seeds)
        if confirm.looks is not None:
            looks = confirm.looks
            if (not isinstance(looks, (list, tuple)) or not looks or any(type(n) is not int for n in looks)
                    or list(looks) != sorted(set(looks)) or looks[0] < 2 or looks[-1] != confirm.judge_seeds):
                raise ConfigError(f"looks must be rising whole numbers from at least 2 up to judge_seeds "
                                  f"({confirm.judge_seeds}), not {looks!r}")
            confirm = dataclasses.replace(confirm, looks=tuple(looks))
    except ConfigError as err:
        raise ConfigError(f"{where}: {key}.{err}") from None
    return confirm
