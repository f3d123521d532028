"""How many trials really ran at once: from the search stage's trials' start and end times.

Tune's `max_concurrent_trials` is a ceiling, not a measurement: a searcher that holds suggestions back (Ray's
OptunaSearch once ran trials one at a time despite it), actors slow to start, or a trial that waits for its
resources all leave slots idle. The mean number of trials running is the integral of the running count over a
window divided by the window's length, i.e. the trials' summed durations clipped to the window over the window:

  mean_running           over the search stage (first start to last end)
  mean_running_starting  while trials remain to start (first start to the last trial's start): there the count
                         should equal the slots; after it, the stage's tail runs down as its last trials end
  slot_use               mean_running_starting / slots
"""
from __future__ import annotations

from collections.abc import Sequence


def mean_running(spans: Sequence[tuple[float, float]], begin: float, end: float) -> float:
    """The mean number of (start, end) spans covering [begin, end] (the last span's count, if the window is a point)."""
    if end <= begin:
        return float(sum(1 for s, e in spans if s <= begin <= e))
    return sum(max(0.0, min(e, end) - max(s, begin)) for s, e in spans) / (end - begin)


def search_concurrency(spans: Sequence[tuple[float, float]], slots: int) -> dict[str, float]:
    """The figures above, for trials' (start, end) wall-clock times; {} when there are none or no times."""
    spans = [(s, e) for s, e in spans if s > 0 and e >= s]
    if not spans:
        return {}
    first, last_start, last_end = min(s for s, _ in spans), max(s for s, _ in spans), max(e for _, e in spans)
    starting = mean_running(spans, first, last_start) if len(spans) > 1 else 1.0
    return {"mean_running": mean_running(spans, first, last_end), "mean_running_starting": starting,
            "slot_use": starting / max(1, slots), "slots": float(slots)}
