"""raycse/driver/tune/resumable_limits.py on a real Tune experiment: a grid whose snapshot still counts a finished
trial as running (a search killed after the trial finished, before the grid's state was written again) resumes and ends.
Tune's own grid generator, restored from the same snapshot, would hold back every trial and never finish: Tune then
waits for a trial forever."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _trainable(config):
    from ray import tune

    tune.report({"x": config["x"]})


def _snapshot_counting_a_finished_trial(tmp_path: Path) -> tuple[Path, str]:
    """A 3-trial grid, one trial at a time, stopped after its first trial; its grid snapshot then rewritten as the
    kill leaves it: the finished first trial still counted as running, the grid not finished."""
    import ray.cloudpickle as cloudpickle
    from ray import tune

    from raycse.driver.tune.resumable_limits import ForgetFinishedTrials, ResumableGrid

    tune.Tuner(_trainable, param_space={"x": tune.grid_search([0, 1, 2])},
               tune_config=tune.TuneConfig(search_alg=ResumableGrid(max_concurrent=1)),
               run_config=tune.RunConfig(name="grid", storage_path=str(tmp_path), verbose=0,
                                         callbacks=[ForgetFinishedTrials()])).fit()
    path = tmp_path / "grid"
    results = tune.Tuner.restore(str(path), trainable=_trainable).get_results()
    first = next(r for r in results if r.config["x"] == 0).metrics["trial_id"]
    (state_file,) = path.glob("basic-variant-state-*.json")
    state = cloudpickle.loads(state_file.read_bytes())
    state.update(_live_trials={first}, _finished=False)
    state_file.write_bytes(cloudpickle.dumps(state))
    return path, first


@pytest.mark.timeout(300)  # the stall it guards against is a wait without end
def test_a_grid_that_counts_a_finished_trial_as_running_resumes_and_ends(tmp_path, local_ray):
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    from raycse.driver.tune import resumable_limits

    path, first = _snapshot_counting_a_finished_trial(tmp_path)
    # Tune's generator restored from this snapshot offers no trial and is not finished: the state Tune waits in
    stalled = BasicVariantGenerator(max_concurrent=1)
    stalled.restore_from_dir(str(path))
    assert stalled.next_trial() is None and not stalled.is_finished()

    results = tune.Tuner.restore(str(path), trainable=_trainable, resume_unfinished=True).fit()
    assert sorted(r.config["x"] for r in results) == [0, 1, 2] and not results.errors
    assert not resumable_limits._RESTORED  # the restored grid was corrected and forgotten


def _listed_searcher():
    """A searcher of the test's own, suggesting x = 0, 1, 2, ...: the limiter around it is what is tested."""
    from ray.tune.search import Searcher

    class Listed(Searcher):
        def __init__(self):
            super().__init__(metric="x", mode="max")
            self.next = 0

        def suggest(self, trial_id):
            self.next += 1
            return {"x": self.next - 1}

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass

        def save(self, checkpoint_path):
            Path(checkpoint_path).write_bytes(pickle.dumps(self.next))

        def restore(self, checkpoint_path):
            self.next = pickle.loads(Path(checkpoint_path).read_bytes())

    return Listed()


@pytest.mark.timeout(300)  # the stall it guards against is a wait without end
def test_a_limiter_that_counts_a_finished_trial_as_running_resumes_and_ends(tmp_path, local_ray):
    """Two of three trials ran, one at a time; the snapshot is rewritten as a kill leaves it: 2 of 3 trials
    started, the finished first one still counted as running. Resumed, the third trial runs."""
    import ray.cloudpickle as cloudpickle
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter

    from raycse.driver.tune.resumable_limits import ForgetFinishedTrials, ResumableLimiter

    tune.Tuner(_trainable, tune_config=tune.TuneConfig(search_alg=ResumableLimiter(_listed_searcher(), 1),
                                                      num_samples=2),
               run_config=tune.RunConfig(name="limited", storage_path=str(tmp_path), verbose=0,
                                         callbacks=[ForgetFinishedTrials()])).fit()
    path = tmp_path / "limited"
    first = next(r for r in tune.Tuner.restore(str(path), trainable=_trainable).get_results()
                 if r.config["x"] == 0).metrics["trial_id"]
    (state_file,) = path.glob("search_gen_state-*.json")
    state = cloudpickle.loads(state_file.read_bytes())
    state.update(total_samples=3, finished=False)
    state["name:ResumableLimiter"].update(live_trials={first}, num_unfinished_live_trials=1)
    state_file.write_bytes(cloudpickle.dumps(state))

    # Tune's limiter restored with that count suggests nothing: the state Tune waits in
    stalled = ConcurrencyLimiter(_listed_searcher(), 1)
    stalled.set_state(state["name:ResumableLimiter"])
    assert stalled.suggest("another") is None

    results = tune.Tuner.restore(str(path), trainable=_trainable, resume_unfinished=True).fit()
    assert sorted(r.config["x"] for r in results) == [0, 1, 2] and not results.errors
