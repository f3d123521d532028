"""Baseline: the untouched model scored with every evaluation pooler the trials use, and on the seven test tasks, as
a Ray task with a trial's resources, so that it runs beside the search stage's first trials (the search stage waits
for it at its end).

Resume: the score is kept on the parent run (a tag) once known, and read back instead of scored again. Across
searches: the figures are kept in the user's cache folder per fingerprint of the model and the data
(raycse.evaluation.untouched_cache), and a later search from the same ones reuses them, saying so.
"""
from __future__ import annotations

import dataclasses
import json

from raycse.driver.outcome import Baseline
from raycse.driver.stages.base import Stage
from raycse.driver.state import PendingBaseline, SearchState
from raycse.driver.tune.scoring import score_untouched
from raycse.evaluation import untouched_cache
from raycse.records import BASELINE_TAG
from raycse.settings.space import SearchSpace


class BaselineStage(Stage):
    name = "baseline"
    needs = ("plan", "tracker", "parent_run_id")
    produces = ("baseline",)

    def run(self, state: SearchState) -> None:
        import ray

        saved = state.tracker.tags(state.parent_run_id).get(BASELINE_TAG)
        if saved:
            state.baseline = Baseline.from_dict(json.loads(saved))
            return
        plan = state.plan
        published = plan.published_sampled()
        headline = (plan.trial_config(published) if published else plan.base).poolers()[1]
        poolers = evaluation_poolers(plan)
        test_pooler = headline if plan.test_eval != "none" else None  # the untouched model's row of the test table
        base = plan.base
        key = untouched_cache.fingerprint(base.model, base.objective, base.objective_columns, poolers, test_pooler,
                                          base.trust_remote_code, "cuda" if plan.resources.gpus_per_worker else "cpu")
        cached = untouched_cache.load(key) if key else None
        if cached is not None:
            state.log(f"baseline: the untouched model's figures reused from {untouched_cache.cache_dir()} (the same "
                      "model, objective and STS files as a run before; `raycse cache clear` forgets them)")
            state.baseline = PendingBaseline(headline, ray.put(cached))
            return
        state.log("baseline: scoring the untouched model (its objective" + (" and the seven STS test tasks"
                  if test_pooler else "") + f"), beside the first trials; kept in {untouched_cache.cache_dir()} for "
                  "the next run")
        task = ray.remote(score_untouched).options(num_cpus=plan.resources.cpus_per_worker,
                                                  num_gpus=plan.resources.gpus_per_worker)
        state.baseline = PendingBaseline(headline, task.remote(base, poolers, test_pooler), cache_key=key)


def evaluation_poolers(plan: SearchSpace) -> list[str]:
    """The evaluation poolers the trials use: the fixed one, and every choice of a searched pooler."""
    poolers = []
    for family in plan.families.values():
        choices = family.space["pooler"].choices if "pooler" in family.space else [plan.base.pooler]
        for pooler in choices:
            eval_pooler = dataclasses.replace(plan.base, pooler=pooler).poolers()[1]
            if eval_pooler not in poolers:
                poolers.append(eval_pooler)
    return poolers
