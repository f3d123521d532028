"""`raycse report`: the HTML page built from a real MLflow experiment and a real Optuna study.

The inputs are what `raycse search` records (docs: the search-outputs contract): a parent run with its
search_summary.json, one child run per trial with its `objective` history, and the search's Optuna study in
SQLite - written here with MLflow and Optuna themselves, no mocks.
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from skips import unavailable

from raycse import reporting as report
from raycse.errors import ConfigError
from raycse.reporting import load, tables

FOCAL = "raycse-focal"
ALL = "raycse-all"
BASELINE = 79.73
ODD_TAU = 0.07076907181813105  # printed as 0.07077, never in full


def _key(family: str, params: dict) -> str:
    return family + "|" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))


# Each trial: (ray trial id, family, params, objective history as (training step, value), status).
# The optimiser's view follows the contract: COMPLETE with the best value (finished) or the last one (ASHA-stopped),
# intermediate values keyed 1, 2, ... by evaluation; FAIL for a crash.
FOCAL_TRIALS = [
    ("f0", "focal", {"tau": 0.07, "m": 0.3}, [(8, 80.9), (16, 81.51)], "finished"),  # the published point
    ("f1", "focal", {"tau": ODD_TAU, "m": 0.43}, [(8, 81.2), (16, 81.56)], "finished"),
    ("f2", "focal", {"tau": 0.15, "m": 0.05}, [(8, 80.0), (16, 80.4)], "stopped early (ASHA)"),
    ("f3", "focal", {"tau": 0.03, "m": 0.55}, [(8, 81.0), (16, 80.2)], "finished"),  # best at its 1st evaluation
    ("f4", "focal", {"tau": 0.1, "m": 0.2}, [], "failed"),
    ("f5", "focal", {"tau": 0.05, "m": 0.1}, [(8, 80.7), (16, 81.0)], "finished"),
]
ALL_TRIALS = [
    ("a0", "simcse", {"tau": 0.05}, [(8, 80.1), (16, 80.6)], "finished"),  # the published point
    ("a1", "focal", {"tau": 0.07, "m": 0.3}, [(8, 80.9), (16, 81.5)], "finished"),
    ("a2", "dclr", {"tau": 0.05, "phi": 0.9, "k": 1.0}, [(8, 79.0), (16, 79.2)], "stopped early (ASHA)"),
    ("a3", "simcse", {"tau": 0.12}, [(8, 79.5), (16, 79.9)], "finished"),
    ("a4", "focal", {"tau": 0.04, "m": 0.5}, [(8, 81.3), (16, 81.7)], "finished"),
    ("a5", "dclr", {"tau": 0.09, "phi": 0.75, "k": 3.0}, [(8, 78.1), (16, 78.0)], "finished"),
    ("a6", "focal", {"tau": 0.15, "m": 0.1}, [(8, 80.2), (16, 80.0)], "finished"),
    ("a7", "simcse", {"tau": 0.02}, [(8, 80.3), (16, 80.8)], "finished"),
    ("a8", "dclr", {"tau": 0.03, "phi": 0.8, "k": 2.0}, [(8, 79.8), (16, 79.6)], "finished"),
]
SPACES = {  # the space files' declarations, as Optuna distributions take them: (low, high, log)
    "tau": (0.01, 0.2, True), "m": (0.0, 0.6, False), "phi": (0.7, 1.0, False), "k": (0.5, 4.0, False)}
FOCAL_PAPER = {"STS12": {"mean": 68.50}, "STS13": {"mean": 83.70}, "STS14": {"mean": 79.00}, "STS15": {"mean": 82.71},
               "STS16": {"mean": 79.43}, "STSBenchmark": {"mean": 78.85}, "SICKRelatedness": {"mean": 72.99},
               "avg": {"mean": 77.33, "std": 0.08}}


def _distributions(family: str, params: dict, conditional: bool) -> dict:
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    out = {"loss": CategoricalDistribution(["simcse", "focal", "dclr"])} if conditional else {}
    for name in params:
        low, high, log = SPACES[name]
        out[f"{family}/{name}" if conditional else name] = FloatDistribution(low, high, log=log)
    return out


def _record_search(tracking_uri: str, storage: str, artifacts: Path, experiment: str, trials: list, *,
                   conditional: bool, summary_extra: dict) -> str:
    """Write one search as `raycse search` records it; return the parent run id."""
    import optuna
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = client.create_experiment(experiment, artifact_location=str(artifacts / experiment))
    parent = client.create_run(experiment_id, run_name="search", tags={
        "raycse.search": experiment, "raycse.budget": "cpu", "raycse.best_trial": trials[1][0]}).info.run_id
    client.log_batch(parent, params=[Param("study_name", experiment), Param("optuna_storage", storage)],
                     metrics=[Metric("baseline_objective", BASELINE, 0, 0)])
    study = optuna.create_study(study_name=experiment, storage=storage, direction="maximize")
    now = int(time.time() * 1000)
    summary_trials = []
    for trial_id, family, params, history, status in trials:
        run = client.create_run(experiment_id, run_name=trial_id, tags={
            "mlflow.parentRunId": parent, "raycse.trial_id": trial_id, "raycse.stage": "search", "raycse.seed": "42",
            "raycse.config_key": _key(family, params), "raycse.status": status}).info.run_id
        metrics = [Metric("objective", value, now, step) for step, value in history]
        best_value, best_step = max(history, key=lambda point: point[1])[::-1] if history else (None, None)
        # an ASHA-stopped trial never logged its summary metrics: its best step is in its history
        if status == "finished":
            metrics += [Metric("best_objective", best_value, now, 0), Metric("best_step", best_step, now, 0)]
        client.log_batch(run, metrics=metrics, params=[Param("loss_family", family), Param("seed", "42")]
                         + [Param(k, str(v)) for k, v in params.items()])
        client.set_terminated(run, "FAILED" if status == "failed" else "FINISHED")
        study_params = {f"{family}/{k}" if conditional else k: v for k, v in params.items()}
        if conditional:
            study_params = {"loss": family, **study_params}
        study.add_trial(optuna.trial.create_trial(
            params=study_params, distributions=_distributions(family, params, conditional),
            state=optuna.trial.TrialState.FAIL if status == "failed" else optuna.trial.TrialState.COMPLETE,
            value=None if status == "failed" else (history[-1][1] if "ASHA" in status else best_value),
            intermediate_values={i + 1: value for i, (_, value) in enumerate(history)},
            user_attrs={"ray_trial_id": trial_id}))
        summary_trials.append({"trial_id": trial_id, "stage": "search", "family": family, "params": params, "seed": 42,
                               "config_key": _key(family, params), "best_objective": best_value,
                               "best_step": best_step, "steps": history[-1][0] if history else 0, "status": status})
    published = trials[0]
    summary = {"experiment": experiment, "space_file": "x.yaml", "objective": "stsb_dev",
               "objective_description": "STS-B dev Spearman x100", "budget": "cpu", "model": "minilm",
               "study_name": experiment, "optuna_storage": storage,
               "baseline": {"objective": BASELINE, "eval_pooler": "cls"},
               "published": {"family": published[1], "params": published[2], "config_key": _key(*published[1:3])},
               "searched_params": {family: list(params) for _, family, params, _, _ in trials},
               "trials": summary_trials, **summary_extra}
    client.log_dict(parent, summary, "search_summary.json")
    client.set_terminated(parent)
    return parent


WINNER_KEY, PUBLISHED_KEY = _key("focal", {"tau": ODD_TAU, "m": 0.43}), _key("focal", {"tau": 0.07, "m": 0.3})
WINNER_TEST = {"STS12": {"mean": 61.234, "std": 0.3, "n": 3}, "STS13": {"mean": 74.1, "std": 0.21, "n": 3},
               "STS14": {"mean": 68.0, "std": 0.4, "n": 3}, "STS15": {"mean": 78.3, "std": 0.1, "n": 3},
               "STS16": {"mean": 77.0, "std": 0.2, "n": 3}, "STSBenchmark": {"mean": 80.1, "std": 0.3, "n": 3},
               "SICKRelatedness": {"mean": 70.2, "std": 0.5, "n": 3}, "avg": {"mean": 72.7, "std": 0.2, "n": 3}}
PUBLISHED_TEST = {task: {**figure, "mean": figure["mean"] - 0.5} for task, figure in WINNER_TEST.items()}
UNTOUCHED_TEST = {task: figure["mean"] - 2.0 for task, figure in WINNER_TEST.items()}
VERDICT = ("Method: chosen by the search stage on dev, judged on fresh seeds. The winner is not distinguishable from "
           "the published point on the STS-B dev Spearman x100 (dev, judging seeds).")


def _judged(key: str, params: dict, values: list, mean: float, std: float, test: dict, **flags) -> dict:
    return {"config_key": key, "family": "focal", "params": params, "choose": None, **flags,
            "judge": {"seeds": [43, 44, 45], "values": values, "planned": 3, "n": 3, "count_text": "n = 3 of 3",
                      "short": False, "dev": {"mean": mean, "std": std, "n": 3, "df": 2, "low": mean - 0.6,
                                              "high": mean + 0.6}, "test": test}}


FOCAL_SUMMARY = {
    "decision": {
        "method": {"budget": "cpu", "top_k": 1, "choose_seeds": 0, "judge_seeds": 3,
                   "seeds": {"search": 42, "choose": [], "judge": [43, 44, 45]}},
        "configs": [
            _judged(WINNER_KEY, {"tau": ODD_TAU, "m": 0.43}, [81.56, 81.1, 81.3], 81.32, 0.2306, WINNER_TEST,
                    search_rank=1, is_published=False, is_winner=True),
            _judged(PUBLISHED_KEY, {"tau": 0.07, "m": 0.3}, [81.51, 80.8, 81.13], 81.1467, 0.3553, PUBLISHED_TEST,
                    search_rank=None, is_published=True, is_winner=False)],
        "versus_published": {"mean": 0.1733, "std": 0.31, "n": 3, "df": 2, "low": -0.6, "high": 0.9467},
        "versus_published_dev": {"mean": 0.1733, "std": 0.31, "n": 3, "df": 2, "low": -0.6, "high": 0.9467},
        "seed_noise": 0.3, "seed_noise_df": 4, "detectable": 1.9, "detectable_n": 3},
    "verdict": VERDICT,
    "winner": {"config_key": WINNER_KEY, "family": "focal", "params": {"tau": ODD_TAU, "m": 0.43}, "mean": 81.32,
               "std": 0.2306, "n": 3, "is_published": False, "beats_published": False, "beats_baseline": True,
               "sentence": VERDICT},
    "test_table": {
        "rows": [{"label": "untouched model", "model": "sentence-transformers/all-MiniLM-L6-v2", "corpus": "-",
                  "steps": 0, "n": 1,
                  "figures": {t: {"mean": v, "std": None, "n": 1} for t, v in UNTOUCHED_TEST.items()}},
                 {"label": "published point", "model": "sentence-transformers/all-MiniLM-L6-v2",
                  "corpus": "wiki-sample", "steps": 16, "n": 3, "figures": PUBLISHED_TEST},
                 {"label": "winner", "model": "sentence-transformers/all-MiniLM-L6-v2", "corpus": "wiki-sample",
                  "steps": 16, "n": 3, "figures": WINNER_TEST}],
        "seeds": "judging seeds 43-45",
        "winner_minus_published": {"avg": {"mean": 0.5, "std": 0.1, "n": 3, "df": 2, "low": 0.25, "high": 0.75}}},
    "paper": {"family": "focal", "model": "bert-base-uncased", "corpus": "wiki1m", "figures": FOCAL_PAPER,
              "comparable": False,
              "caption": "Reported by the paper for focal: bert-base-uncased trained on wiki1m. Not comparable."},
    "seed_noise_std": 0.3,
}
ALL_SUMMARY = {  # no choosing or judging (--no-confirm): one seed per configuration, no seed-noise estimate
    "decision": None, "test_table": None, "paper": None, "seed_noise_std": None,
    "verdict": "No confirmation stage ran (--no-confirm): the answer is the search stage's first-ranked configuration.",
    "winner": {"family": "focal", "params": {"tau": 0.04, "m": 0.5}, "judged": False},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two searches recorded in one MLflow store and one Optuna storage, as on a researcher's machine."""
    tmp = tmp_path_factory.mktemp("search")
    tracking_uri, storage = f"sqlite:///{tmp}/mlflow.db", f"sqlite:///{tmp}/optuna.db"
    parents = {
        FOCAL: _record_search(tracking_uri, storage, tmp / "artifacts", FOCAL, FOCAL_TRIALS, conditional=False,
                              summary_extra=FOCAL_SUMMARY),
        ALL: _record_search(tracking_uri, storage, tmp / "artifacts", ALL, ALL_TRIALS, conditional=True,
                            summary_extra=ALL_SUMMARY)}
    return {"tmp": tmp, "tracking_uri": tracking_uri, "storage": storage, "parents": parents}


