"""What every stage of a search is: a name (its phase, timed as `time_<name>_s`), what it needs from the search's
state, what it adds to it, and a `run` that does its work, resuming where an interrupted search left it.

A new stage is a module in this package with one subclass of `Stage`, and one line in the conductor's list
(raycse/driver/run.py), which checks before anything starts that every need is produced by an earlier stage.
"""
from __future__ import annotations

from typing import ClassVar

from raycse.driver.state import SearchState


class Stage:
    name: ClassVar[str]  # the phase: time_<name>_s on the parent run and in the printed timings
    needs: ClassVar[tuple[str, ...]] = ()  # SearchState fields it reads, produced by earlier stages
    produces: ClassVar[tuple[str, ...]] = ()  # SearchState fields it sets

    def applies(self, state: SearchState) -> bool:
        """Whether this search runs the stage at all (stage 0 only for DCLR, say)."""
        return True

    def run(self, state: SearchState) -> None:
        """Do the stage's work on `state`; on --resume (state.options.resume), continue it."""
        raise NotImplementedError
