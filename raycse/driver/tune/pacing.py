"""How often Tune snapshots a search: the least interval between a trial's checkpoints; and the period of Tune's own
snapshots.

Tune snapshots the experiment — every trial's state, about 20 KB a trial (benchmarks/scale.py) — once a period,
and also each time a trial hands it a checkpoint: it keeps one checkpoint per trial (CheckpointConfig(num_to_keep=1))
and must never leave a snapshot naming a checkpoint it has deleted. A trial that handed over a checkpoint at every
evaluation made the driver write a snapshot of the whole search at every result: work that grows with the search
at every result, quadratic in all (benchmarks/scale.py measured it as the largest cost of the driver's loop).

So a trial hands Tune a checkpoint at most once every `checkpoint_every_s` seconds, and the driver sets that to a
second per slot beyond the first: all trials together hand over about one checkpoint a second whatever the
cluster's size. It is a floor: a trial hands over a checkpoint only with the evaluations that write its last/, which
the trial's own cadence also spaces by what writing it costs (raycse.training.checkpoints.CheckpointCadence: at most
5% of its time), and always with its last step's evaluation, whose best/ is the answer's model. Only the reports
that carry a checkpoint change: every evaluation still reaches ASHA, Optuna and MLflow.

Light on purpose: the trial (raycse.driver.tune.trial) and the stand-in of benchmarks/scale.py (which hands over a
checkpoint with the first evaluation `checkpoint_every_s` after its last one: `CheckpointPace`) both read it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

CHECKPOINTS_PER_S = 1.0  # across all the trials of a stage: one second between a trial's checkpoints per slot
# Up to this many trials a snapshot takes a few tens of milliseconds (about 0.1 ms a trial on a 2-core CPU,
# measured), so Tune snapshots every second; beyond, Tune's own "auto" period (at least 10 s, adjusted to keep its
# snapshots under 5% of the loop) keeps the snapshots' cost from growing with the search.
SMALL_SEARCH = 256
PERIOD_ENV = "TUNE_GLOBAL_CHECKPOINT_S"
_USERS_PERIOD = os.environ.get(PERIOD_ENV)  # the user's own setting, which is kept


def checkpoint_every_s(slots: int) -> float:
    """The least seconds between two checkpoints of one trial, for a stage that runs `slots` trials at once."""
    return max(0, slots - 1) / CHECKPOINTS_PER_S  # one slot: every evaluation


@dataclass
class CheckpointPace:
    """Whether a trial's evaluation should hand Tune its checkpoint: the first time `every_s` seconds have passed
    since the trial started or since its last checkpoint."""

    every_s: float
    last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every_s

    def handed(self) -> None:
        self.last = time.monotonic()


def set_snapshot_period(storage_path: str, num_samples: int) -> None:
    """Tune's snapshot period for this search (read when a stage's Tune run starts), unless the user set one: every
    second for a small search on a local disk (a snapshot at most a second old when the driver dies), Tune's "auto"
    beyond SMALL_SEARCH trials or on remote storage (where each snapshot is an upload)."""
    if _USERS_PERIOD is not None:
        return
    os.environ[PERIOD_ENV] = "1" if "://" not in storage_path and num_samples <= SMALL_SEARCH else "auto"