@pytest.fixture(scope="module")
def focal_report(store):
    return report.write_report(store["tracking_uri"], FOCAL, store["tmp"] / "focal-report")


@pytest.fixture(scope="module")
def all_report(store):
    return report.write_report(store["tracking_uri"], ALL, store["tmp"] / "all-report")


def _cells(page: str) -> list[list[str]]:
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page)]
    return [row for row in rows if row]  # not the header rows


def _search_row(page: str, trial_id: str) -> dict[str, str]:
    headers = re.findall(r"<th>(.*?)</th>", page.split("search trials, best first")[1].split("</thead>")[0])
    row = next(c for c in _cells(page) if len(c) == len(headers) and c[1] == trial_id)
    return dict(zip(headers, row))


def test_page_shows_references_tables_and_plots(focal_report):
    page = focal_report.html_path.read_text()
    assert focal_report.html_path.name == "index.html"
    assert "79.73" in page and "tau=0.07, m=0.3" in page  # the baseline and the published point
    markup = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # the figures' data hold values in full
    assert "0.07077" in markup and str(ODD_TAU) not in markup
    names = {p.name for p in focal_report.images}
    assert {"optimization_history.png", "dev_curves.png", "importances.png", "slice.png",
            "parallel_coordinates.png", "contour.png"} <= names
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in focal_report.images)
    # every plot is an interactive figure on the page too, its PNG beside it
    assert focal_report.figures == [f"plot-{p.stem}" for p in focal_report.images]
    assert all(f'id="{element}"' in page for element in focal_report.figures)
    assert focal_report.text.endswith(f"Report: {focal_report.html_path}")
    # one file that loads nothing: plotly.js inline once, no script or resource from elsewhere
    assert page.count("* plotly.js v") == 1 and "<script src" not in page
    assert not re.search(r'(src|href)="(?!data:)', markup)


