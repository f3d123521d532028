"""The decision behind a search's answer (raycse.decision), on numbers whose results are known by hand."""
import importlib.util
import itertools
import math
import sys
from pathlib import Path

import pytest

from raycse.judging.confirmation_plan import ConfirmPlan, SeedBlocks, default_plan, seed_blocks
from raycse.judging.decision import choose_winner, decide
from raycse.judging.power import seeds_to_detect, smallest_detectable
from raycse.judging.ranking import TrialCurve, rank_for_confirmation
from raycse.judging.seed_scores import ConfigScores, SeedScore, UntouchedFigures
from raycse.records import DIVERGED, FAILED, FINISHED, STOPPED
from raycse.stats import format_interval, format_std, mean_interval, one_significant

# Student-t quantiles, from tables
T975 = {1: 12.706205, 2: 4.302653, 3: 3.182446, 17: 2.109816}
T80 = {1: 1.376382, 17: 0.863279}


def runs(seeds, devs, tests=None):
    tests = tests or [None] * len(devs)
    return tuple(SeedScore(s, FINISHED, d, {"avg": t} if t is not None else {}) for s, d, t in zip(seeds, devs, tests))


def cpu_plan(**kw):
    return ConfirmPlan(budget="cpu", top_k=1, choose_seeds=0, **{"judge_seeds": 3, **kw})


# ------------------------------------------------------------------------------------------ intervals
def test_mean_interval_is_student_t_with_its_df():
    interval = mean_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, n 3, df 2
    half = T975[2] / math.sqrt(3)
    assert (interval.mean, interval.std, interval.n, interval.df) == (2.0, 1.0, 3, 2)
    assert interval.low == pytest.approx(2.0 - half, abs=1e-5) and interval.high == pytest.approx(2.0 + half, abs=1e-5)
    single = mean_interval([5.0])
    assert (single.n, single.df, single.low, single.std) == (1, None, None, None)


def test_winner_minus_published_is_paired_over_the_judging_seeds():
    plan = cpu_plan(judge_seeds=4)
    judge = plan.seeds().judge  # 43..46
    w, p = [80.5, 81.6, 79.4, 80.0], [80.0, 81.0, 79.0, 79.5]  # the test average judges; dev only chose
    configs = [ConfigScores("w", 1, judge=runs(judge, [0.0] * 4, w)), ConfigScores("p", None, judge=runs(judge, p, p))]
    d = decide(configs, published="p", baseline=UntouchedFigures(), plan=plan)
    # differences 0.5, 0.6, 0.4, 0.5: mean 0.5, sd 0.0816497, df 3
    v = d.versus_published
    assert d.winner == "w" and (v.n, v.df) == (4, 3)
    assert v.mean == pytest.approx(0.5) and v.std == pytest.approx(0.0816497, abs=1e-6)
    assert v.low == pytest.approx(0.5 - T975[3] * 0.0816497 / 2, abs=1e-5)
    assert d.beats_published and not d.below_published
    assert "beats the published point" in d.sentence and "n = 4, df = 3" in d.sentence


def test_the_parent_runs_winner_minus_published_is_the_figure_search_outputs_md_says():
    """docs/search_outputs.md says what the parent run's `winner_minus_published` metric is; the recording computes it
    (raycse.driver.stages.record.winner_metrics). On seeds whose dev difference (2.0) and test-average difference
    (0.5) differ, the metric is the one the page names, and the page names one."""
    from raycse.driver.stages.record import winner_metrics
    from raycse.records import WINNER_MINUS_PUBLISHED

    plan = cpu_plan(judge_seeds=4)
    judge = plan.seeds().judge
    configs = [ConfigScores("w", 1, judge=runs(judge, [83.0] * 4, [80.5, 81.6, 79.4, 80.0])),
               ConfigScores("p", None, judge=runs(judge, [81.0] * 4, [80.0, 81.0, 79.0, 79.5]))]
    d = decide(configs, published="p", baseline=UntouchedFigures(), plan=plan)
    page = (Path(__file__).resolve().parents[1] / "docs" / "search_outputs.md").read_text()
    (row,) = [line for line in page.splitlines() if line.startswith(f"| metric | `{WINNER_MINUS_PUBLISHED}` |")]
    claim = row.split("|")[3]
    readings = {"paired dev difference": 2.0, "test average": 0.5}
    claimed = [value for words, value in readings.items() if words in claim]
    assert len(claimed) == 1, f"the page should name one figure: {claim!r}"
    assert winner_metrics(d, "w")[WINNER_MINUS_PUBLISHED] == pytest.approx(claimed[0])
    assert d.versus_published_dev.mean == pytest.approx(2.0)  # the other reading, which the metric is not


