"""raycse/driver/tune/retries.py with Tune's own failure accounting (`Trial.handle_error`, `Trial.should_recover`),
driven in the order Tune's controller calls them: a trial's process lost while it starts is retried without using up
its one retry, in whichever order it comes; the trial's own failures still end it after one retry; a process that
dies at every start is a failure after all. The fake cluster's run (tests/test_cluster.py) shows it end to end."""
from __future__ import annotations

import os

import pytest

from raycse.driver.tune.retries import FREE_START_UPS, OwnFailuresOnly

pytestmark = pytest.mark.slow  # Tune's trials need a Ray runtime for their folders


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class Attempts:
    """One trial under Tune's rules with the callback, attempt after attempt: `fail(error)` is one failure as the
    controller handles it (`_process_trial_failure`); returns whether Tune retries it."""

    def __init__(self, tmp_path):
        from ray.train._internal.storage import StorageContext
        from ray.tune.experiment import Trial

        storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp", trial_dir_name="trial")
        self.trial = Trial("trainable", stub=True, storage=storage, max_failures=1)
        os.makedirs(self.trial.local_path, exist_ok=True)
        self.callback = OwnFailuresOnly(max_failures=1)
        self.start()

    def start(self) -> None:
        self.trial.set_status("PENDING")
        self.callback.on_step_begin(0, [self.trial])
        self.trial.set_status("RUNNING")
        self.callback.on_trial_start(0, [self.trial], self.trial)
        self.callback.on_step_begin(0, [self.trial])

    def report(self) -> None:
        self.callback.on_trial_result(0, [self.trial], self.trial, {"step": 1})
        self.callback.on_step_begin(0, [self.trial])

    def fail(self, error) -> bool:
        self.trial.handle_error(error)
        if not self.trial.should_recover():
            return False
        self.callback.on_trial_recover(0, [self.trial], self.trial)
        self.start()
        return True


def lost_process():
    from ray.exceptions import ActorDiedError

    return ActorDiedError()


def own_error():
    from ray.exceptions import RayTaskError

    try:
        raise MemoryError("a petabyte")
    except MemoryError as err:
        return RayTaskError("train", "traceback", err)


def test_a_process_lost_while_the_trial_starts_leaves_its_retry_for_its_own_failures(local_ray, tmp_path):
    attempts = Attempts(tmp_path / "a")
    assert attempts.fail(lost_process())  # while starting: retried, not counted
    assert attempts.trial.num_failures == 0
    attempts.report()
    assert attempts.fail(lost_process())  # mid-run (a lost node): its one retry
    attempts.report()
    assert not attempts.fail(own_error())  # and then no more

    attempts = Attempts(tmp_path / "b")  # the other order: its own failure first, then a start-up death
    attempts.report()
    assert attempts.fail(own_error())
    assert attempts.fail(lost_process())  # while starting again: still retried
    assert attempts.trial.num_failures == 1
    attempts.report()
    assert not attempts.fail(own_error())


def test_a_process_that_dies_at_every_start_fails_and_an_error_while_starting_counts(local_ray, tmp_path):
    attempts = Attempts(tmp_path / "a")
    for _ in range(FREE_START_UPS):
        assert attempts.fail(lost_process())
    assert attempts.trial.num_failures == 0
    assert attempts.fail(lost_process())  # beyond the free start-ups: counted, its one retry
    assert not attempts.fail(lost_process())

    attempts = Attempts(tmp_path / "b")  # an error of the trial's own code while it starts counts
    assert attempts.fail(own_error())
    assert attempts.trial.num_failures == 1
    assert attempts.fail(own_error())  # one start more than Tune alone gives (see retries.py)
    assert not attempts.fail(own_error())