def test_the_dev_curves_are_steps_from_mlflow_and_hover_to_the_trial(store):
    from raycse.reporting.plots import dev_curves

    record = load.load_search(store["tracking_uri"], FOCAL)
    curves = {c.trial_id: c for c in record.curves}
    assert set(curves) == {"f0", "f1", "f2", "f3", "f5"}  # f4 failed before its first evaluation
    assert curves["f3"].points == [(8, 81.0), (16, 80.2)] and curves["f3"].optuna_number == 3
    figure = dev_curves(record.curves, "STS-B dev").figure()
    trace = next(t for t in figure.data if t.name.startswith("f1 "))
    assert list(trace.x) == [8, 16] and figure.layout.xaxis.title.text == "training step"
    for words in ("trial f1</b> (Optuna #1)", "focal: tau=0.07077, m=0.43", "seed 42", "search", "finished"):
        assert words in trace.hovertemplate, words


def test_search_table_best_steps_come_from_the_objective_history(focal_report):
    page = focal_report.html_path.read_text()
    stopped = _search_row(page, "f2")
    assert (stopped["status"], stopped["best step"], stopped["best objective"]) == \
        ("stopped early (ASHA)", "16", "80.40")
    early_best = _search_row(page, "f3")
    assert (early_best["best step"], early_best["last eval step"], early_best["best objective"]) == ("8", "16", "81.00")
    assert _search_row(page, "f4")["best objective"] == "-"
    assert _search_row(page, "f0")["point"] == "published"
    assert _search_row(page, "f1")["optuna #"] == "1"  # joined to the study through ray_trial_id


