"""`raycse compare`: the family-wise statistics against hand computations and scipy, the refusals (one line, exit
2, nothing written), and a whole comparison of two losses with a tiny BERT on a real Ray runtime, Optuna and a
SQLite MLflow store."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats as scipy_stats

from raycse.cli import main
from raycse.judging import comparison
from raycse.judging.comparison import PUBLISHED, TUNED, Arm

SPACE = """\
model: {model}
objective: {objective}
loss: {loss}
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160, lr: 1.0e-4}}
space:
  {param}: {{type: loguniform, low: 0.02, high: 0.2}}
published: {{{param}: 0.05}}
search: {{num_samples: {num_samples}, seed: 0, test_eval: best, scheduler: {{name: fifo}},
         confirm: {confirm}}}
resources: {{workers: 1, cpus_per_worker: 1}}
"""


def write_loss_space(folder: Path, model, loss: str, objective: str = "stsb_dev", num_samples: int = 2,
                     confirm: str = "{top_k: 1, judge_seeds: 3}", name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or loss}.yaml"
    path.write_text(SPACE.format(model=model, objective=objective, loss=loss, param="tau",
                                 num_samples=num_samples, confirm=confirm))
    return path


# ------------------------------------------------------------------------------------------ the statistics
def test_holm_adjusted_p_values_by_hand():
    # p sorted: 0.01, 0.02, 0.03, 0.04 (m = 4): 4 x 0.01, max(0.04, 3 x 0.02), max(0.06, 2 x 0.03), max(0.06, 0.04)
    p = np.array([0.03, 0.01, 0.04, 0.02])
    assert np.allclose(comparison.holm_adjusted(p), [0.06, 0.04, 0.06, 0.06])
    assert comparison.holm_decided(p).tolist() == [False, True, False, False]
    # step-down stops at the first failure: 0.01 <= 0.05/3, 0.02 <= 0.05/2, 0.06 > 0.05
    assert comparison.holm_decided(np.array([0.01, 0.02, 0.06])).tolist() == [True, True, False]
    # Bonferroni would decide only the first: Holm decides at least as much
    assert (np.array([0.01, 0.02, 0.06]) * 3 <= 0.05).tolist() == [True, False, False]
    # capped at 1, and vectorised over leading axes (the simulation's replications)
    many = np.array([[0.9, 0.8], [0.001, 0.5]])
    assert np.allclose(comparison.holm_adjusted(many), [[1.0, 1.0], [0.002, 0.5]])


def test_paired_t_matches_scipy_and_the_bonferroni_interval_its_quantile():
    rng = np.random.default_rng(0)
    diffs = rng.normal(0.4, 1.0, size=12)
    mean, sd, n, p_up, p_down = comparison.paired_t(diffs)
    expected = scipy_stats.ttest_1samp(diffs, 0.0)
    assert math.isclose(float(comparison.two_sided(p_up, p_down)), expected.pvalue, rel_tol=1e-9)
    assert math.isclose(float(p_up), scipy_stats.ttest_1samp(diffs, 0.0, alternative="greater").pvalue,
                        rel_tol=1e-9)
    # m = 3 intervals at 95% together: each a 98.33% t interval, wider than the single 95% one
    half = float(comparison.bonferroni_half_width(sd, n, 3))
    assert math.isclose(half, scipy_stats.t.ppf(1 - 0.05 / 6, 11) * diffs.std(ddof=1) / math.sqrt(12), rel_tol=1e-9)
    assert half > scipy_stats.t.ppf(0.975, 11) * diffs.std(ddof=1) / math.sqrt(12)
    assert math.isclose(comparison.adjusted_confidence(3), 1 - 0.05 / 3)
    # fewer than two pairs: no test
    assert comparison.paired_t(np.array([1.0]))[3] == 1.0


def test_the_family_every_pair_of_winners_then_each_against_its_published_point():
    seeds = range(46, 52)
    arms = [Arm("simcse", TUNED, {s: 76.0 + 0.1 * (s % 3) for s in seeds}),
            Arm("focal", TUNED, {s: 78.0 + 0.1 * (s % 2) for s in seeds}),
            Arm("dclr", TUNED, {s: 76.05 + 0.2 * (s % 2) for s in seeds}),
            Arm("focal", PUBLISHED, {s: 77.0 + 0.3 * (s % 3) for s in seeds})]
    judged = comparison.judge_family(arms)
    assert [(j.a, j.b) for j in judged] == [("simcse", "focal"), ("simcse", "dclr"), ("focal", "dclr"),
                                            ("focal", "focal (published)")]
    by_pair = {(j.a, j.b): j for j in judged}
    assert by_pair[("simcse", "focal")].verdict == "worse" and by_pair[("focal", "dclr")].verdict == "better"
    assert by_pair[("simcse", "dclr")].verdict == "not distinguishable"
    for j in judged:
        assert j.n == 6 and j.df == 5 and j.low <= j.mean <= j.high
        diffs = np.array([arms_value(arms, j.a, s) - arms_value(arms, j.b, s) for s in seeds])
        half = scipy_stats.t.ppf(1 - 0.05 / 8, 5) * diffs.std(ddof=1) / math.sqrt(6)  # m = 4
        assert math.isclose(j.high - j.low, 2 * half, rel_tol=1e-9)
    raw = np.array([j.p for j in judged])
    assert np.allclose([j.p_holm for j in judged], comparison.holm_adjusted(raw))


def arms_value(arms, name, seed):
    return next(a for a in arms if a.name == name).values[seed]


def test_a_failed_seed_counts_against_its_own_side_and_a_side_that_fails_more_is_never_better():
    seeds = range(10)
    good = {s: 80.0 + 0.3 * math.sin(s) for s in seeds}
    # b is far ahead on the seeds it survived, but fails 6 of 10: it cannot be called better
    shaky = {s: (None if s < 6 else 90.0 + 0.05 * s) for s in seeds}
    (judged,) = comparison.judge_family([Arm("a", TUNED, good), Arm("b", TUNED, shaky)])
    assert judged.verdict == "not distinguishable" and "fails more often" in judged.note
    # one failed seed of ten: the worst value observed takes its place in the claim of its own side
    one_failed = {s: (None if s == 0 else 81.0 + 0.3 * math.cos(s)) for s in seeds}
    (judged,) = comparison.judge_family([Arm("a", TUNED, good), Arm("b", TUNED, one_failed)])
    assert judged.verdict == "worse" and judged.low < judged.mean < judged.high and judged.n == 10
    # b's claim ("a worse than b") counts b's failed seed at the worst value observed (a's 80 - 0.3 sin ...)
    worst = min(v for v in (*good.values(), *one_failed.values()) if v is not None)
    down = np.array([good[s] - (worst if one_failed[s] is None else one_failed[s]) for s in seeds])
    half = scipy_stats.t.isf(0.05 / 2, 9) * down.std(ddof=1) / math.sqrt(10)
    assert math.isclose(judged.high, down.mean() + half, rel_tol=1e-9)


# ------------------------------------------------------------------------------------------ refusals
def test_bad_comparisons_are_one_line_exit_2_and_write_nothing(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spaces = tmp_path / "spaces"
    focal = write_loss_space(spaces, tiny_bert_dir, "focal")
    simcse = write_loss_space(spaces, tiny_bert_dir, "simcse")
    other_objective = write_loss_space(tmp_path / "other", tiny_bert_dir, "simcse", objective="sts_dev_avg",
                                       name="simcse2")
    other_budget = write_loss_space(tmp_path / "budget", tiny_bert_dir, "simcse", num_samples=3, name="simcse3")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    cases = [(["--space", str(focal)], "at least two spaces"),
             (["--space", str(focal), "--space", str(focal)], "given twice"),
             (["--space", str(focal), "--space", str(other_objective)], "disagree on objective"),
             (["--space", str(focal), "--space", str(other_budget)], "disagree on num_samples"),
             (["--space", str(focal), "--space", "all"], "one loss per space"),
             (["--space", str(focal), "--space", str(simcse), "--judge-seeds", "1"], "--judge-seeds"),
             (["--space", str(focal), "--space", str(simcse), "--resume"], "--tracking-uri")]  # no store to resume
    for args, words in cases:
        assert main(["compare", *args, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("raycse: error:") and err.count("\n") == 1 and words in err, (args, err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_resume_of_no_comparison_is_one_line_exit_2_and_writes_nothing(tmp_path, tiny_bert_dir, capsys,
                                                                         monkeypatch):
    """`raycse compare --resume` where the store holds no such comparison (another experiment only): refused before
    anything starts, the store and the folder as they were."""
    from raycse.tracking.tracker import Tracker

    monkeypatch.chdir(tmp_path)
    spaces = tmp_path / "spaces"
    focal, simcse = (write_loss_space(spaces, tiny_bert_dir, loss) for loss in ("focal", "simcse"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    Tracker(uri, "something-else")
    before = {path: path.stat().st_mtime_ns for path in tmp_path.rglob("*")}
    assert main(["compare", "--space", str(focal), "--space", str(simcse), "--tracking-uri", uri, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err == (f"raycse: error: --resume: no comparison 'compare-focal-simcse' to resume in {uri} (pass the "
                   "stores and the --experiment it started with)\n")
    assert {path: path.stat().st_mtime_ns for path in tmp_path.rglob("*")} == before


# ------------------------------------------------------------------------------------------ a whole comparison
@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_compare_two_losses_judged_on_shared_seeds(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    import ray

    from tests.test_search import small_dev_file

    monkeypatch.chdir(tmp_path)
    objective = small_dev_file(tmp_path)
    spaces = tmp_path / "spaces"
    # both search-stage trials go on to a choosing block (seed 43); the winners are judged on 44 and 45
    confirm = "{top_k: 2, choose_seeds: 1, judge_seeds: 2}"
    simcse = write_loss_space(spaces, tiny_bert_dir, "simcse", objective=objective, confirm=confirm)
    focal = write_loss_space(spaces, tiny_bert_dir, "focal", objective=objective, confirm=confirm)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    try:
        code = main(["compare", "--space", str(simcse), "--space", str(focal), "--budget", "cpu",
                     "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray"), "--output-dir", "out"])
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    with capsys.disabled():  # the answer as printed (pytest -s shows it)
        print(out[out.index("Comparison 'compare-simcse-focal' ("):])
    summary = json.loads((tmp_path / "out" / "compare_summary.json").read_text())
    m = summary["family"]["comparisons"]
    flat = " ".join(out.split())  # the prose is wrapped
    for words in ("Test tasks (Spearman x100; mean ± std over the judging seeds):", "STS12", "SICK-R", "Avg.",
                  "2 trials of 4 steps", "Pairwise differences", "Holm step-down", "Bonferroni-adjusted",
                  f"adjusted interval ({100 * (1 - 0.05 / m):.1f}% each)", "simcse - focal",
                  "demonstration of the mechanism", "choosing seed 43",
                  "judged on the same fresh seeds 44-45 (n = 2)", "2 trials of 4 steps, top 2 on 1 seed"):
        assert words in flat, words
    for loss in ("simcse", "focal"):  # a search may choose its published point: then it is judged once
        chose_published = summary["losses"][loss]["winner"] == summary["losses"][loss]["published"]
        assert (f"{loss} (tuned winner = published point)" in out) == chose_published
        assert (f"{loss} - {loss} (published)" in out) == (not chose_published)

    seeds = summary["seeds"]
    assert seeds["search"] == 42 and seeds["choose"] == [43] and seeds["judge"] == [44, 45]
    assert summary["budget_per_loss"]["trials"] == 2 and summary["budget_per_loss"]["judge_seeds"] == 2
    assert summary["budget_per_loss"]["top_k"] == 2 and summary["budget_per_loss"]["choose_seeds"] == 1
    tuned = [arm for arm in summary["arms"] if arm["role"] == "tuned"]
    assert sorted(arm["loss"] for arm in tuned) == ["focal", "simcse"]
    for arm in summary["arms"]:  # every arm on the very same judging seeds, none of them a seed that chose
        assert sorted(map(int, arm["seeds"])) == seeds["judge"]
        assert not set(map(int, arm["seeds"])) & {seeds["search"], *seeds["choose"]}
        assert arm["test"]["avg"]["n"] == 2 - arm["failed"]
        assert all(arm["test"][task]["mean"] is not None for task in summary["tasks"])
    pairs = summary["pairs"]
    assert m == len(pairs) == 1 + len([a for a in summary["arms"] if a["role"] == "published"])
    assert pairs[0]["a"] == "simcse" and pairs[0]["b"] == "focal"
    for pair in pairs:
        assert pair["n"] == 2 and pair["df"] == 1 and pair["verdict"] in ("better", "worse", "not distinguishable")
        assert pair["low"] <= pair["high"] and pair["p"] <= pair["p_holm"] <= 1
        # the interval is the Bonferroni-adjusted paired t interval over the arms' own per-seed figures
        a, b = (next(x for x in summary["arms"] if x["name"] == name) for name in (pair["a"], pair["b"]))
        diffs = np.array([a["seeds"][s] - b["seeds"][s] for s in a["seeds"]])
        half = scipy_stats.t.ppf(1 - 0.05 / (2 * m), 1) * diffs.std(ddof=1) / math.sqrt(2)
        assert math.isclose(pair["high"] - pair["low"], 2 * half, rel_tol=1e-6)
        assert math.isclose(pair["mean"], diffs.mean(), rel_tol=1e-9, abs_tol=1e-9)

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("compare-simcse-focal")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("raycse.compare") == "compare-simcse-focal"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted(r.data.tags["raycse.compare_loss"] for r in children) == ["focal", "simcse"]
    for child in children:
        loss = child.data.tags["raycse.compare_loss"]
        assert child.data.tags["raycse.loss_search"] == f"compare-simcse-focal-{loss}"
        assert "avg" in child.data.metrics and child.info.status == "FINISHED"
        loss_experiment = client.get_experiment_by_name(f"compare-simcse-focal-{loss}")
        parent_run = client.get_run(child.data.tags["raycse.loss_parent_run"])
        assert parent_run.info.experiment_id == loss_experiment.experiment_id
        for stage, expected in (("search", [42]), ("choose", [43]), ("judge", [44, 45])):
            runs = client.search_runs([loss_experiment.experiment_id], f"tags.`raycse.stage` = '{stage}'")
            assert sorted({int(r.data.tags["raycse.seed"]) for r in runs}) == expected, stage
    logged = client.download_artifacts(parents[0].info.run_id, "compare_summary.json", str(tmp_path))
    assert json.loads(Path(logged).read_text())["pairs"] == pairs

    # export: any loss's winner, through the comparison
    assert main(["export", "compare-simcse-focal", "focal-model", "--loss", "focal", "--tracking-uri", uri]) == 0
    assert (tmp_path / "focal-model" / "README.md").is_file()
    capsys.readouterr()
    assert main(["export", "compare-simcse-focal", "x-model", "--loss", "dclr", "--tracking-uri", uri]) == 2
    assert "no loss 'dclr'" in capsys.readouterr().err and not (tmp_path / "x-model").exists()


def test_the_simulation_holds_its_error_rate_and_finds_a_large_difference():
    from tests.benchmark_modules import load_benchmark

    sim = load_benchmark("comparison_sim")
    rng = np.random.default_rng(7)
    null = sim.simulate(rng, 4000, (0, 0, 0, 0), 0.0, True, 18)
    assert null["comparisons"] == 6 + 4
    assert null["familywise_false_claim"]["rate"] <= 0.05 + 3 * null["familywise_false_claim"]["mc_error"]
    assert abs(null["bias_reported"]["largest_abs"]) < 0.05
    assert null["bias_naive_search_figures"]["mean_over_pairs"] > 2.0  # best of 16 noisy runs, quoted as is
    strong = sim.simulate(rng, 2000, (3, 0, 0), 0.0, False, 18)
    assert strong["power_per_true_difference"]["rate"] > 0.95


def test_the_printed_answer_states_each_arm_and_each_verdict_with_its_interval_and_n():
    from raycse.records import SEVEN_TASKS, TEST_KEYS
    from raycse.reporting.compare_table import format_comparison

    seeds = list(range(46, 52))
    arms = [Arm("simcse", TUNED, {s: 76.0 + 0.1 * (s % 3) for s in seeds}),
            Arm("focal", TUNED, {s: 78.0 + 0.1 * (s % 2) for s in seeds})]
    pairs = comparison.judge_family(arms)
    figure = {"mean": 77.0, "std": 0.12, "n": 6}
    summary = {
        "comparison": "cmp", "budget": "full", "objective": "stsb_dev", "model": "m", "corpus": "c",
        "judged_figure": "the seven-task STS test average", "tasks": list(SEVEN_TASKS),
        "seeds": {"search": 42, "choose": [43, 44, 45], "judge": seeds},
        "budget_per_loss": {"trials": 16, "max_steps": None, "epochs": 1, "top_k": 3, "choose_seeds": 3,
                            "judge_seeds": 6},
        "family": {"comparisons": 1, "alpha": 0.05, "verdicts": "Holm step-down on paired t p-values",
                   "intervals": "Bonferroni-adjusted paired t", "interval_confidence": 0.95},
        "losses": {"simcse": {"experiment": "cmp-simcse"}, "focal": {"experiment": "cmp-focal"}},
        "arms": [{"name": a.name, "loss": a.loss, "role": a.role, "params": {"tau": 0.05}, "failed": 0, "ran": 6,
                  "test": {task: figure for task in TEST_KEYS}} for a in arms],
        "pairs": [p.to_dict() for p in pairs]}
    text = format_comparison(summary)
    assert "simcse (tuned winner)" in text and "focal (tuned winner)" in text and "77.00 ± 0.12" in text
    assert "16 trials of 1 epoch(s), top 3 on 3 seeds" in text and "CPU budget" not in text
    pair = pairs[0]
    row = next(line for line in text.splitlines() if line.strip().startswith("simcse - focal"))
    assert f"[{pair.low:+.2f}, {pair.high:+.2f}]" in row and " 6 " in row and "simcse worse than focal" in row
    design = text.split("\n\n", 1)[0].splitlines()  # the prose wraps
    assert len(design) > 1 and max(map(len, design)) <= 116
