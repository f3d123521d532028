"""Search: Tune trials sampled by Optuna (the published point first), early-stopped by ASHA, every trial with the
base seed; the untouched model's score is collected at its end (it was scored beside the first trials).

Resume: the Tune experiment is restored with its own pickled searcher (never a second one: building OptunaSearch
enqueues the published point into the persistent study); trials the study holds as finished are not told again. A
stage killed before Tune's first snapshot starts anew, and its published point is not enqueued twice.
"""
from __future__ import annotations

import math

from raycse.driver import plan as planning
from raycse.driver import progress
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune import runner
from raycse.evaluation.sts import DevObjective
from raycse.records import OBJECTIVE, RAY_TRIAL_ID, SEARCH
from raycse.sampling import samplers


class SearchStage(Stage):
    name = SEARCH
    needs = ("plan", "tracker", "parent_run_id", "optuna_storage", "shared_tokens", "baseline")
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

        plan, options = state.plan, state.options
        study_name, storage = plan.experiment, state.optuna_storage
        chosen = samplers.sampler_named(options.sampler, plan)
        grid = chosen.tune_grid  # a hand-written grid: every combination once, no searcher
        param_space = {name: tune.grid_search(list(values)) for name, values in (options.grid or {}).items()} \
            if grid else None

        def tune_config():
            searcher = None
            if not grid:
                searcher = TaggedOptunaSearch(space=plan.define_by_run, metric=OBJECTIVE, mode=DevObjective.mode,
                                              points_to_evaluate=points_not_waiting(
                                                  study_name, planning.optuna_rdb_storage(storage),
                                                  plan.points_to_evaluate()) or None,
                                              sampler=chosen.build(samplers.settings_of(plan)),
                                              study_name=study_name, storage=planning.optuna_rdb_storage(storage))
            slots = planning.max_concurrent(plan, state.cluster)
            limited = ResumableGrid(max_concurrent=slots) if grid else ResumableLimiter(searcher, slots)
            return tune.TuneConfig(metric=OBJECTIVE, mode=DevObjective.mode, search_alg=limited,
                                   scheduler=planning.scheduler(plan), num_samples=1 if grid else plan.num_samples,
                                   reuse_actors=True)

        stopper = TotalStepsStopper(options.max_total_steps) if options.max_total_steps else None
        grid_size = math.prod(len(values) for values in (options.grid or {}).values())
        progress.plan_trials(grid_size if grid else plan.num_samples, DevObjective.mode)
        experiment = runner.tuner(state, plan, SEARCH, tune_config, param_space, stopper=stopper)
        records = runner.fit(state, plan, SEARCH, experiment)
        if not grid:  # so that the printed table names each trial as optuna-dashboard and the report do
            study = optuna.load_study(study_name=study_name, storage=planning.optuna_rdb_storage(storage))
            fail_unrecorded_trials(study, {record.trial_id for record in records})  # sampled just before a kill
            numbers = {t.user_attrs.get(RAY_TRIAL_ID): t.number for t in study.trials}
            for record in records:
                record.optuna_number = numbers.get(record.trial_id)
        state.searched = records
        state.finished_baseline()