def test_judging_verdict_and_test_tasks(focal_report):
    page = focal_report.html_path.read_text()
    winner = next(c for c in _cells(page) if c[:2] == ["winner", "focal"])
    # a mean over seeds with its spread, and a difference with its interval, n and df
    assert winner[2:] == ["tau=0.07077, m=0.43", "43-45", "81.32 ± 0.23 (n = 3)", "n = 3 of 3",
                          "+0.17, 95% interval [-0.60, +0.95], n = 3, df = 2"]
    published = next(c for c in _cells(page) if c[:2] == ["published point", "focal"])
    assert published[4] == "81.15 ± 0.36 (n = 3)"
    assert VERDICT in page
    rows = {c[0].split(" (")[0]: c for c in _cells(page) if c and c[0].split(" (")[0] in
            ("untouched model", "published point", "winner", "winner - published")}
    assert rows["winner"][1] == "61.23 ± 0.30" and rows["winner"][-1] == "72.70 ± 0.20"
    assert "wiki-sample, 16 steps, n = 3" in rows["winner"][0]  # each row names model, corpus, steps and n
    assert rows["untouched model"][-1] == "70.70" and rows["winner - published"][-1] == "+0.50"
    assert "which scores 81.15 (mean of 3 judging seeds)" in page
    # the paper's row only under its caption, which says it is not comparable
    assert "Not comparable." in page and "Avg. 77.33 ± 0.08" in page


