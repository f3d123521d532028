"""The search stage's ranking: which configurations go on to be chosen among, read on a common footing.

Every search-stage trial trains with the base seed and ASHA stops some of them early, so the figures they end with
were read at different budgets. The ranking never compares those: finished trials first, by their best value over
the full run; only if fewer than top_k finished do the stopped ones follow, each by its best value up to the last
rung step that every one of them reached. Diverged and failed trials are never ranked.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from raycse.records import FINISHED, STOPPED


@dataclass(frozen=True)
class TrialCurve:
    """One search-stage trial: its configuration, how it ended (finished, stopped, diverged or failed), its
    dev curve as (step, value) pairs, and its place in the search's own order (`order`: the Optuna trial number,
    the order the searcher sampled it in; None where the search has no such number, a grid's trial)."""

    key: str
    status: str
    curve: tuple[tuple[int, float], ...]
    trial_id: str = ""
    order: int | None = None


@dataclass(frozen=True)
class Ranked:
    """A configuration's place in the search stage's ranking and the figure it was ranked by: the best value of
    its trial over the whole run (`up_to_step` None: a finished trial) or up to the common step of the stopped
    trials."""

    key: str
    rank: int
    status: str
    score: float
    up_to_step: int | None
    trial_id: str


def _best(curve: Sequence[tuple[int, float]], up_to: int | None = None) -> float | None:
    values = [v for s, v in curve if math.isfinite(v) and (up_to is None or s <= up_to)]
    return max(values) if values else None


def search_order(trial: TrialCurve) -> tuple[bool, int, str]:
    """Where a trial stands in its search's own order: by its Optuna number, the order it was sampled in; a trial
    without one (a grid's: Tune numbers its trials in order in their ids) after those, by its trial id."""
    return (trial.order is None, trial.order or 0, trial.trial_id)


def rank_for_confirmation(trials: Sequence[TrialCurve], top_k: int) -> tuple[Ranked, ...]:
    """The top_k configurations of the search stage, ranked on a common footing; one entry per configuration.

    Finished trials first, by their best value over the full run (a trial ASHA let finish beat its rung peers).
    Only if fewer than top_k configurations finished do the stopped trials follow, each by its best value up to
    the last rung step every stopped trial reached: values read at different budgets are never compared.
    Diverged and failed trials are never ranked. Ties go to the trial the search sampled first (`search_order`),
    so that the same search, run again with the same seeds, ranks alike: Tune's trial ids are random.

    Example:
        >>> tied = [TrialCurve("b", FINISHED, ((4, 87.09),), "0aa1", order=1),
        ...         TrialCurve("a", FINISHED, ((4, 87.09),), "f3c2", order=0)]
        >>> [r.key for r in rank_for_confirmation(tied, 1)]
        ['a']
    """
    finished = [(t, _best(t.curve)) for t in trials if t.status == FINISHED]
    stopped = [t for t in trials if t.status == STOPPED and _best(t.curve) is not None]
    ranked: list[Ranked] = []
    seen: set[str] = set()

    def take(entries: list[tuple[TrialCurve, float | None]], up_to: int | None) -> None:
        scored = [entry for entry in entries if entry[1] is not None]
        for trial, score in sorted(scored, key=lambda entry: (-entry[1], *search_order(entry[0]))):
            if len(ranked) < top_k and trial.key not in seen:
                seen.add(trial.key)
                ranked.append(Ranked(trial.key, len(ranked) + 1, trial.status, score, up_to, trial.trial_id))

    take(finished, None)
    if len(ranked) < top_k and stopped:
        common = min(max(s for s, v in t.curve if math.isfinite(v)) for t in stopped)
        take([(t, _best(t.curve, common)) for t in stopped], common)
    return tuple(ranked)
