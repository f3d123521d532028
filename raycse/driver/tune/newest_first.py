"""Tune schedulers that start the newest pending trial first, so that a finished trial's worker is reused by the
trial the searcher has just suggested.

Why: with `reuse_actors=True`, Tune caches a finished trial's worker (a Ray actor, one process) and, at its next
step, hands it to the trial its scheduler chooses to run. Tune's FIFO order (ASHA inherits it) chooses the
oldest pending trial, and that trial already has a worker of its own starting; Tune kills the starting worker and
asks Ray for a new one for the trial the searcher suggests next. While trials remain to start, every finished
trial thus costs one worker process started for nothing, and on a busy head node the processes starting crowd out
the ones that would finish starting: `benchmarks/scale.py` (128 stand-in trials, 32 slots, 2 cores) started 61
worker processes of which 10 ever ran a trial, and killed 75 starting workers (Tune's debug log).

Choosing the newest pending trial gives the cached worker to the trial suggested this step, which has no worker
yet; the older pending trials keep theirs (the same run: 32 workers started, every one ran trials, none killed).
Only when no new trial comes (the search's last trials) does a cached worker go to a pending trial that has one
starting, as before. The choice changes no trial's result, only which worker runs it; within
`max_concurrent_trials` every pending trial has the resources it asks for, so none waits for long.
"""
from __future__ import annotations

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from raycse.settings.space import SearchSpace


class NewestPendingFirst:
    """The scheduler's choice of the trial to start: the newest pending one, else the newest paused one."""

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        trials = tune_controller.get_trials()
        for status in (Trial.PENDING, Trial.PAUSED):
            for trial in reversed(trials):
                if trial.status == status:
                    return trial
        return None


class NewestFirstFIFO(NewestPendingFirst, FIFOScheduler):
    """FIFO scheduling (every trial runs to its end), newest pending trial started first."""


class NewestFirstASHA(NewestPendingFirst, ASHAScheduler):
    """ASHA (asynchronous successive halving), newest pending trial started first."""


def scheduler(space: SearchSpace):
    """ASHA over training steps (rungs every grace period x reduction factor), or FIFO; either starts the newest
    pending trial first (the classes above: a finished trial's worker goes to the next trial)."""
    if space.scheduler["name"] == "fifo":
        return NewestFirstFIFO()
    eval_steps = space.base.eval_steps
    # trials end on their own; max_t only caps ASHA's rungs (one past the last step keeps the final report)
    max_t = (space.base.max_steps or 10**7) + 1
    return NewestFirstASHA(time_attr="step", max_t=max_t, grace_period=int(space.scheduler["grace_evals"] * eval_steps),
                           reduction_factor=space.scheduler["reduction_factor"])
