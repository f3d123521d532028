"""raycse/driver/resumable_grid.py on a real Tune experiment: a grid whose snapshot still counts a finished trial as
running (a search killed after the trial finished, before the grid's state was written again) resumes and ends.
Tune's own grid generator, restored from the same snapshot, would hold back every trial and never finish: Tune then
waits for a trial forever."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _trainable(config):
    from ray import tune

    tune.report({"x": config["x"]})


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not on the workers' path
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _snapshot_counting_a_finished_trial(tmp_path: Path) -> tuple[Path, str]:
    """A 3-trial grid, one trial at a time, stopped after its first trial; its grid snapshot then rewritten as the
    kill leaves it: the finished first trial still counted as running, the grid not finished."""
    import ray.cloudpickle as cloudpickle
    from ray import tune

    from raycse.driver.resumable_grid import ForgetFinishedTrials, ResumableGrid

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

    from raycse.driver import resumable_grid

    path, first = _snapshot_counting_a_finished_trial(tmp_path)
    # Tune's generator restored from this snapshot offers no trial and is not finished: the state Tune waits in
    stalled = BasicVariantGenerator(max_concurrent=1)
    stalled.restore_from_dir(str(path))
    assert stalled.next_trial() is None and not stalled.is_finished()
    resumable_grid._RESTORED.clear()  # BasicVariantGenerator.set_state is not ResumableGrid's; nothing to correct

    results = tune.Tuner.restore(str(path), trainable=_trainable, resume_unfinished=True).fit()
    assert sorted(r.config["x"] for r in results) == [0, 1, 2] and not results.errors
    assert not resumable_grid._RESTORED  # the restored grid was corrected and forgotten
