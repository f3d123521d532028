"""Which failures use up a trial's retry: its own, not those of the machine it was given.

Tune retries a failed trial from its last checkpoint, `max_failures` times (raycse: once), and counts every failure
but one: a trial whose node was drained for a preemption (Ray's drain API with reason PREEMPTION, as Ray's
autoscaler drains a node on a cloud's preemption notice, or `ray drain-node`) and then lost is retried without
being counted (Tune's own rule: `RayActorError.preempted`).

One more failure is not the configuration's: the trial's process, or its node, gone while the trial was starting
(before its first result since it started or restarted: a node taken back at that moment, a worker that could not
start). Counted, it used up the one retry, and a later lost node then failed the trial. `OwnFailuresOnly` retries
such a failure and does not count it, up to FREE_START_UPS times a trial (a process that dies at every start is a
failure after all). An error the trial's own code raises counts whenever it comes.

Tune decides whether to retry before any callback hears of the failure, so the callback works ahead of it: while
a trial is starting, and has failed no more than its retries allow, the trial may fail once more (its
`max_failures` is one above the failures counted); once the failure is known to be a start-up death, it is not
counted (taken off `num_failures`); once the trial reports, its `max_failures` is back to the configured one. A
trial whose second failure of its own (an error of its code) comes while it starts is therefore started once more
before it fails. The counts of free start-ups are saved with Tune's snapshots, so `--resume` keeps them.
"""
from __future__ import annotations

from ray import tune

FREE_START_UPS = 2  # start-up deaths a trial is retried for without counting them


def counted_death(error) -> bool:
    """Whether a failure is the trial's process (or a Ray Train worker of it) gone, and counted by Tune: not an error
    its code raised, and not a preemption (which Tune does not count)."""
    from ray.exceptions import RayActorError, RayTaskError

    if isinstance(error, RayTaskError):
        error = error.as_instanceof_cause()
    return isinstance(error, RayActorError) and not error.preempted


def latest_error(trial):
    """The trial's latest failure, as Tune pickled it in the trial's local folder a moment ago (its copy on the
    storage, `Trial.get_pickled_error`, comes with the next sync)."""
    from ray import cloudpickle

    path = trial.pickled_error_file
    if not path:
        return None
    try:
        with open(path, "rb") as file:
            return cloudpickle.load(file)
    except (OSError, EOFError, cloudpickle.pickle.UnpicklingError):
        return None


class OwnFailuresOnly(tune.Callback):
    """Keeps a trial's `max_failures` retries for its own failures (see the module's docstring)."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures
        self.free: dict[str, int] = {}  # trial id -> start-up deaths not counted
        self.reported: set[str] = set()  # trials that reported since they (re)started

    def __getstate__(self) -> dict:
        return {"max_failures": self.max_failures, "free": dict(self.free), "reported": set()}

    def get_state(self) -> dict:
        return {"free": dict(self.free)}

    def set_state(self, state: dict) -> None:
        self.free = dict(state.get("free", {}))

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        for trial in trials:
            if trial.status in ("PENDING", "RUNNING"):
                trial.max_failures = self.allowed(trial)

    def allowed(self, trial) -> int:
        starting = trial.trial_id not in self.reported
        own = trial.run_metadata.num_failures
        if starting and own <= self.max_failures and self.free.get(trial.trial_id, 0) < FREE_START_UPS:
            return max(self.max_failures, own + 1)
        return self.max_failures

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        self.reported.discard(trial.trial_id)

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        self.reported.add(trial.trial_id)
        trial.max_failures = self.max_failures

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        starting = trial.trial_id not in self.reported
        self.reported.discard(trial.trial_id)
        free = self.free.get(trial.trial_id, 0)
        if starting and free < FREE_START_UPS and trial.run_metadata.num_failures > 0 \
                and counted_death(latest_error(trial)):
            self.free[trial.trial_id] = free + 1
            trial.run_metadata.num_failures -= 1
        trial.max_failures = self.allowed(trial)