def test_a_difference_whose_interval_covers_zero_neither_beats_nor_falls_below():
    plan = cpu_plan()
    judge = plan.seeds().judge
    configs = [ConfigScores("w", 1, judge=runs(judge, [81.0, 82.0, 83.0], [81.0, 82.0, 83.0])),
               ConfigScores("p", None, judge=runs(judge, [80.0] * 3, [80.0] * 3))]  # differences 1, 2, 3
    d = decide(configs, published="p", baseline=UntouchedFigures(), plan=plan)
    assert d.versus_published.low < 0 < d.versus_published.high
    assert not d.beats_published and not d.below_published
    assert "not distinguishable" in d.sentence and "could detect a difference of about" in d.sentence


def test_pooled_seed_noise_and_its_df_cover_the_choosing_and_judging_groups():
    plan = ConfirmPlan(budget="full", top_k=2, choose_seeds=3, judge_seeds=2)
    seeds = plan.seeds()  # choose 43-45, judge 46-47
    configs = [ConfigScores("a", 1, choose=runs(seeds.choose, [0.0, 2.0, 4.0]),  # squares 8, df 2
                            judge=runs(seeds.judge, [1.0, 3.0])),  # squares 2, df 1
               ConfigScores("b", 2, choose=runs(seeds.choose[:1], [9.0])),  # one value: no group
               ConfigScores("p", None, judge=runs(seeds.judge, [5.0, 5.0]))]  # squares 0, df 1
    d = decide(configs, published="p", baseline=UntouchedFigures(), plan=plan)
    assert d.winner == "b"  # a one-seed mean of 9 against a three-seed mean of 2: the choosing block decides
    # b has no judging runs, so a is not judged either; the groups are a's choose, a's judge and p's judge
    assert d.seed_noise == pytest.approx(math.sqrt(10 / 4)) and d.seed_noise_df == 4


def test_the_smallest_detectable_difference_uses_sqrt2_times_the_pooled_std_and_df_n_minus_1():
    assert smallest_detectable(1.0, 18) == pytest.approx((T975[17] + T80[17]) * math.sqrt(2) / math.sqrt(18),
                                                         abs=1e-5)
    assert smallest_detectable(0.5, 2) == pytest.approx((T975[1] + T80[1]) * 0.5, abs=1e-5)  # sqrt2 / sqrt2 = 1
    assert smallest_detectable(None, 18) is None and smallest_detectable(1.0, 1) is None
    # the full budget's 18 judging seeds: the first n that resolves one seed-std
    assert smallest_detectable(1.0, 18) <= 1.0 < smallest_detectable(1.0, 17)
    assert seeds_to_detect(1.0) == 18 == default_plan("full").judge_seeds


# ------------------------------------------------------------------------------------------ bad seeds
def test_a_diverged_seed_is_excluded_counted_and_marked():
    plan = cpu_plan(judge_seeds=5)
    judge = plan.seeds().judge
    figures = [80.0, 81.0, 82.0, 83.0]
    winner = runs(judge[:4], figures, figures) + (SeedScore(judge[4], DIVERGED, -100.0),)
    configs = [ConfigScores("w", 1, judge=winner), ConfigScores("p", None, judge=runs(judge, [79.0] * 5, [79.0] * 5))]
    d = decide(configs, published="p", baseline=UntouchedFigures(), plan=plan)
    block = d.config("w").judge
    assert block.count_text == "n = 4 of 5, 1 diverged" and block.short
    assert block.dev.mean == pytest.approx(81.5) and block.dev.n == 4  # -100 never enters the mean
    assert d.versus_published_dev.n == 4  # dev (shown, not judged): the pairs both have valid
    assert d.versus_published.n == 5  # judged: the diverged seed counts, at the worst value (79)
    assert d.versus_published.mean == pytest.approx((1 + 2 + 3 + 4 + 0) / 5)
    assert d.failures["w"].failed == 1 and d.failures["w"].ran == 5
    assert any("n = 4 of 5, 1 diverged" in mark and "fewer than planned" in mark for mark in d.marks)
    assert "Marked:" in d.sentence


def test_failed_and_missing_seeds_are_counted_apart():
    plan = cpu_plan(judge_seeds=4)
    judge = plan.seeds().judge
    scores = runs(judge[:2], [1.0, 2.0]) + (SeedScore(judge[2], FAILED),)  # the 4th never ran
    d = decide([ConfigScores("w", 1, judge=scores)], published=None, baseline=UntouchedFigures(), plan=plan)
    assert d.config("w").judge.count_text == "n = 2 of 4, 1 failed, 1 not run"


