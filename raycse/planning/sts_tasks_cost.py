"""What the seven STS test tasks cost a search under each choice of `test_eval`: the same plan priced by the cost
model with the tasks scored on every finished trial (all), on the judging runs and the untouched model (best, the
default: where the answer uses them) or on none, so that the dry run states what the file's choice costs and what
each other one would.
"""
from __future__ import annotations

from raycse.driver.layout import needs_stage0
from raycse.planning.cost_model import Rates, SearchCost, duration
from raycse.planning.search_stages import stages_of
from raycse.settings.space import SearchSpace
from raycse.settings.space_keys import TestScoring

TEST_EVAL_WORDS = {TestScoring.ALL: "every finished trial",
                   TestScoring.BEST: "the judging runs and the untouched model", TestScoring.NONE: "no run"}


def test_eval_price(space: SearchSpace, steps: int, rates: Rates, slots: int, gpus: float, weight_bytes: int | None,
                    keep_last: str) -> tuple[float, float]:
    """(wall-clock seconds, trial-hours) expected for `plan` as its test_eval says, the untouched model included.

    Example:
        >>> price = test_eval_price(plan, 186, rates, 4, 1, 90_864_192, "none")  # doctest: +SKIP
    """
    cost = SearchCost(rates, slots, gpus, stages_of(space, steps, with_stage0=needs_stage0(space))[1], weight_bytes,
                      keep_last)
    busy = sum(stage.seconds(rates, slots)[1] + (stage.beside.seconds(rates, cold=True) if stage.beside else 0.0)
               for stage in cost.stages)
    return cost.wall_seconds(), busy / 3600


def test_eval_line(chosen: str, prices: dict[str, tuple[float, float]]) -> str:
    """The dry run's line: what the test tasks cost as chosen, and each other choice's difference (expected).

    Example:
        >>> prices = {"all": (300.0, 0.1), "best": (240.0, 0.08), "none": (200.0, 0.06)}
        >>> test_eval_line("best", prices).split("; ")[1]
        'instead, all (every finished trial) +60 s of wall clock, +0.02 trial-hours'
    """
    wall, hours = prices[chosen]
    others = [f"{choice} ({TEST_EVAL_WORDS[choice]}) {_signed(other_wall - wall)} of wall clock, "
              f"{other_hours - hours:+.2f} trial-hours" for choice, (other_wall, other_hours) in prices.items()
              if choice != chosen]
    return (f"Test tasks: test_eval: {chosen}, scored on {TEST_EVAL_WORDS[chosen]}; instead, " + "; ".join(others)
            + " (expected).")


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + duration(abs(seconds))
