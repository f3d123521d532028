"""Baseline: the untouched model scored with every evaluation pooler the trials use, and on the seven test tasks, as
a Ray task with a trial's resources, so that it runs beside the search stage's first trials (the search stage waits
for it at its end); on one of the search's warm workers, where its trials train on them.

Resume: the score is kept on the parent run (a tag) once known, and read back instead of scored again. Across
searches: the figures are kept in the user's cache folder per fingerprint of the model and the data
(raycse.evaluation.untouched_cache), and a later search from the same ones reuses them, saying so; for the bundled
model the package ships them under the same fingerprints (scripts/untouched_figures.py), read when the cache has none.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from raycse.driver.outcome import Baseline
from raycse.driver.stages.base import Stage
from raycse.driver.state import PendingBaseline, SearchState
from raycse.driver.tune.scoring import score_untouched, scoring_task
from raycse.evaluation import untouched_cache
from raycse.files import cache_dir
from raycse.records import BASELINE_TAG
from raycse.settings.space import SearchSpace


class BaselineStage(Stage):
    name = "baseline"
    needs = ("space", "tracker", "parent_run_id")
    produces = ("baseline",)

    def run(self, state: SearchState) -> None:
        import ray

        saved = state.tracker.tags(state.parent_run_id).get(BASELINE_TAG)
        if saved:
            state.baseline = Baseline.from_dict(json.loads(saved))
            return
        space = state.space
        headline, poolers, test_pooler = untouched_scoring(space)
        key = untouched_key(space)
        cached = untouched_cache.recall(key) if key else None
        if cached is not None:
            state.log(f"baseline: the untouched model's figures reused from {cache_dir()} (the same "
                      "model, objective and STS files as a run before; `raycse cache clear` forgets them)")
            state.baseline = PendingBaseline(headline, ray.put(cached))
            return
        shipped = untouched_cache.shipped(key) if key else None
        if shipped is not None:
            state.log("baseline: the untouched model's figures as shipped with raycse for this model, objective, STS "
                      "files, torch and transformers (scored on a CPU by scripts/untouched_figures.py)")
            state.baseline = PendingBaseline(headline, ray.put(shipped))
            return
        state.log("baseline: scoring the untouched model (its objective" + (" and the seven STS test tasks"
                  if test_pooler else "") + f"), beside the first trials; kept in {cache_dir()} for "
                  "the next run")
        scoring = scoring_task(state, score_untouched)
        state.baseline = PendingBaseline(headline, scoring(space.base, poolers, test_pooler), cache_key=key)


def untouched_scoring(space: SearchSpace) -> tuple[str, list[str], str | None]:
    """What the untouched model is scored with: the headline's evaluation pooler, every evaluation pooler the
    trials use, and the test tasks' pooler (None: the search scores no test task)."""
    published = space.published_sampled()
    headline = (space.trial_config(published) if published else space.base).poolers()[1]
    test_pooler = headline if space.test_eval.scores_any else None  # the untouched model's row of the test table
    return headline, evaluation_poolers(space), test_pooler


def untouched_key(space: SearchSpace) -> str | None:
    """The fingerprint of the untouched model's figures for this plan (None: a model that is not a local folder)."""
    from raycse.encoder.model_path import resolve_model_path

    base = space.base
    if not Path(resolve_model_path(base.model)).is_dir():  # a hub id: no fingerprint (its poolers would ask the hub)
        return None
    _, poolers, test_pooler = untouched_scoring(space)
    return untouched_cache.fingerprint(base.model, base.objective, base.objective_columns, poolers, test_pooler,
                                       base.trust_remote_code, "cuda" if space.resources.gpus_per_worker else "cpu")


def evaluation_poolers(space: SearchSpace) -> list[str]:
    """The evaluation poolers the trials use: the fixed one, and every choice of a searched pooler."""
    poolers = []
    for family in space.families.values():
        choices = family.space["pooler"].choices if "pooler" in family.space else [space.base.pooler]
        for pooler in choices:
            eval_pooler = dataclasses.replace(space.base, pooler=pooler).poolers()[1]
            if eval_pooler not in poolers:
                poolers.append(eval_pooler)
    return poolers


def untouched_figures_known(space: SearchSpace) -> bool:
    """Whether a search of `plan` reads the untouched model's figures (kept from a run before, or shipped) rather
    than scoring them: what the dry run prices."""
    key = untouched_key(space)
    return key is not None and (untouched_cache.recall(key) is not None or untouched_cache.shipped(key) is not None)