def test_a_search_stage_run_is_refused_in_a_judging_block():
    plan = cpu_plan()
    with pytest.raises(ValueError, match="seed 42"):
        decide([ConfigScores("w", 1, judge=runs([42, 43], [1.0, 2.0]))], published=None, baseline=UntouchedFigures(),
               plan=plan)


# ------------------------------------------------------------------------------------------ ranking, choosing
def test_stopped_and_finished_trials_are_ranked_on_a_common_footing():
    trials = [
        TrialCurve("A", FINISHED, ((125, 78.0), (186, 80.0)), "t0"),
        TrialCurve("B", FINISHED, ((125, 79.0), (186, 78.5)), "t1"),
        TrialCurve("A", FINISHED, ((125, 70.0), (186, 75.0)), "t2"),  # A again: one entry per configuration
        TrialCurve("C", STOPPED, ((125, 85.0),), "t3"),
        TrialCurve("D", STOPPED, ((125, 81.0), (250, 90.0)), "t4"),  # reached a later rung than C
        TrialCurve("E", DIVERGED, ((125, 99.0),), "t5"),
        TrialCurve("F", FAILED, (), "t6"),
    ]
    top2 = rank_for_confirmation(trials, 2)
    # finished first, although the stopped C read 85 at its rung
    assert [(r.key, r.score, r.up_to_step) for r in top2] == [("A", 80.0, None), ("B", 79.0, None)]
    top5 = rank_for_confirmation(trials, 5)
    # the stopped ones at step 125, the last step both reached: D's 90 at step 250 is not compared with C's 85
    assert [(r.key, r.score, r.up_to_step) for r in top5] == [
        ("A", 80.0, None), ("B", 79.0, None), ("C", 85.0, 125), ("D", 81.0, 125)]
    assert [r.rank for r in top5] == [1, 2, 3, 4]  # E diverged and F failed: never ranked


def test_a_tie_goes_to_the_trial_the_search_sampled_first_whatever_its_random_trial_id():
    """Two configurations tie on the objective (the quick start's two search trials both read 87.09): the one Optuna
    sampled first ranks first, though the other's trial id (Tune's, random) sorts before it; so the same search run
    twice with the same seeds chooses alike, whatever ids Tune drew and in whatever order the records come. The
    search stage's records as the driver holds them (the Optuna number of each) go through the driver's own reading
    (`trial_curves`); among the stopped trials, ranked at their common rung, ties go the same way; a trial without an
    Optuna number (a benchmark's grid) comes after those with one."""
    from raycse.driver.confirmation import trial_curves
    from raycse.driver.outcome import TrialRecord
    from raycse.records import SEARCH

    def record(trial_id, key, number, status, curve):
        return TrialRecord(trial_id=trial_id, stage=SEARCH, family="simcse", params={"tau": 0.05}, seed=42,
                           config_key=key, best_objective=max(v for _, v in curve), best_step=curve[-1][0],
                           steps=curve[-1][0], status=status, checkpoint=None, optuna_number=number, curve=curve)

    records = [record("f3c2a0b1", "sampled-first", 0, FINISHED, [(2, 80.0), (4, 87.09)]),
               record("0aa1b2c3", "sampled-second", 1, FINISHED, [(2, 87.09), (4, 85.0)]),
               record("00000000", "no-number", None, FINISHED, [(2, 87.09), (4, 87.09)]),
               record("e9d8c7b6", "stopped-first", 2, STOPPED, [(2, 70.0)]),
               record("1a2b3c4d", "stopped-second", 3, STOPPED, [(2, 70.0), (4, 90.0)])]
    for order in itertools.permutations(records):
        ranked = rank_for_confirmation(trial_curves(list(order)), 5)
        assert [r.key for r in ranked] == ["sampled-first", "sampled-second", "no-number", "stopped-first",
                                           "stopped-second"], [r.trial_id for r in ranked]
    # the choice follows the ranking: without a choosing block, the first ranked wins
    ranked = rank_for_confirmation(trial_curves(records[1::-1]), 1)
    assert choose_winner([ConfigScores(r.key, r.rank) for r in ranked], cpu_plan()) == "sampled-first"


