"""How a trial ended, said the same everywhere: a trial that reached its last step is *finished* (and COMPLETE in
Optuna, with its best objective), whatever ASHA decided at a rung on that step; one ASHA stopped earlier is
*stopped early* (PRUNED). The CPU budget's 16 steps have ASHA rungs at 8 and 16, so its trials are stopped "at 16"
after running every step: they were labelled stopped, told PRUNED, and the report's parameter importances counted
none of them.

The searcher is Ray's OptunaSearch as raycse extends it, on a real (in-memory) Optuna study; the Tune results are the
shapes a trial reports (raycse/driver/tune/trial_result.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from raycse.driver.outcome import ended_status, reached_last_step
from raycse.driver.tune.trial_result import evaluation_result, final_result
from raycse.records import DIVERGED, DIVERGED_KEY, FINISHED, STOPPED


def evaluation(step: int, objective: float, best: float, total: int = 16) -> dict:
    """An evaluation's result as Tune hands it on (its iteration added: evaluations every 8 steps)."""
    return {**evaluation_result(step=step, total_steps=total, objective=objective, best_objective=best,
                                best_step=step, train_loss=0.1, sentences_per_s=10.0, timings={}),
            "training_iteration": step // 8}


def test_a_trial_that_ran_every_step_is_finished_whatever_asha_decided_there():
    assert ended_status(evaluation(16, 87.05, 87.09)) == FINISHED  # stopped by ASHA at its last rung, step 16 of 16
    assert ended_status(final_result(steps=16, best_objective=87.09, best_step=16, timings={})) == FINISHED
    assert ended_status(evaluation(8, 86.9, 86.9)) == STOPPED  # stopped at the rung of step 8: 8 steps never ran
    assert ended_status({**evaluation(8, 86.9, 86.9), DIVERGED_KEY: 1}) == DIVERGED
    assert not reached_last_step({"step": 16})  # a result that does not say its total (a replay): not assumed


def test_optuna_learns_a_completed_trial_with_its_best_and_a_stopped_one_as_pruned():
    """What TPE learns from: the trial ASHA stopped at its last step is COMPLETE with its best over the run (the
    value its final report would have carried), not its last value; the one stopped half-way is PRUNED."""
    import optuna
    from optuna.trial import TrialState

    from raycse.driver.tune.searcher import TaggedOptunaSearch

    space = {"tau": optuna.distributions.FloatDistribution(0.02, 0.2, log=True)}
    searcher = TaggedOptunaSearch(space=space, metric="objective", mode="max", sampler=optuna.samplers.RandomSampler(0))
    for trial_id in ("ran-all", "half", "final", "diverged"):
        searcher.suggest(trial_id)
    searcher.on_trial_result("ran-all", evaluation(8, 86.9, 86.9))
    searcher.on_trial_complete("ran-all", evaluation(16, 87.05, 87.09))  # ASHA: STOP at the rung of step 16
    searcher.on_trial_result("half", evaluation(8, 86.5, 86.5))
    searcher.on_trial_complete("half", evaluation(8, 86.5, 86.5))  # ASHA: STOP at the rung of step 8
    searcher.on_trial_complete("final", final_result(steps=16, best_objective=87.2, best_step=8, timings={}))
    searcher.on_trial_complete("diverged", {**evaluation(8, -100.0, -100.0), DIVERGED_KEY: 1})
    study = {t.user_attrs["ray_trial_id"]: t for t in searcher._ot_study.get_trials(deepcopy=False)}
    assert (study["ran-all"].state, study["ran-all"].value) == (TrialState.COMPLETE, pytest.approx(87.09))
    assert study["half"].state == TrialState.PRUNED
    assert (study["final"].state, study["final"].value) == (TrialState.COMPLETE, pytest.approx(87.2))
    assert study["diverged"].state == TrialState.FAIL


@dataclass
class Result:
    """What `trial_records` reads of a Tune result."""

    metrics: dict
    config: dict = field(default_factory=lambda: {"tau": 0.07})
    error: Exception | None = None
    checkpoint: object = None
    metrics_dataframe: object = None
    path: str = "/tmp/ray_results/search/run_trial_x"


def test_the_answers_records_label_a_trial_by_the_steps_it_ran():
    from raycse.driver.tune.runner import trial_records
    from raycse.settings.space import load_space

    plan = load_space("focal").with_cpu_budget()
    records = trial_records([Result({**evaluation(16, 87.05, 87.09), "trial_id": "ran-all"}),
                             Result({**evaluation(8, 86.5, 86.5), "trial_id": "half"}),
                             Result({**evaluation(8, 86.5, 86.5), "trial_id": "crashed"}, error=RuntimeError())],
                            plan)
    assert {r.trial_id: r.status for r in records} == {"ran-all": FINISHED, "half": STOPPED, "crashed": "failed"}
    assert next(r for r in records if r.trial_id == "ran-all").best_objective == pytest.approx(87.09)
