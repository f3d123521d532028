"""Where a search stands in its stores, read without changing anything: not started; started (its Tune state is under
the storage path, and `--resume` continues it); or finished (its MLflow parent run ended FINISHED, and its outcome
is read back from its summary as `raycse.load` reads it). `raycse compare --resume` asks this of each loss's search
(raycse/comparing.py), so that a comparison goes on from where a stop left it and trains nothing twice.

A search stopped before its search stage built its Tune experiment (in its set-up) has not started by this rule: it
starts again, and the parent run that set-up had opened is marked KILLED (`NOT_STARTED` with a `parent_run_id`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raycse.errors import ConfigError
from raycse.records import PATH_TAG

if TYPE_CHECKING:
    from raycse.driver.outcome import SearchOutcome
    from raycse.driver.state import SearchOptions
    from raycse.settings.space import SearchSpace

NOT_STARTED, STARTED, FINISHED_SEARCH = "not started", "started", "finished"


@dataclass(frozen=True)
class Standing:
    """A search's standing: `state` (NOT_STARTED, STARTED or FINISHED_SEARCH), its MLflow parent run if the store
    holds one, and, once read back, the outcome of a finished search."""

    state: str
    parent_run_id: str | None = None
    outcome: SearchOutcome | None = None


def search_standing(space: SearchSpace, options: SearchOptions) -> Standing:
    """Where the search of `space` (its experiment) stands in the stores `options` name. Reads only.

    Returns:
        its `Standing` (a ConfigError when the storage path cannot hold a search).

    Example:
        if search_standing(space, options).state == STARTED:
            run_search(space, dataclasses.replace(options, resume=True))
    """
    from raycse.driver.preflight import search_location

    path, started = search_location(space, options)
    parent = _parent_run(options.tracking_uri, space.experiment, path)
    if parent is not None and parent.info.status == "FINISHED":
        return Standing(FINISHED_SEARCH, parent.info.run_id)
    return Standing(STARTED if started else NOT_STARTED, parent.info.run_id if parent is not None else None)


def _parent_run(tracking_uri: str, experiment: str, search_path: str):
    from raycse.tracking.tracker import Tracker

    try:
        tracker = Tracker.existing(tracking_uri, experiment)
    except ConfigError:  # no store yet, or no such experiment: no search recorded
        return None
    found = tracker.find_run(PATH_TAG, search_path)  # the latest search at this path
    return tracker.run(found) if found is not None else None


def finished_outcome(tracking_uri: str, experiment: str, parent_run_id: str) -> SearchOutcome:
    """The outcome of the finished search whose parent run this is, as the search returned it (`raycse.load`).

    Returns:
        its `SearchOutcome` (a ConfigError when the run holds no summary).

    Example:
        outcome = finished_outcome(uri, "compare-simcse-focal-simcse", standing.parent_run_id)
    """
    from raycse.driver.loaded import outcome_from_summary
    from raycse.reporting.load import recorded_summary
    from raycse.tracking.tracker import Tracker

    tracker = Tracker.existing(tracking_uri, experiment)
    parent = tracker.run(parent_run_id)
    return outcome_from_summary(recorded_summary(tracker, parent_run_id), parent_run_id, parent.info.run_name,
                                parent.data.params)