def test_the_winner_is_recomputed_from_the_choosing_block():
    plan = ConfirmPlan(budget="full", top_k=2, choose_seeds=2, judge_seeds=2)
    seeds = plan.seeds()
    configs = [ConfigScores("first", 1, choose=runs(seeds.choose, [80.0, 80.2])),
               ConfigScores("second", 2, choose=runs(seeds.choose[:1], [81.0]) + (SeedScore(seeds.choose[1],
                                                                                            DIVERGED),))]
    assert choose_winner(configs, plan) == "second"  # its one valid seed's 81 beats 80.1; the diverged one is out
    d = decide(configs, published=None, baseline=UntouchedFigures(), plan=plan)
    assert d.winner == "second" and d.config("second").choose.count_text == "n = 1 of 2, 1 diverged"
    # without a choosing block the search stage's first is the winner
    assert choose_winner([ConfigScores("x", 2), ConfigScores("y", 1)], cpu_plan()) == "y"


# ------------------------------------------------------------------------------------------ the untouched model
def judged_on_test(base_test):
    plan = cpu_plan()
    judge = plan.seeds().judge
    configs = [ConfigScores("w", 1, judge=runs(judge, [80.0, 80.5, 81.0], [78.0, 78.2, 78.4]))]
    return decide(configs, published=None, baseline=UntouchedFigures(dev=70.0, test=base_test), plan=plan)


def test_beats_baseline_needs_the_lower_bound_to_clear_the_untouched_model():
    # test mean 78.2, sd 0.2, n 3: low = 78.2 - 4.302653 * 0.2 / sqrt(3) = 77.703
    above_mean_only = judged_on_test({"avg": 77.8})
    assert above_mean_only.winner_test.low == pytest.approx(78.2 - T975[2] * 0.2 / math.sqrt(3), abs=1e-5)
    assert above_mean_only.baseline_judged and not above_mean_only.beats_baseline
    assert "not shown to beat the untouched model" in above_mean_only.sentence
    cleared = judged_on_test({"avg": 77.6})
    assert cleared.beats_baseline and "beats the untouched model" in cleared.sentence


def test_without_test_figures_the_untouched_model_is_not_judged():
    d = judged_on_test({})
    assert not d.baseline_judged and not d.beats_baseline and "not judged" in d.sentence


def test_with_one_judging_seed_on_test_the_untouched_model_is_not_judged_and_the_verdict_says_why():
    plan = cpu_plan(judge_seeds=2, test_seeds=1)
    judge = plan.seeds().judge
    configs = [ConfigScores("w", 1, judge=runs(judge, [80.0, 80.4], [90.0, None])),
               ConfigScores("p", None, judge=runs(judge, [79.9, 80.1], [77.9, None]))]
    d = decide(configs, published="p", baseline=UntouchedFigures(79.0, {"avg": 77.0}), plan=plan)
    assert d.winner_test.n == 1 and d.winner_test.low is None  # 13 points above the untouched model, n = 1
    assert not d.baseline_judged and not d.beats_baseline
    assert "not judged (only 1 judging seed scored the test tasks: test_seeds 1)" in d.sentence
    assert "the test tasks scored on 1 of them" in d.sentence
    assert d.versus_published.n == 1 and not d.beats_published  # the test average judges: one pair, no interval
    assert d.versus_published_dev.n == 2  # dev shown on both seeds


# ------------------------------------------------------------------------------------------ words
def test_stds_from_fewer_than_three_values_get_one_significant_digit():
    assert [one_significant(x) for x in (0.0634, 0.096, 1.37, 12.3)] == ["0.06", "0.1", "1", "10"]
    assert format_std(1.37, 2) == "1" and format_std(1.37, 3) == "1.37" and format_std(None, 1) == "n/a"
    assert format_interval(mean_interval([1.0, 2.0, 3.0])) == "+2.00, 95% interval [-0.48, +4.48], n = 3, df = 2"
    assert format_interval(mean_interval([1.0])) == "+1.00, n = 1, no interval"


def test_the_verdict_names_the_method_the_sets_and_the_cpu_caveat():
    plan = cpu_plan(judge_seeds=2, num_samples=4)
    judge = plan.seeds().judge
    configs = [ConfigScores("w", 1, judge=runs(judge, [80.0, 80.4], [78.0, 78.3])),
               ConfigScores("p", None, judge=runs(judge, [79.9, 80.1], [77.9, 78.0]))]
    d = decide(configs, published="p", baseline=UntouchedFigures(79.0, {"avg": 77.0}), plan=plan)
    text = d.sentence
    assert "judged on fresh seeds" in text and "(seed 42)" in text and "seeds 43-44" in text
    assert "(dev, the data that chose" in text and "seven-task test average, judging seeds" in text
    assert "demonstration of the mechanism, not a decision" in text
    assert "± 0.3 " in text  # the winner's dev std over 2 seeds (0.283) to one digit
    assert d.as_dict()["sentence"] == text


