"""A trial whose reused worker is lost while Tune resets it for the trial: retried, as any lost worker's trial is.

With `reuse_actors=True` Tune hands a finished trial's worker (a Ray actor) to the next trial, and first calls the
worker's `reset` (it waits there for the previous trial's code to return: up to TUNE_FUNCTION_THREAD_TIMEOUT_S
while a stopped trial unwinds). Tune 2.60's controller mishandles a worker lost during that call: the failed call
is one event with two callbacks, the worker's (`_actor_failed`: the trial, still PENDING, is set RUNNING, its
failure handled under the failure policy: retried, PENDING again) and the call's own (`_trial_task_failure`: the
same failure handled a second time, counted again, and the trial, PENDING now, is failed for good:
`_process_trial_failure` retries only a RUNNING trial). The trial also stayed among the trials being reset, which
Tune never starts again.

`retry_resets()` makes the call's own callback a no-op in exactly that case: a lost worker's failure, for a trial
being reset whose worker's own callback has handled it (the trial no longer holds that worker); had that callback
not run, the call's own handles the trial as it would have, RUNNING, so that it is retried. Either way the trial
leaves the trials being reset, and the failure is counted once, under the search's rules
(raycse.driver.tune.retries: a trial lost before its first report is retried without counting it). Any other
failure of the reset (an error its code raises) is Tune's to handle, as before.

This changes a method of Tune's private controller (`ray.tune.execution.tune_controller.TuneController`); raycse
pins Ray to 2.60.x, and tests/test_reset_failures.py kills a node during the reset itself on the fake cluster.
"""
from __future__ import annotations

import functools

_PATCHED = "_raycse_reset_failures"


def retry_resets() -> None:
    """Make Tune retry a trial whose worker is lost during its reset (see the module's docstring). Idempotent.

    Example:
        >>> retry_resets()
        >>> from ray.tune.execution.tune_controller import TuneController
        >>> getattr(TuneController._trial_task_failure, "_raycse_reset_failures", False)
        True
    """
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController._trial_task_failure
    if getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def _trial_task_failure(self, trial, exception):
        if trial in self._resetting_trials and trial.status != trial.RUNNING:
            # the reset's own callback (the worker's, had it run, set the trial RUNNING first and then handled it)
            self._resetting_trials.discard(trial)
            if lost_worker(exception):
                if trial not in self._trial_to_actor:
                    return  # handled: the worker's callback took the worker from the trial
                self._set_trial_status(trial, trial.RUNNING)  # not handled: as the worker's callback would
        return original(self, trial, exception)

    setattr(_trial_task_failure, _PATCHED, True)
    TuneController._trial_task_failure = _trial_task_failure


def lost_worker(exception) -> bool:
    """Whether a failure is the worker's process (or its node) gone, rather than an error its code raised."""
    from ray.exceptions import RayActorError

    return isinstance(exception, RayActorError)