def test_few_trials_warn_on_the_importances(focal_report):
    page = focal_report.html_path.read_text()
    assert "only 5 search trials completed" in page
    assert any("only 5 search trials completed" in w for w in focal_report.warnings)
    assert set(focal_report.importances) == {"tau", "m"}


def test_importance_warning_rule():
    spread_ok = [80.0 + 0.5 * i for i in range(12)]  # span 5.5
    assert tables.importance_warnings(spread_ok, seed_noise_std=0.4) == []
    [narrow] = tables.importance_warnings([80.0 + 0.05 * i for i in range(12)], seed_noise_std=0.4)
    assert "span 0.55, less than 2 x the seed noise (0.4)" in narrow
    assert tables.importance_warnings(spread_ok, seed_noise_std=None) == []  # the page says once that it is unknown
    [few] = tables.importance_warnings(spread_ok[:9], seed_noise_std=None)
    assert few.startswith("only 9 search trials completed")


def test_log_axes_are_labelled_in_plain_numbers_and_other_axes_keep_their_labels():
    """A log axis (a loguniform parameter: tau, lr) says 0.02, 0.1, 3e-05 as a space file does, where matplotlib
    wrote each tick as mathtext; the ticks labelled are matplotlib's choice as before, and a linear axis is left."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from raycse.reporting.plots import plain_log_ticks

    figure, (tau, lr) = plt.subplots(1, 2)
    tau.set_xscale("log")
    tau.plot([0.02, 0.2], [80.0, 81.0])
    lr.set_xscale("log")
    lr.plot([1e-5, 1e-3], [80.0, 81.0])
    figure.canvas.draw()
    mathtext = [t.get_text() for t in (*tau.get_xticklabels(), *tau.get_xticklabels(minor=True))]
    linear = [t.get_text() for t in tau.get_yticklabels()]
    plain_log_ticks(figure)
    figure.canvas.draw()
    major = [t.get_text() for t in tau.get_xticklabels()]
    minor = [t.get_text() for t in tau.get_xticklabels(minor=True)]
    assert any("$" in text for text in mathtext)  # what matplotlib wrote by itself
    assert "0.1" in major and "0.02" in minor and "0.05" not in minor  # its choice of labelled ticks kept
    assert not any("$" in text for text in major + minor)
    assert "1e\N{MINUS SIGN}05" in [t.get_text() for t in lr.get_xticklabels()]
    assert [t.get_text() for t in tau.get_yticklabels()] == linear
    plt.close(figure)


def test_conditional_space_weighs_the_family_and_plots_each_family(all_report):
    assert "loss" in all_report.importances
    names = {p.name for p in all_report.images}
    assert {"slice_loss.png", "family_focal_slice.png", "family_focal_parallel_coordinates.png",
            "family_focal_contour.png", "family_dclr_contour.png", "family_dclr_importances.png"} <= names
    page = all_report.html_path.read_text()
    # simcse searched one parameter: no contour, and the page says why
    assert "needs 2 numeric parameters that took 2 or more values, found 1" in page
    assert page.count("the choosing and judging blocks measured no seed noise") == 1
    assert ("focal: importances: only 3 search trials completed (fewer than 10): "
            "the importances are little more than a guess") in all_report.warnings
    assert _search_row(page, "a2")["loss"] == "dclr" and _search_row(page, "a2")["phi"] == "0.9"


def test_refused_plots_become_notes(tmp_path):
    tracking_uri, storage = f"sqlite:///{tmp_path}/mlflow.db", f"sqlite:///{tmp_path}/optuna.db"
    one_scored = [FOCAL_TRIALS[0], FOCAL_TRIALS[4]]  # one completed trial, one failed
    _record_search(tracking_uri, storage, tmp_path / "artifacts", FOCAL, one_scored, conditional=False,
                   summary_extra=ALL_SUMMARY)
    result = report.write_report(tracking_uri, FOCAL, tmp_path / "report")
    page = result.html_path.read_text()
    assert "Parameter importances (fANOVA, seed 0): not drawn (1 completed trial: fANOVA needs at least 2)" in page
    assert "Contour of the two most important numeric parameters: not drawn" in page
    assert result.importances == {}
    assert "optimization_history.png" in {p.name for p in result.images}


def test_a_value_space_that_changed_mid_search_is_a_note(tmp_path):
    """A search resumed with an edited space file: tau's range differs between trials and fANOVA gives up."""
    import optuna
    from optuna.distributions import FloatDistribution

    from raycse.reporting.page import render_report

    study = optuna.create_study(direction="maximize")
    for number, (tau, value) in enumerate([(0.05, 80.0), (0.1, 81.0), (0.07, 80.5), (0.03, 79.0)]):
        study.add_trial(optuna.trial.create_trial(
            params={"tau": tau, "m": 0.3}, value=value, intermediate_values={1: value},
            distributions={"tau": FloatDistribution(0.01, 0.2 if number < 2 else 0.3, log=True),
                           "m": FloatDistribution(0.0, 0.6)}))
    summary = {"experiment": FOCAL, "baseline": {"objective": BASELINE}, "searched_params": {"focal": ["tau", "m"]},
               "seed_noise_std": 0.3}
    record = load.SearchRecord(experiment=FOCAL, parent_run_id="-", summary=summary, study=study,
                                 optuna_storage="in memory", rows=[])
    page = render_report(record, tmp_path)
    assert "Parameter importances (fANOVA, seed 0): not drawn (Optuna refused" in page.html
    assert "optimization_history.png" in {p.name for p in page.images}