# ------------------------------------------------------------------------------------------ seeds
def test_seed_blocks_never_overlap_nor_hold_the_search_seed():
    for base, top_k, choose, judge in itertools.product((0, 42), (1, 3), (1, 3), (1, 2, 18)):
        blocks = seed_blocks(base, top_k=top_k, choose_seeds=choose, judge_seeds=judge)
        assert blocks.search == base and base not in blocks.choose + blocks.judge
        assert not set(blocks.choose) & set(blocks.judge)
        assert len(blocks.choose) == (choose if top_k > 1 else 0) and len(blocks.judge) == judge
    assert seed_blocks(42, top_k=3, choose_seeds=3, judge_seeds=2) == SeedBlocks(42, (43, 44, 45), (46, 47))
    assert seed_blocks(42, top_k=1, choose_seeds=3, judge_seeds=2) == SeedBlocks(42, (), (43, 44))
    assert default_plan("full").seeds().choose == (43, 44, 45) and default_plan("full").seeds().judge[0] == 46
    with pytest.raises(ValueError):
        seed_blocks(42, top_k=3, choose_seeds=0, judge_seeds=2)


# ------------------------------------------------------------------------------------------ the simulation
def test_a_small_simulation_runs_and_shows_the_bias_it_removes(monkeypatch):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "selection_bias.py"
    spec = importlib.util.spec_from_file_location("selection_bias", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    result = module.run("full", reps=60, seed=1)
    assert result["plan"] == {"top_k": 3, "choose_seeds": 3, "judge_seeds": 18, "test_seeds": 18}
    for name, entry in result["rules"].items():
        for scenario in ("null", "power"):
            for flag in ("beats_published", "beats_baseline", "winner_is_published"):
                rate = entry[scenario][flag]
                # a share of the 60 repetitions, with its binomial Monte-Carlo error
                assert rate["rate"] * 60 == pytest.approx(round(rate["rate"] * 60)), (name, scenario, flag)
                assert rate["mc_error"] == pytest.approx(math.sqrt(rate["rate"] * (1 - rate["rate"]) / 60))
    for model in ("curve", "single"):
        null, power = result["rules"][f"decision/{model}"]["null"], result["rules"][f"decision/{model}"]["power"]
        # no true difference: "beats" at most at the nominal 2.5%, plus 3 Monte-Carlo errors at 60 repetitions
        # (3 x sqrt(0.025 x 0.975 / 60) = 0.06); one configuration a sigma better: found far more often
        assert null["beats_published"]["rate"] <= 0.025 + 0.061 and null["beats_baseline"]["rate"] <= 0.025 + 0.061
        assert power["beats_published"]["rate"] > null["beats_published"]["rate"] + 0.15
    new, today = result["rules"]["decision/curve"]["null"], result["rules"]["today/single"]["null"]
    # today's rule: about +1 sigma (mc error ~0.06 at 60 reps); the decision: about 0 (mc error ~0.04)
    assert today["bias"]["mean"] > 0.6 and abs(new["bias"]["mean"]) < 0.2
    assert today["beats_baseline"]["rate"] > 0.9
    # The smallest detectable difference, in units of the estimated seed std (smallest_detectable's closed form):
    # (t_{0.975,17} + t_{0.80,17}) x sqrt(2) / sqrt(18) = (2.110 + 0.863) x 0.333 = 0.991 seed stds, for 18 judging
    # seeds. The simulation measures it in units of sigma, the std of one evaluation, and estimates the seed std
    # from the runs' dev figures: under the single model a run's figure is one N(0, 1) evaluation, so the median is
    # 0.991; under the curve model it is the best of two evaluations correlated rho = 0.7, whose std is
    # sqrt(1 - (1 - rho) / pi) = 0.951 (E[max] = sqrt((1 - rho) / pi), E[max^2] = 1 by symmetry), so the median is
    # 0.991 x 0.951 = 0.943. Tolerance: the pooled std rests on ~40 degrees of freedom (relative sd
    # 1 / sqrt(2 x 40) = 0.11), and the median of 60 such figures varies by ~1.25 x 0.11 / sqrt(60) = 0.018: 0.05.
    closed_form = smallest_detectable(1.0, 18)
    assert closed_form == pytest.approx(0.991, abs=0.001)
    assert result["rules"]["decision/single"]["null"]["detectable"]["median"] == pytest.approx(closed_form, abs=0.05)
    assert new["detectable"]["median"] == pytest.approx(closed_form * math.sqrt(1 - 0.3 / math.pi), abs=0.05)
    cpu = module.run("cpu", reps=30, seed=1)
    assert cpu["plan"] == {"top_k": 1, "choose_seeds": 0, "judge_seeds": 2, "test_seeds": 1}
    # one judging seed on test: the CPU budget never judges the winner against the untouched model
    assert all(entry["null"]["beats_baseline"]["rate"] == 0.0 for name, entry in cpu["rules"].items()
               if name.startswith("decision"))


# ------------------------------------------------------------------------------------------ judged on unchosen data
def test_the_flags_come_from_the_test_average_not_from_the_dev_figures_that_chose():
    plan = cpu_plan(judge_seeds=4)
    judge = plan.seeds().judge
    # on dev (the data that chose) the winner is 2 points ahead on every seed; on the test average it is level
    configs = [ConfigScores("w", 1, judge=runs(judge, [82.0, 82.1, 82.2, 82.3], [78.0, 78.5, 77.5, 78.2])),
               ConfigScores("p", None, judge=runs(judge, [80.0, 80.1, 80.2, 80.3], [78.1, 78.4, 77.6, 78.1]))]
    d = decide(configs, published="p", baseline=UntouchedFigures(79.0, {"avg": 78.0}), plan=plan)
    assert d.versus_published_dev.low > 1.9  # shown, labelled as the data that chose
    assert not d.beats_published and d.versus_published.covers_zero
    assert not d.beats_baseline and "the data that chose: shown, not judged" in d.sentence


def test_a_split_objective_judges_on_its_held_out_pairs():
    plan = cpu_plan(judge_seeds=3, judge_on="split")
    judge = plan.seeds().judge
    w = tuple(SeedScore(s, FINISHED, 90.0, {}, held_out=h) for s, h in zip(judge, [81.0, 82.0, 83.0]))
    p = tuple(SeedScore(s, FINISHED, 80.0, {}, held_out=h) for s, h in zip(judge, [79.0, 79.9, 81.1]))
    d = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
               baseline=UntouchedFigures(), plan=plan)
    assert d.versus_published.mean == pytest.approx(2.0) and d.versus_published.n == 3
    assert "held-out part of the objective's pairs" in d.sentence
    with pytest.raises(ValueError, match="judge_on"):
        cpu_plan(judge_on="dev")


