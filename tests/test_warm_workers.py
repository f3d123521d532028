"""Warm workers (raycse/driver/tune/warm_workers.py): a search's trials, of every stage, train in processes that live
for the whole search, about as many as it runs trials at once. A real Ray, Tune, Optuna and a tiny BERT."""
from __future__ import annotations

import dataclasses

import pytest

from raycse.driver.run import frozen_between_stages
from raycse.settings.space import load_space

SPACE = """\
experiment: warm
model: {model}
objective: {dev}
loss: focal
train: {{batch_size: 8, max_steps: 8, eval_steps: 2, max_sentences: 160, lr: 1.0e-4}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: 4, seed: 0, test_eval: none, max_concurrent: 2,
         scheduler: {{name: asha, grace_evals: 1, reduction_factor: 2}},
         confirm: {{top_k: 2, choose_seeds: 1, judge_seeds: 2}}}}
resources: {{workers: 1, cpus_per_worker: 1}}
"""


@pytest.fixture
def ray_session():
    import ray

    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_three_stage_search_trains_every_trial_in_at_most_max_concurrent_processes(tmp_path, tiny_bert_dir,
                                                                                     ray_session, monkeypatch,
                                                                                     few_sts_data):
    """The untouched model's scoring too runs on one of those processes; and the test stage's on warm workers."""
    import gc

    from test_search import small_dev_file

    from raycse.driver.run import run_stages
    from raycse.driver.state import SearchOptions, SearchState

    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path / "cache"))  # empty: this search scores the untouched model
    path = tmp_path / "warm.yaml"
    path.write_text(SPACE.format(model=tiny_bert_dir, dev=small_dev_file(tmp_path)))
    options = SearchOptions(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", storage_path=str(tmp_path / "ray"),
                            budget="full")
    frozen_while_logging: list[int] = []
    state = run_stages(load_space(str(path)), options, log=lambda line: frozen_while_logging.append(
        gc.get_freeze_count()))
    # the stages' objects (Ray's, Tune's, MLflow's imports among them) frozen out of full collections meanwhile,
    # and given back at the end
    assert max(frozen_while_logging) > 100_000 and gc.get_freeze_count() == 0, max(frozen_while_logging)

    trials = [*state.searched, *state.choose_runs, *state.judge_runs]
    assert state.searched and state.choose_runs and state.judge_runs  # three stages trained
    processes = {trial.process_id for trial in trials}
    assert None not in processes, [dataclasses.asdict(trial) for trial in trials if trial.process_id is None]
    # the process ids the trials reported themselves: at most one per slot for the whole search, and the later
    # stages trained in processes of the stages before them
    assert len(processes) <= 2, processes
    assert state.outcome.baseline.process_id in processes, (state.outcome.baseline, processes)
    by_stage = [{t.process_id for t in stage} for stage in (state.searched, state.choose_runs, state.judge_runs)]
    assert by_stage[2] & (by_stage[0] | by_stage[1]), by_stage

    # the test stage, in the same Ray: a judging checkpoint without test figures (a run replayed on --resume) scored
    # on the test tasks by a warm worker of a search that goes on
    import ray

    from raycse.driver.stages.test import TestStage
    from raycse.driver.tune.scoring import scoring_task
    from raycse.driver.tune.search_workers import search_workers

    untested = [dataclasses.replace(state.judge_runs[0], test={})]
    going_on = SearchState(loaded_space=state.loaded_space, options=options, space=state.space, budget=state.budget,
                           judge_runs=untested)
    assert search_workers(going_on).enabled
    try:
        TestStage().run(going_on)
        # a warm worker keeps what its imports made out of the garbage collection it runs after each trial
        frozen = ray.get(scoring_task(going_on, gc.get_freeze_count)())
    finally:
        going_on.close()
    assert all(run.checkpoint and {"STS12", "avg"} <= set(run.test) for run in untested), untested
    assert frozen > 100_000, frozen  # torch, transformers and Ray: about 400,000 objects


def test_a_search_freezes_the_collector_between_stages_only_where_nothing_was_frozen_before():
    """The driver's freeze (raycse.driver.run.frozen_between_stages) is given back at the end; a program that froze
    its own objects before the search keeps its freeze as it was, and the search adds nothing to it.

    Said of the objects themselves, not of `gc.get_freeze_count()`: a frozen object that any thread of the process
    lets go (the test runner's, Ray's, this one's) leaves the frozen set, so the count falls by however many that
    is (it once fell by 2 in a clean clone's fast tier, failing an equality). The collector lists every tracked object
    but the frozen ones (`gc.get_objects()`), which says of each object whether it is frozen."""
    import gc

    def frozen(objects: list) -> list[bool]:
        seen = {id(obj) for obj in gc.get_objects()}
        return [id(obj) not in seen for obj in objects]

    assert gc.get_freeze_count() == 0
    with frozen_between_stages() as freeze:
        mine = [[] for _ in range(10)]
        freeze()
        assert all(frozen(mine))
    assert not any(frozen(mine))

    theirs = [[] for _ in range(1000)]  # the program's own objects
    let_go = [[] for _ in range(1000)]  # frozen too, then let go meanwhile (as another thread may)
    gc.freeze()  # the program's own freeze
    try:
        assert all(frozen(theirs + let_go))
        with frozen_between_stages() as freeze:
            made_since = [[] for _ in range(1000)]  # objects the collector tracks, made after the program's freeze
            del let_go[:]  # the frozen set shrinks: the count falls by 1,000, and nothing below depends on it
            freeze()  # does nothing: the freeze is the program's
            assert all(frozen(theirs)) and not any(frozen(made_since))
        assert all(frozen(theirs)) and not any(frozen(made_since))  # nothing given back, nothing added
    finally:
        gc.unfreeze()
    assert not any(frozen(theirs))