def test_report_experiment_logs_the_page_on_the_parent_run(store):
    from mlflow.tracking import MlflowClient

    text = report.report_experiment(store["tracking_uri"], FOCAL, store["tmp"] / "cli-report")
    assert "Verdict: Method: chosen by the search stage" in text and "0.07077" in text
    client = MlflowClient(tracking_uri=store["tracking_uri"])
    logged = [a.path for a in client.list_artifacts(store["parents"][FOCAL], "report")]
    assert logged == ["report/index.html", "report/plots"]
    plots = {a.path for a in client.list_artifacts(store["parents"][FOCAL], "report/plots")}
    assert {"report/plots/dev_curves.png", "report/plots/contour.png"} <= plots  # what MLflow's viewer can show
    downloaded = client.download_artifacts(store["parents"][FOCAL], "report/index.html", str(store["tmp"]))
    assert Path(downloaded).read_text() == (store["tmp"] / "cli-report" / "index.html").read_text()


def test_cli_md_says_where_the_report_writes_its_plots_and_where_it_logs_them(focal_report):
    """The PNGs lie beside the page (`report/*.png`), and are logged under the parent run's `report/plots/`
    (test_report_experiment_logs_the_page_on_the_parent_run): the page of every command (docs/cli.md) says both,
    each where it is."""
    assert focal_report.images and {p.parent for p in focal_report.images} == {focal_report.html_path.parent}
    report_md = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    said = " ".join(report_md.split("- **The report page**", 1)[1].split("\n- **", 1)[0].split())
    assert "each plot as a PNG beside it (`report/*.png`)" in said
    assert "the PNGs under `report/plots/` for MLflow's artifact view" in said  # as report_experiment logs them


def test_the_page_names_the_optuna_store_as_the_user_does_not_by_this_machines_path(tmp_path, monkeypatch):
    """A search run in its folder keeps `sqlite:////that/folder/optuna.db` (absolute, as trials run elsewhere); its
    page, written from that folder, names it `sqlite:///optuna.db`. A store outside it keeps its own path."""
    import optuna

    from raycse.reporting.page import render_report
    from raycse.tracking.stores import shown_store

    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"tau": 0.05}, value=80.0, intermediate_values={1: 80.0},
                                              distributions={"tau": optuna.distributions.FloatDistribution(
                                                  0.01, 0.2, log=True)}))  # one trial: few plots to draw
    summary = {"experiment": FOCAL, "study_name": FOCAL, "baseline": {"objective": BASELINE},
               "searched_params": {"focal": ["tau"]}}
    folder = tmp_path / "search"
    (folder / "report").mkdir(parents=True)
    monkeypatch.chdir(folder)

    record = load.SearchRecord(experiment=FOCAL, parent_run_id="-", summary=summary, study=study,
                                 optuna_storage=f"sqlite:///{folder.resolve()}/optuna.db", rows=[])
    page = render_report(record, folder / "report").html
    assert next(row for row in _cells(page) if row[0] == "Optuna study")[1] == f"{FOCAL} in sqlite:///optuna.db"
    assert str(folder.resolve()) not in page
    elsewhere = f"sqlite:///{tmp_path.resolve()}/elsewhere.db"
    assert shown_store(elsewhere) == elsewhere  # its own path, the one the user gave
    assert shown_store("postgresql://raycse:secret@db/optuna") == "postgresql://raycse:***@db/optuna"