# ------------------------------------------------------------------------------------------ failures count
def test_a_winner_that_diverges_on_half_its_judging_seeds_beats_nothing():
    plan = ConfirmPlan(budget="full", top_k=1, choose_seeds=0, judge_seeds=18, looks=(18,))  # one look, at the end
    judge = plan.seeds().judge
    ok, lost = judge[::2], judge[1::2]
    w = runs(ok, [85.0] * 9, [80.0 + 0.1 * i for i in range(9)]) + tuple(SeedScore(s, DIVERGED, -1.0) for s in lost)
    p = runs(judge, [80.0] * 18, [78.0 + 0.05 * (i % 3) for i in range(18)])
    d = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
               baseline=UntouchedFigures(70.0, {"avg": 78.0}), plan=plan)
    # on the nine seeds it survived it is 2 points ahead of both; the nine diverged seeds count at the worst value,
    # and a failure rate above the comparator's by more than chance (Fisher, one-sided 2.5%) blocks "beats"
    assert d.versus_published.n == 18 and d.versus_published.low > 0 and not d.beats_published
    assert d.versus_baseline.n == 18 and d.versus_baseline.low > 0 and not d.beats_baseline
    assert "fails more often than" in d.sentence
    rate = d.failures["w"]
    assert (rate.failed, rate.ran) == (9, 18) and rate.low == pytest.approx(0.2903, abs=1e-4)
    assert rate.high == pytest.approx(0.7097, abs=1e-4)
    assert "9 of 18 failed (95% interval 29-71%)" in d.sentence


def test_a_configuration_missing_choosing_seeds_does_not_win_on_fewer_values():
    plan = ConfirmPlan(budget="full", top_k=2, choose_seeds=3, judge_seeds=2)
    seeds = plan.seeds().choose
    lucky = runs(seeds[:1], [83.0]) + (SeedScore(seeds[1], FAILED), SeedScore(seeds[2], DIVERGED, -1.0))
    steady = runs(seeds, [82.0, 83.0, 81.5])
    configs = [ConfigScores("lucky", 1, choose=lucky), ConfigScores("steady", 2, choose=steady)]
    # lucky's one value (83) beats steady's mean (82.17); with its lost seeds at the worst value (81.5: 82.0) not
    assert choose_winner(configs, plan) == "steady"
    not_run = [ConfigScores("lucky", 1, choose=runs(seeds[:1], [83.0])), ConfigScores("steady", 2, choose=steady)]
    assert choose_winner(not_run, plan) == "steady"


