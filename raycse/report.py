"""Tables and plots of a search: the end-of-search summary and `raycse report EXPERIMENT`.

Reads only what the search wrote (the summary object, or the MLflow experiment), so a report can be made
at any time after a search, on any machine that reaches the tracking store.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError

PAPER_PARAMS = ("tau", "m", "lambda", "tau_dcl", "phi", "k", "lambda_bt", "margin", "hard_neg_weight", "lr", "batch_size")
TEST_COLUMNS = (("STS12", "STS12"), ("STS13", "STS13"), ("STS14", "STS14"), ("STS15", "STS15"), ("STS16", "STS16"),
                ("STSBenchmark", "STS-B"), ("SICKRelatedness", "SICK-R"), ("avg", "Avg."))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 0.01 or abs(value) >= 1000 else f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.rjust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def test_row_table(rows: dict[str, dict[str, float]]) -> str:
    """Rows like the papers' Table 2: the seven STS tasks and their average."""
    headers = [""] + [label for _, label in TEST_COLUMNS]
    def cell(value):
        return None if value is None else f"{float(value):.2f}"

    return table(headers, [[name] + [cell(figures.get(key)) for key, _ in TEST_COLUMNS] for name, figures in rows.items()])


def format_search_summary(summary, space) -> str:
    params = sorted({p for t in summary.trials for p in t.params})
    rows = [[t.trial_id, t.family, *[t.params.get(p) for p in params],
             round(t.best_stsb_dev, 2) if t.best_stsb_dev is not None else None, t.status, t.steps]
            for t in sorted(summary.trials, key=lambda t: -(t.best_stsb_dev or -1e9))]
    out = [f"Search {summary.experiment!r} ({summary.budget} budget, {summary.wall_seconds:.0f} s): "
           f"{len(summary.trials)} trials", table(["trial", "loss", *params, "best dev", "status", "steps"], rows)]
    if summary.best is None:
        return "\n".join(out + ["No trial finished with a checkpoint."])
    best_params = {k: v for k, v in summary.best_config["hparams"].items()}
    out.append(f"\nBest: {summary.best.family} {best_params} lr={summary.best_config['lr']} "
               f"batch={summary.best_config['batch_size']} -> STS-B dev {summary.best.best_stsb_dev:.2f}")
    if summary.best_test:
        rows = {"raycse best": summary.best_test}
        paper = (space.paper or {}).get(summary.best.family)
        if paper:
            rows["paper (reported, BERT-base)"] = paper
        out.append(test_row_table(rows))
    out.append(f"Best checkpoint: {summary.best_checkpoint}")
    out.append(f"MLflow: parent run {summary.parent_run_id}, registered model {summary.experiment!r} "
               f"version {summary.model_version}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------- raycse report
def load_trials(tracking_uri: str, experiment: str) -> tuple[list[dict], Any]:
    from mlflow.tracking import MlflowClient

    from raycse.tracking import SEARCH_TAG

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = ", ".join(e.name for e in client.search_experiments()) or "none"
        raise ConfigError(f"no MLflow experiment {experiment!r} at {tracking_uri} (experiments: {names})")
    runs = client.search_runs([exp.experiment_id], max_results=10000)
    trials = []
    for run in runs:
        if SEARCH_TAG in run.data.tags:
            continue  # the parent run
        curve = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "stsb_dev")]
        trials.append({"run_id": run.info.run_id, "name": run.info.run_name, "params": run.data.params,
                       "metrics": run.data.metrics, "status": run.data.tags.get("raycse.status", run.info.status),
                       "curve": sorted(curve)})
    return trials, client


def _numeric(value: str) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def searched_params(trials: list[dict]) -> list[str]:
    """Paper-named parameters that vary across trials."""
    return [p for p in PAPER_PARAMS if len({t["params"].get(p) for t in trials if p in t["params"]}) > 1]


def parameter_importances(trials: list[dict], params: list[str]) -> dict[str, float]:
    """Optuna's fANOVA importances of the searched parameters for the best STS-B dev figure."""
    import optuna

    scored = [t for t in trials if "best_stsb_dev" in t["metrics"] and all(_numeric(t["params"].get(p)) is not None for p in params)]
    if len(scored) < 2 or not params:
        return {}
    distributions = {}
    for p in params:
        values = [_numeric(t["params"][p]) for t in scored]
        low, high = min(values), max(values)
        if low == high:
            continue
        distributions[p] = optuna.distributions.FloatDistribution(low, high, log=low > 0 and high / low > 10)
    if not distributions:
        return {}
    study = optuna.create_study(direction="maximize")
    for t in scored:
        study.add_trial(optuna.trial.create_trial(
            params={p: _numeric(t["params"][p]) for p in distributions}, distributions=distributions,
            value=t["metrics"]["best_stsb_dev"]))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.importance.get_param_importances(study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))


def write_plots(trials: list[dict], params: list[str], importances: dict[str, float], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in trials:
        if t["curve"]:
            steps, values = zip(*t["curve"])
            ax.plot(steps, values, marker="o", label=t["name"])
    ax.set(xlabel="step", ylabel="STS-B dev Spearman x100", title="Dev curve of every trial")
    if len(trials) <= 12:
        ax.legend(fontsize=7)
    written.append(out_dir / "dev_curves.png")
    fig.savefig(written[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    for p in params:
        pts = [(_numeric(t["params"].get(p)), t["metrics"].get("best_stsb_dev")) for t in trials]
        pts = [(x, y) for x, y in pts if x is not None and y is not None]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.scatter(*zip(*pts))
        ax.set(xlabel=p, ylabel="best STS-B dev", title=f"Objective against {p}")
        written.append(out_dir / f"objective_vs_{p}.png")
        fig.savefig(written[-1], dpi=120, bbox_inches="tight")
        plt.close(fig)
    if importances:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.barh(list(importances), list(importances.values()))
        ax.set(xlabel="fANOVA importance", title="Parameter importances")
        written.append(out_dir / "importances.png")
        fig.savefig(written[-1], dpi=120, bbox_inches="tight")
        plt.close(fig)
    return written


def report_experiment(tracking_uri: str, experiment: str, out_dir: Path) -> str:
    trials, _ = load_trials(tracking_uri, experiment)
    if not trials:
        raise ConfigError(f"experiment {experiment!r} has no trial runs")
    params = searched_params(trials)
    rows = [[t["name"], t["params"].get("loss_family", t["params"].get("loss")),
             *[t["params"].get(p) for p in params], t["metrics"].get("best_stsb_dev"), t["status"],
             int(t["metrics"].get("best_step", 0))] for t in sorted(trials, key=lambda t: -t["metrics"].get("best_stsb_dev", -1e9))]
    lines = [f"Experiment {experiment!r}: {len(trials)} trials",
             table(["trial", "loss", *params, "best dev", "status", "best step"], rows)]
    tested = [t for t in trials if "avg" in t["metrics"]]
    if tested:
        best = max(tested, key=lambda t: t["metrics"].get("best_stsb_dev", -1e9))
        lines.append(f"\nBest tested trial {best['name']}:")
        lines.append(test_row_table({best["name"]: best["metrics"]}))
    importances = parameter_importances(trials, params)
    if importances:
        lines.append("fANOVA importances: " + ", ".join(f"{k} {v:.2f}" for k, v in importances.items()))
    written = write_plots(trials, params, importances, out_dir)
    lines.append("Plots: " + ", ".join(str(p) for p in written))
    return "\n".join(lines)