def test_the_text_summary_from_search_summary_json_alone(store):
    """What the end of `raycse search` prints: the same tables, from the summary it just wrote."""
    text = tables.format_search_summary(load.load_search(store["tracking_uri"], FOCAL).summary)
    stopped = next(line.split() for line in text.splitlines() if line.split()[:2] == ["-", "f2"])
    assert stopped[2:7] == ["0.15", "0.05", "80.40", "16", "16"]  # tau, m, best objective, best step, last eval step
    assert "Verdict: Method: chosen by the search stage on dev" in text
    assert "Judging (the winner and the published point on further fresh seeds):" in text
    assert "+0.17, 95% interval [-0.60, +0.95], n = 3, df = 2" in text
    assert "winner - published on the test average (judging seeds 43-45): +0.50, 95% interval" in text
    assert "bert-base-uncased trained on wiki1m. Not comparable." in text


def test_errors_name_the_culprit(store, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = store["tracking_uri"]
    with pytest.raises(ConfigError, match="no MLflow experiment 'raycse-nope'"):
        report.write_report(uri, "raycse-nope", tmp_path)
    client = MlflowClient(tracking_uri=uri)
    plain = client.create_experiment("plain-runs", artifact_location=str(tmp_path / "plain"))
    client.create_run(plain)
    with pytest.raises(ConfigError, match="'plain-runs' has no search parent run"):
        report.write_report(uri, "plain-runs", tmp_path)
    crashed = client.create_experiment("crashed-search", artifact_location=str(tmp_path / "crashed"))
    client.create_run(crashed, tags={"raycse.search": "crashed-search"})
    with pytest.raises(ConfigError, match="has no search_summary.json"):
        report.write_report(uri, "crashed-search", tmp_path)
    missing = f"sqlite:///{tmp_path}/moved/optuna.db"
    with pytest.raises(ConfigError, match=f"Optuna storage {re.escape(missing)} does not exist"):
        report.write_report(uri, FOCAL, tmp_path, optuna_storage=missing)
    assert not (tmp_path / "moved").exists()
    import optuna

    other = f"sqlite:///{tmp_path}/other.db"
    optuna.create_study(study_name="someone-else", storage=other)
    with pytest.raises(ConfigError, match=f"no Optuna study '{FOCAL}' in .*other.db \\(studies: someone-else\\)"):
        report.write_report(uri, FOCAL, tmp_path, optuna_storage=other)


def test_the_latest_search_is_reported(store, tmp_path):
    """A newer parent run without a summary (a search still running, or crashed) is the one reported, and says so."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store["tracking_uri"])
    experiment_id = client.get_experiment_by_name(ALL).experiment_id
    newer = client.create_run(experiment_id, tags={"raycse.search": ALL}).info.run_id
    try:
        with pytest.raises(ConfigError, match=f"parent run {newer}"):
            report.write_report(store["tracking_uri"], ALL, tmp_path)
    finally:
        client.delete_run(newer)


def test_the_examples_of_status_and_report_on_a_finished_search(store, tmp_path, monkeypatch, capsys):
    """raycse.status's and raycse.report's docstring examples as a user pastes them after raycse.search("focal"), here
    on the search this module recorded: its store is the default one ($MLFLOW_TRACKING_URI) and the working directory
    a fresh one. (raycse.load's needs a summary this module's predates: tests/test_api_examples.py runs it.)"""
    from api_examples import run_example

    import raycse

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["tracking_uri"])
    now = run_example(raycse.status)["now"]
    assert now.stage == "finished" and now.done["search"] == len(FOCAL_TRIALS) and not now.running
    run_example(raycse.report)
    printed = capsys.readouterr().out
    assert "Winner (focal)" in printed and printed.rstrip().endswith("Report: report/index.html")
    assert (tmp_path / "report" / "index.html").is_file()


# ------------------------------------------------------------------------------------ headless Chromium
class DevTools:
    """Headless Chromium driven over the DevTools protocol on a pipe (stdlib only).

    With --remote-debugging-pipe Chromium reads commands on fd 3 and writes replies and events on fd 4,
    each a JSON message ended by a NUL byte.
    """

    def __init__(self, binary: str, profile: Path):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def wire_fds():  # in the child, before exec: the pipe ends must sit exactly at fds 3 and 4
            os.dup2(commands_read, 3)
            os.dup2(replies_write, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=wire_fds, pass_fds=(3, 4))
        os.close(commands_read)
        os.close(replies_write)
        self._buffer, self._next_id, self.events = b"", 0, []

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._replies], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._replies, 1 << 20) if ready else b""
            if not chunk:
                raise TimeoutError("Chromium sent nothing (exited, or took over the deadline)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self._next_id += 1
        command = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        os.write(self._commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def wait_for(self, event: str, session: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event and e.get("sessionId") == session for e in self.events):
            self.events.append(self._message(deadline))

    def open(self, url: str) -> str:
        """Load a page in a new tab, with its console and log recorded; return the tab's session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)  # fires once every image has loaded or failed
        return session

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (a resource that failed to load)."""
        found = []
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"].get("text", "exception"))
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif event.get("method") == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        """Every URL the pages asked for."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def figure_marks(self, session: str) -> dict[str, int]:
        """For each plotly figure on the page, how many marks its SVG holds (points, lines, bars, contours)."""
        marks = ".scatterlayer path, .barlayer path, .contourlayer path, .heatmaplayer image"
        expression = (f"Object.fromEntries(Array.from(document.querySelectorAll('.plotly-graph-div'), "
                      f"figure => [figure.id, figure.querySelectorAll('svg.main-svg').length ? "
                      f"figure.querySelectorAll('{marks}').length : -1]))")
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        return result["result"]["value"]

    def image_widths(self, session: str) -> list[int]:
        result = self.send("Runtime.evaluate", {"expression": "Array.from(document.images, i => i.naturalWidth)",
                                                "returnByValue": True}, session=session)
        return result["result"]["value"]

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (TimeoutError, OSError, RuntimeError):
            pass  # it may close the pipe before it replies
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._replies)


