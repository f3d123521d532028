"""Tune's trial workers, counted from Tune's own debug log: requested for a trial, reused, and killed while starting
(a finished trial's worker went to that trial instead; raycse/driver/tune/newest_first.py says why that matters).

Tune says these things only in its controller's debug lines, so the count reads them: if Ray rewords them, the
counts read 0 and the checks built on them fail rather than pass."""
from __future__ import annotations

import logging


class WorkerRequests:
    """Within `with WorkerRequests() as workers:`, `workers.counts` counts Tune's trial workers (Ray actors, a
    process each) by what happened to them."""

    LINES = {"requested": "Scheduled new ACTOR", "killed_while_starting": "Removing ORIGINAL ACTOR",
             "reused": "Reusing ACTOR"}

    def __enter__(self):
        counts = self.counts = dict.fromkeys(self.LINES, 0)
        lines = self.LINES

        class Counter(logging.Handler):
            def emit(self, record):
                message = str(record.msg)
                for key, start in lines.items():
                    if message.startswith(start):
                        counts[key] += 1

        self.logger = logging.getLogger("ray.tune.execution.tune_controller")
        self.level, self.handler = self.logger.level, Counter(logging.DEBUG)
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)
