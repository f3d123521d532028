"""Search strategies (raycse/sampling/samplers.py, prior_guided.py), their space-file options, the concurrency
figures, and a short search replayed against a tiny recorded landscape through raycse's real searcher and
scheduler (benchmarks/search_replay.py)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from benchmark_modules import load_benchmark

from raycse.driver.concurrency import mean_running, search_concurrency
from raycse.errors import ConfigError
from raycse.settings.space import parse_space

SPACE = {"tau": {"type": "loguniform", "low": 0.02, "high": 0.2},
         "m": {"type": "uniform", "low": 0.0, "high": 0.6},
         "lr": {"type": "loguniform", "low": 1e-5, "high": 1e-4}}
PUBLISHED = {"tau": 0.07, "m": 0.3, "lr": 3e-5}




def focal_space(**search):
    return parse_space({"loss": "focal", "space": SPACE, "published": PUBLISHED,
                        "train": {"max_steps": 32, "eval_steps": 8}, "search": search}, "test.yaml")


# ------------------------------------------------------------------------------------------- strategies
def test_the_default_strategy_and_the_budget_aware_start_up():
    import optuna

    from raycse.sampling.samplers import sampler

    space = focal_space(num_samples=16)
    assert space.sampler["name"] == "tpe"
    tpe = sampler(space)
    assert isinstance(tpe, optuna.samplers.TPESampler)
    assert tpe._n_startup_trials == 4 and tpe._multivariate and tpe._group and tpe._constant_liar
    assert sampler(focal_space(num_samples=4))._n_startup_trials == 2  # never fewer than 2
    assert sampler(focal_space(num_samples=16, sampler={"startup_trials": 6}))._n_startup_trials == 6
    assert sampler(space, "tpe-optuna")._n_startup_trials == 10  # Optuna 5's defaults, raycse's before
    assert isinstance(sampler(space, "random"), optuna.samplers.RandomSampler)


@pytest.mark.parametrize("search, message", [
    ({"sampler": {"name": "cmaes"}}, "search.sampler.name: 'cmaes' is not one of tpe, prior, tpe-optuna, random"),
    ({"sampler": {"startup_trials": 0}}, "search.sampler.startup_trials"),
    ({"sampler": {"prior_width": 0}}, "search.sampler.prior_width"),
    ({"sampler": {"width": 0.2}}, "search.sampler.width"),
])
def test_bad_sampler_options_name_the_culprit(search, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        focal_space(**search)


def test_the_prior_draws_its_start_up_trials_around_the_published_point_then_hands_over_to_tpe():
    import optuna

    from raycse.sampling.prior_guided import unit_of
    from raycse.sampling.samplers import sampler

    space = focal_space(num_samples=16, sampler={"name": "prior", "prior_width": 0.05, "startup_trials": 3})
    study = optuna.create_study(direction="maximize", sampler=sampler(space))
    distributions = {name: optuna.distributions.FloatDistribution(d["low"], d["high"], log=d["type"] == "loguniform")
                     for name, d in SPACE.items()}
    drawn = [study.ask(distributions) for _ in range(60)]  # none finished: every trial is a start-up trial
    for name, dist in distributions.items():
        units = np.array([unit_of(dist, t.params[name]) for t in drawn])
        assert abs(units.mean() - unit_of(dist, PUBLISHED[name])) < 0.03 and units.std() < 0.08
    for trial in drawn[:3]:
        study.tell(trial, -((math.log(trial.params["tau"]) - math.log(0.15)) ** 2))
    later = [study.ask(distributions) for _ in range(30)]  # TPE now: it follows the results (tau up), not the prior
    units = np.array([unit_of(distributions["tau"], t.params["tau"]) for t in later])
    assert units.std() > 0.08


def test_the_prior_of_a_conditional_space_centres_every_family_on_its_published_point():
    from raycse.sampling.samplers import sampler

    tau = {"tau": {"type": "loguniform", "low": 0.02, "high": 0.2}}
    space = parse_space({"families": {"focal": {"loss": "focal", "space": tau, "published": {"tau": 0.07}},
                                      "simcse": {"loss": "simcse", "space": tau, "published": {"tau": 0.05}}},
                         "search": {"sampler": {"name": "prior"}}}, "conditional.yaml")
    assert sampler(space).published == {"focal/tau": 0.07, "simcse/tau": 0.05}  # Optuna's parameter names


# ------------------------------------------------------------------------------------------- concurrency
def test_mean_running_from_start_and_end_times():
    spans = [(100, 110), (100, 110), (105, 115), (110, 120)]  # wall-clock times; 0 means "not recorded"
    assert mean_running(spans, 100, 120) == pytest.approx(40 / 20)
    figures = search_concurrency(spans, slots=4)
    # while trials remained to start (100 to 110): 2 trials for 5 s, 3 for 5 s
    assert figures["mean_running_starting"] == pytest.approx(2.5) and figures["slot_use"] == pytest.approx(2.5 / 4)
    assert figures["mean_running"] == pytest.approx(2.0) and figures["slots"] == 4
    assert search_concurrency([(0.0, 0.0)], 4) == {}  # no recorded times: nothing claimed


def test_the_printed_timings_say_how_many_trials_ran_at_once():
    from raycse.records import SEARCH_MEAN_RUNNING, SEARCH_MEAN_RUNNING_STARTING, SEARCH_SLOT_USE
    from raycse.reporting.tables import format_timings

    line = format_timings({"time_total_s": 10.0, SEARCH_MEAN_RUNNING: 3.2, SEARCH_MEAN_RUNNING_STARTING: 3.8,
                           SEARCH_SLOT_USE: 0.95})
    assert "3.20 trials running on average, 3.80 while trials remained to start (95% of the slots)" in line
    assert "running" not in format_timings({"time_total_s": 10.0})


# --------------------------------------------------------------------------------------- a replayed search
def tiny_landscape(path: Path) -> Path:
    """9 configurations x 2 seeds of a smooth focal landscape, 4 evaluations each: a landscape file as
    benchmarks/landscape.py writes it."""
    rng = np.random.default_rng(0)
    runs = []
    for i in range(9):
        config = {"tau": float(0.02 * 10 ** (i % 3 / 2)), "m": float(0.1 + 0.2 * (i // 3)),
                  "lr": float(1e-5 * 10 ** ((i * 7 % 9) / 8))}
        peak = 82 - 8 * (math.log10(config["tau"]) + 1.2) ** 2 - 4 * (config["m"] - 0.3) ** 2 \
            + 2 * math.log10(config["lr"] / 1e-5)
        for seed in (42, 43):
            curve = [round(peak - 3 / (k + 1) + rng.normal(0, 0.2), 4) for k in range(4)]
            runs.append({"config": config, "seed": seed, "status": "ok", "steps": [8, 16, 24, 32], "objective": curve,
                         "train_s": [2.0, 4.0, 6.0, 8.0], "eval_s": [1.0, 2.0, 3.0, 4.0], "startup_s": 1.0})
    landscape = {"format": "raycse-landscape/1", "runs": runs, "recordings": [{"jobs": 1, "device": "cpu"}],
                 "untouched": {"objective": 75.0},
                 "setting": {"space_file": "test.yaml", "loss": "focal", "space": SPACE, "published": PUBLISHED,
                             "train": {"batch_size": 16, "max_len": 32}}}
    path.write_text(json.dumps(landscape))
    return path


def test_a_short_search_replayed_through_the_real_searcher_and_scheduler(tmp_path):
    from optuna.trial import TrialState

    from raycse.judging.ranking import TrialCurve, rank_for_confirmation

    surrogate = load_benchmark("surrogate").Surrogate.load(tiny_landscape(tmp_path / "tiny.json"), restarts=1)
    replay = load_benchmark("search_replay")
    search = replay.replay(surrogate, strategy="tpe", asha=True, budget=10, slots=4, seed=3)
    trials = search.trials
    assert len(trials) == 10 and trials[0]["config"] == PUBLISHED  # the published point first
    stopped = [t for t in trials if t["status"] == "stopped early (ASHA)"]
    finished = [t for t in trials if t["status"] == "finished"]
    assert stopped and finished and len(stopped) + len(finished) == 10
    assert all(len(t["reported"]) < 4 for t in stopped) and all(len(t["reported"]) == 4 for t in finished)
    # what Optuna learnt: a stopped trial PRUNED, a finished one COMPLETE with its best value over the curve
    study_trials = search.study.get_trials(deepcopy=False)
    assert [t.state for t in study_trials].count(TrialState.PRUNED) == len(stopped)
    complete = sorted(t.value for t in study_trials if t.state == TrialState.COMPLETE)
    assert complete == pytest.approx(sorted(max(v for _, v in t["reported"]) for t in finished))
    # the answer is the top of raycse's ranking rule; the trials ran 4 at once while any remained to start
    top = rank_for_confirmation([TrialCurve(t["id"], t["status"], tuple(t["reported"]), t["id"]) for t in trials], 1)
    assert search.answer() == next(t["config"] for t in trials if t["id"] == top[0].key)
    last_start = max(t["start"] for t in trials)
    assert mean_running([(t["start"], t["end"]) for t in trials], 0.0, last_start) == pytest.approx(4.0)
    # a repetition with the same seed is the same search; the hand grid trains its points in order
    again = replay.replay(surrogate, strategy="tpe", asha=True, budget=10, slots=4, seed=3)
    assert [t["config"] for t in again.trials] == [t["config"] for t in trials]
    grid = replay.replay(surrogate, strategy="grid", asha=False, budget=4, slots=2, seed=0)
    assert [t["config"] for t in grid.trials] == replay.hand_grid(surrogate, 4)
    assert all(t["status"] == "finished" for t in grid.trials)