@pytest.fixture
def chromium(tmp_path):
    binary = shutil.which("chromium")
    if binary is None:
        unavailable("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    browser = DevTools(binary, tmp_path / "chromium-profile")
    yield browser
    browser.close()


@pytest.mark.slow  # starts Chromium
def test_the_browser_checker_sees_empty_figures_console_errors_and_requests(chromium, tmp_path):
    """The checker below can fail: an empty figure, a console error and a request for another file are caught."""
    from raycse.reporting.plots import plotly_script

    page = tmp_path / "broken.html"
    page.write_text(f'<!DOCTYPE html><html><head>{plotly_script()}</head><body><img src="elsewhere.png" alt="x">'
                    '<div id="empty" class="plotly-graph-div"></div><div id="drawn" class="plotly-graph-div"></div>'
                    '<script>Plotly.newPlot("empty", []); Plotly.newPlot("drawn", [{x: [1, 2], y: [3, 4]}]);'
                    'console.error("deliberate");</script></body></html>')
    session = chromium.open(page.as_uri())
    assert chromium.figure_marks(session) == {"empty": 0, "drawn": 3}  # a line and its two points
    assert any("deliberate" in e for e in chromium.errors())
    assert any(url.endswith("/elsewhere.png") for url in chromium.requests())


@pytest.mark.slow  # starts Chromium
def test_the_report_renders_every_figure_in_headless_chromium(chromium, focal_report, all_report):
    for result in (focal_report, all_report):
        session = chromium.open(result.html_path.as_uri())
        marks = chromium.figure_marks(session)
        assert list(marks) == result.figures and len(marks) >= 6
        assert all(count > 0 for count in marks.values()), marks
    assert chromium.errors() == []
    # offline: nothing but the pages themselves (and the data URIs plotly draws contours with)
    assert {url.split(":", 1)[0] for url in chromium.requests()} <= {"file", "data"}
