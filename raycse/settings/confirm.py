"""A space file's `search.confirm` (and a budget's `confirm:`, merged over it) parsed into the judging's one type of
it, `ConfirmPlan` (raycse/judging/confirmation_plan.py, which holds the defaults and the default looks): each key
checked as its row of the key table says (space_keys.py), then the rules between them.
"""
from __future__ import annotations

import dataclasses

from raycse.errors import ConfigError
from raycse.judging.confirmation_plan import ConfirmPlan, looks_problem
from raycse.settings.checks import mapping, no_unknown
from raycse.settings.space_keys import keys_of

CONFIRM = "search.confirm"
CONFIRM_KEYS = {key.name for key in keys_of(CONFIRM)}


def parse_confirm(raw, where: str, key: str, base: ConfirmPlan | None = None) -> ConfirmPlan:
    """`{top_k, choose_seeds, judge_seeds, test_seeds, looks}`, over `base` (the defaults, or the full budget's for
    cpu_budget)."""
    values = mapping(raw, where, key)
    no_unknown(values, CONFIRM_KEYS, where, f"{key}.")
    base = base or ConfirmPlan()
    merged = {name: values.get(name, getattr(base, name)) for name in CONFIRM_KEYS}
    rows = {row.name: row for row in keys_of(CONFIRM)}
    try:
        rows["top_k"].check("top_k", merged["top_k"])
        # at least one choosing seed where there is a choosing block
        rows["choose_seeds"].check("choose_seeds", merged["choose_seeds"], low=1 if merged["top_k"] > 1 else 0)
        rows["judge_seeds"].check("judge_seeds", merged["judge_seeds"])
        rows["test_seeds"].check("test_seeds", merged["test_seeds"], high=merged["judge_seeds"])
        if merged["looks"] is not None and (problem := looks_problem(merged["looks"], merged["judge_seeds"])):
            raise ConfigError(problem)
    except ConfigError as err:
        raise ConfigError(f"{where}: {key}.{err}") from None
    return dataclasses.replace(base, **merged)
