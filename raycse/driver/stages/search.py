"""Search: Tune trials sampled by Optuna (the published point first), early-stopped by ASHA, every trial with the
base seed; the untouched model's score is collected at its end (it was scored beside the first trials).

Resume: the Tune experiment is restored with its own pickled searcher (never a second one: building OptunaSearch
enqueues the published point into the persistent study); trials the study holds as finished are not told again. A
stage killed before Tune's first snapshot starts anew, and its published point is not enqueued twice.
"""
from __future__ import annotations

import math

from raycse.driver import layout, progress
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune import newest_first, runner
from raycse.evaluation.sts import DevObjective
from raycse.records import OBJECTIVE, RAY_TRIAL_ID, SEARCH
from raycse.sampling import samplers


class SearchStage(Stage):
    name = SEARCH
    needs = ("space", "tracker", "parent_run_id", "optuna_storage", "shared_tokens", "baseline")
    produces = ("searched", "baseline")

    def run(self, state: SearchState) -> None:
        import optuna
        from ray import tune

        from raycse.driver.tune.resumable_limits import ResumableGrid, ResumableLimiter
        from raycse.driver.tune.searcher import (
            TaggedOptunaSearch,
            TotalStepsStopper,
            fail_unrecorded_trials,
            points_not_waiting,
        )

        space, hook = state.space, state.options.benchmark
        study_name, storage = space.experiment, state.optuna_storage
        grid = hook.grid is not None  # a benchmark's hand-written grid: every combination once, no searcher
        chosen = None if grid else samplers.sampler_named(hook.sampler, space)
        param_space = {name: tune.grid_search(list(values)) for name, values in hook.grid.items()} if grid else None

        def tune_config():
            searcher = None
            if not grid:
                searcher = TaggedOptunaSearch(space=space.define_by_run, metric=OBJECTIVE, mode=DevObjective.mode,
                                              points_to_evaluate=points_not_waiting(
                                                  study_name, layout.optuna_rdb_storage(storage),
                                                  space.points_to_evaluate()) or None,
                                              sampler=chosen.build(samplers.settings_of(space)),
                                              study_name=study_name, storage=layout.optuna_rdb_storage(storage))
            slots = layout.max_concurrent(space, state.cluster)
            limited = ResumableGrid(max_concurrent=slots) if grid else ResumableLimiter(searcher, slots)
            return tune.TuneConfig(metric=OBJECTIVE, mode=DevObjective.mode, search_alg=limited,
                                   scheduler=newest_first.scheduler(space),
                                   num_samples=1 if grid else space.num_samples, reuse_actors=True)

        stopper = TotalStepsStopper(hook.max_total_steps) if hook.max_total_steps else None
        grid_size = math.prod(len(values) for values in (hook.grid or {}).values())
        progress.plan_trials(grid_size if grid else space.num_samples, DevObjective.mode)
        experiment = runner.tuner(state, space, SEARCH, tune_config, param_space, stopper=stopper)
        records = runner.fit(state, space, SEARCH, experiment)
        if not grid:  # so that the printed table names each trial as optuna-dashboard and the report do
            study = optuna.load_study(study_name=study_name, storage=layout.optuna_rdb_storage(storage))
            fail_unrecorded_trials(study, {record.trial_id for record in records})  # sampled just before a kill
            numbers = {t.user_attrs.get(RAY_TRIAL_ID): t.number for t in study.trials}
            for record in records:
                record.optuna_number = numbers.get(record.trial_id)
        state.searched = records
        state.finished_baseline()
