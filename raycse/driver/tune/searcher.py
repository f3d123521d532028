"""Tune objects of the search stage that Tune pickles with the experiment state (so: importable classes).

TaggedOptunaSearch: Ray Tune's OptunaSearch, writing each Ray trial's id into its Optuna trial (user attribute
`ray_trial_id`), so that the persistent study, MLflow's child runs (tag raycse.trial_id) and the search summary
join on one id. TotalStepsStopper: a budget in training steps for the whole search stage, so that search
strategies can be compared at equal compute (benchmarks/search_quality.py).
"""
from __future__ import annotations

import time

from ray import tune
from ray.tune.search.optuna import OptunaSearch

from raycse.driver.outcome import reached_last_step
from raycse.records import BEST_OBJECTIVE, DIVERGED_KEY, FINAL, OBJECTIVE, RAY_TRIAL_ID
from raycse.tracking.latency import LATENCIES


def study_size_bucket(number: int) -> int:
    """The power of two above an Optuna trial's number: its ask or tell found fewer trials than this in the study
    (`searcher.ask/<bucket>` in raycse.tracking.latency: how the sampler's cost grows with the study)."""
    return 1 << number.bit_length()


class TaggedOptunaSearch(OptunaSearch):
    """Also safe on --resume: a trial that Optuna already holds as finished (told before a kill, then replayed by
    raycse.driver.tune.trial) is neither reported nor told again, which the persistent study would refuse.

    Each ask (sampling and the study's new trial), report (an intermediate value) and tell is timed in
    raycse.tracking.latency, overall and by the study's size (benchmarks/scale.py)."""

    def suggest(self, trial_id: str):
        started = time.perf_counter()
        config = super().suggest(trial_id)
        if trial_id in self._ot_trials:
            trial = self._ot_trials[trial_id]
            trial.set_user_attr(RAY_TRIAL_ID, trial_id)
            self._asked_here().add(trial_id)
            seconds = time.perf_counter() - started
            LATENCIES.record("searcher.ask", seconds)
            LATENCIES.record(f"searcher.ask/{study_size_bucket(trial.number)}", seconds)
        return config

    def _asked_here(self) -> set[str]:
        """The trials this process asked and has not told: RUNNING in the study, as nothing else tells them, so
        their results need no look-up in the study's storage (one query per evaluation otherwise)."""
        if "_running_asked_here" not in self.__dict__:
            self._running_asked_here: set[str] = set()
        return self._running_asked_here

    def restore(self, checkpoint_path: str):
        super().restore(checkpoint_path)
        self._running_asked_here = set()  # resumed: a trial asked before the kill may have been told since

    def _finished_in_study(self, trial_id: str) -> bool:
        from optuna.trial import TrialState

        if trial_id in self._asked_here():
            return False
        trial = self._ot_trials.get(trial_id)
        return trial is not None and self._ot_study._storage.get_trial(trial._trial_id).state != TrialState.RUNNING

    def on_trial_result(self, trial_id: str, result: dict):
        # an evaluation is an intermediate value; a trial's final report (its best) is told on completion instead
        with LATENCIES.timed("searcher.report"):
            if not self._finished_in_study(trial_id) and not result.get(FINAL):
                super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        """What the study learns from a trial means the same for every trial: a finished trial is COMPLETE with
        its best objective, also one that ASHA stopped at its last step (it ran every step: its best is what its
        final report would have said); one ASHA stopped earlier is PRUNED (TPE ranks it by its last intermediate
        value and step); a diverged one FAILED, never a made-up worst objective."""
        started = time.perf_counter()
        if self._finished_in_study(trial_id):
            self._completed_trials.add(trial_id)
            return
        if result and result.get(DIVERGED_KEY):
            result, error = None, True
        elif result and not result.get(FINAL):
            # the best over the run, as a final report has it; else no value and no error: OptunaSearch tells PRUNED
            result = {**result, OBJECTIVE: result.get(BEST_OBJECTIVE)} if reached_last_step(result) else None
        super().on_trial_complete(trial_id, result, error)
        self._asked_here().discard(trial_id)
        seconds = time.perf_counter() - started
        LATENCIES.record("searcher.tell", seconds)
        if trial_id in self._ot_trials:
            LATENCIES.record(f"searcher.tell/{study_size_bucket(self._ot_trials[trial_id].number)}", seconds)


def fail_unrecorded_trials(study, recorded: set[str]) -> list[int]:
    """Mark FAIL the study's RUNNING trials whose Ray trial is not among `recorded` (the stage's Tune trials).

    Such a trial was sampled just before a kill, before Tune's snapshot held it; the resumed Tune samples another in
    its place, and without this the persistent study would show it RUNNING for ever. Returns their numbers."""
    from optuna.trial import TrialState

    lost = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.user_attrs.get(RAY_TRIAL_ID) not in recorded]
    for number in lost:
        study.tell(number, state=TrialState.FAIL)
    return lost


def points_not_waiting(study_name: str, storage, points: list[dict]) -> list[dict]:
    """The `points` (the published point) that the persistent study does not already hold as an enqueued trial.

    Building OptunaSearch enqueues its points. A search killed after that and before Tune's first snapshot starts
    its stage anew on --resume, and the new searcher must not enqueue the published point a second time: the study
    hands the waiting one out first."""
    import optuna
    from optuna.trial import TrialState

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no such study yet
        return points
    waiting = [t.system_attrs.get("fixed_params", t.params)
               for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
    return [point for point in points if point not in waiting]


class TotalStepsStopper(tune.Stopper):
    """Stops every trial once the trials' latest reported steps add up to `max_total_steps`."""

    def __init__(self, max_total_steps: int):
        self.max_total_steps = max_total_steps
        self.steps: dict[str, int] = {}

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.steps[trial_id] = max(self.steps.get(trial_id, 0), int(result.get("step", 0)))
        return False

    def stop_all(self) -> bool:
        return sum(self.steps.values()) >= self.max_total_steps