# ------------------------------------------------------------------------------------------ sequential looks
def test_the_z_boundaries_match_the_published_values_and_the_t_boundaries_spend_exactly_alpha():
    import numpy as np
    from scipy import stats as st

    from raycse.judging import judgment

    z = judgment.z_boundaries((6, 12, 18), gamma=None)
    # Lan-DeMets O'Brien-Fleming type, one-sided 0.025, three equally spaced looks (gsDesign: 3.7103, 2.5114, 1.9930)
    assert z == pytest.approx((3.7103, 2.5114, 1.9930), abs=2e-4)
    cov = [[math.sqrt(min(i, j) / max(i, j)) for j in (6, 12, 18)] for i in (6, 12, 18)]
    never = st.multivariate_normal(mean=[0, 0, 0], cov=cov).cdf(list(z))
    assert 1 - never == pytest.approx(0.025, abs=2e-4)  # the whole alpha, spent over the looks
    # Hwang-Shih-DeCani gamma -2, the default: alpha (1 - e^(2t)) / (1 - e^2) spent by information fraction t
    assert judgment.spent(1 / 3) == pytest.approx(0.025 * (1 - math.exp(2 / 3)) / (1 - math.exp(2)))
    assert judgment.spent(1.0) == pytest.approx(0.025) and judgment.spent(0.0) == 0.0
    # a single look is the fixed two-sided 95% t test
    assert judgment.t_boundary((18,), 18) == pytest.approx(T975[17], abs=1e-5)
    looks = (6, 9, 12, 18)
    bounds = [judgment.t_boundary(looks, n) for n in looks]
    assert bounds == pytest.approx((4.37, 3.52, 3.00, 2.28), abs=0.02)
    # independent null paths (another seed): the repeated t test spends 2.5% one-sided in all, each look its share;
    # the equal-p-value carriage of the z boundaries (the t-analogue) overspends
    rng = np.random.default_rng(1)
    x = rng.standard_normal((400_000, 18))
    t = np.stack([x[:, :n].mean(1) / (x[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in looks], axis=1)

    def spent_by(b):
        crossed = t >= np.asarray(b)
        first = np.where(crossed.any(1), crossed.argmax(1), -1)
        return np.array([(first == k).mean() for k in range(len(looks))])

    by_look = spent_by(bounds)
    se = math.sqrt(0.025 * 0.975 / len(x))
    assert abs(by_look.sum() - 0.025) < 3 * se
    assert by_look == pytest.approx([judgment.spent(n / 18) - judgment.spent(m / 18)
                                     for n, m in zip(looks, (0, *looks[:-1]))], abs=5e-4)
    analogue = [st.t.isf(st.norm.sf(c), n - 1) for c, n in zip(judgment.z_boundaries(looks), looks)]
    assert spent_by(analogue).sum() > 0.025 + 3 * se


def test_the_judgment_stops_at_the_look_a_boundary_is_crossed_and_reports_a_repeated_interval():
    plan = ConfirmPlan(budget="full", top_k=1, choose_seeds=0, judge_seeds=18, looks=(6, 12, 18))
    judge = plan.seeds().judge[:12]
    w = runs(judge, [80.0] * 12, [83.0 + 0.1 * (i % 4) for i in range(12)])
    p = runs(judge, [80.0] * 12, [79.0 + 0.1 * (i % 3) for i in range(12)])
    d = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
               baseline=UntouchedFigures(70.0, {"avg": 78.0}), plan=plan)
    v = d.versus_published
    assert d.look == 2 and d.stopped == "beats" and d.beats_published and d.beats_baseline
    from raycse.judging import judgment

    half = judgment.t_boundary((6, 12, 18), 12) * v.std / math.sqrt(12)
    assert judgment.t_boundary((6, 12, 18), 12) == pytest.approx(2.85, abs=0.02)
    assert v.low == pytest.approx(v.mean - half) and half > T975[17] * v.std / math.sqrt(12)
    assert "stopped at look 2" in d.sentence and "repeated 95% interval" in d.sentence


def test_a_difference_too_small_to_matter_stops_for_futility_but_never_at_the_last_look():
    plan = default_plan("full", top_k=1, choose_seeds=0)  # looks 6, 9, 12, 18
    judge = plan.seeds().judge
    level = [78.0, 78.4, 77.9, 78.2, 78.1, 78.3]
    w = runs(judge[:6], [80.0] * 6, level)
    p = runs(judge[:6], [80.0] * 6, [x + d for x, d in zip(level, [0.1, -0.1, 0.05, -0.05, 0.2, -0.21])])
    d = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
               baseline=UntouchedFigures(70.0, {"avg": 78.15}), plan=plan)
    assert d.look == 1 and d.stopped == "futility" and not d.beats_published and not d.beats_baseline
    single = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
                    baseline=UntouchedFigures(70.0, {"avg": 78.15}), plan=cpu_plan(judge_seeds=6))
    assert single.stopped is None  # one look: nothing stops early


def test_futility_reads_the_pairs_both_sides_ran_not_the_imputed_figure():
    from raycse.judging import judgment

    plan = default_plan("full", top_k=1, choose_seeds=0)  # looks 6, 9, 12, 18
    judge = plan.seeds().judge[:6]
    level = [78.0, 78.4, 77.9, 78.2, 78.1, 78.3]
    w_tests = [x + d for x, d in zip(level, [0.1, -0.1, 0.05, -0.05, 0.2, -0.21])]
    w = runs(judge[:4], [80.0] * 4, w_tests[:4]) + tuple(SeedScore(s, DIVERGED, None) for s in judge[4:])
    p = runs(judge, [80.0] * 6, level)
    d = decide([ConfigScores("w", 1, judge=w), ConfigScores("p", None, judge=p)], published="p",
               baseline=UntouchedFigures(70.0, {"avg": 78.15}), plan=plan)
    v = d.versus_published  # the judgment: the two lost seeds take the worst value, so the mean is pulled down
    assert v.n == 6 and abs(v.mean) / (v.std / math.sqrt(v.n)) > judgment.futility_bound(plan.design_looks, 1)
    # on the four pairs both ran the difference is small: futile, whatever the failures do to the judgment
    assert abs(judgment.futility_t({s: x for s, x in zip(judge, w_tests[:4])}, dict(zip(judge, level)))) < 0.6
    assert d.look == 1 and d.stopped == "futility" and not d.beats_published and not d.below_published
    assert judgment.futility_t({1: 1.0, 2: None}, {1: 0.0, 2: 0.0}) is None  # one pair: no t, no futility


def test_a_space_file_plans_its_looks_and_refuses_bad_ones(tmp_path):
    from raycse.driver.confirmation import confirm_plan
    from raycse.errors import ConfigError
    from raycse.settings.space import load_space

    focal = Path(__file__).resolve().parents[1] / "search_spaces" / "focal.yaml"
    space = load_space(focal)
    assert confirm_plan(space, "full").looks == (6, 9, 12, 18)
    assert confirm_plan(space.with_cpu_budget(), "cpu").looks == (2,)  # 2 judging seeds: one look
    bad = tmp_path / "bad.yaml"
    bad.write_text(focal.read_text().replace("judge_seeds: 18}", "judge_seeds: 18, looks: [6, 12, 17]}", 1))
    with pytest.raises(ConfigError, match=r"confirm\.looks must be rising whole numbers .* \(18\)"):
        load_space(bad)


def test_the_pipeline_simulation_runs_through_the_decision_and_its_detectable_difference_is_exact(monkeypatch):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "judging_sim.py"
    spec = importlib.util.spec_from_file_location("judging_sim", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    # the exact noncentral t, not the normal approximation (14.1 sigma at n = 2)
    assert module.smallest_detectable_exact(2) == pytest.approx(16.33, abs=0.01)
    assert module.smallest_detectable_exact(18) == pytest.approx(0.99, abs=0.01)
    # the vectorised ASHA stops the same trials at the same rungs as one np.nanpercentile per trial
    import numpy as np

    rng = np.random.default_rng(5)
    values = module._curves(rng, rng.normal(0, 0.5, (200, 48)), 200, 48)
    reached = module._asha(values)
    assert (reached == module._asha_reference(values)).all() and set(np.unique(reached)) == {1, 2, 4, 8}
    null = module.simulate("focal", 150, share=0.5, divergence=0.2, seed=3)
    assert null["reps"] > 140 and null["judging_runs"]["seq"] < null["judging_runs"]["fixed"]
    assert null["false_beats_published"]["seq"]["rate"] < 0.10 and abs(null["bias"]["mean"]) < 0.3
    strong = module.simulate("focal", 100, share=0.0, divergence=0.0, margin=3.0, seed=4)
    assert strong["power"]["seq"]["rate"] > 0.5  # a 3-sigma better configuration is usually found and judged better
