"""`raycse report EXPERIMENT`: the tables and the one-page HTML report of a search.

Everything comes from what `raycse search` recorded: the experiment's latest parent run (tag
`raycse.search`) and its `search_summary.json` artifact, its child runs (tags `raycse.stage`, ...; the
step-indexed metric `objective`), and the search's own Optuna study, loaded from the storage the summary
names - never rebuilt from MLflow parameters, so conditional spaces, log scales and the loss family are
exactly as the search declared them.
A report can be made at any time after a search, on any machine that reaches both stores.

Importances are seeded fANOVA. They are flagged as unreliable when fewer than `MIN_TRIALS_FOR_IMPORTANCE`
search trials completed, or when the completed trials' objectives span less than `NOISE_SPREAD_FACTOR`
times the seed noise that the confirmation stage measured: two runs of one configuration with different
seeds already differ by about sqrt(2) x that noise, and the range of a handful of pure-noise draws is
about 2-3 x it, so a smaller spread is what identical configurations would produce and the forest is
fitting noise.
"""
from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycse.errors import ConfigError, first_line

if TYPE_CHECKING:
    import optuna
    from mlflow.tracking import MlflowClient

SEARCH_TAG = "raycse.search"
SUMMARY_ARTIFACT = "search_summary.json"
REPORT_ARTIFACT_DIR = "report"
MIN_TRIALS_FOR_IMPORTANCE = 10
NOISE_SPREAD_FACTOR = 2.0
TEST_COLUMNS = (("STS12", "STS12"), ("STS13", "STS13"), ("STS14", "STS14"), ("STS15", "STS15"), ("STS16", "STS16"),
                ("STSBenchmark", "STS-B"), ("SICKRelatedness", "SICK-R"), ("avg", "Avg."))


# ------------------------------------------------------------------------------------------ formatting
def fmt(value: Any) -> str:
    """4 significant digits for floats (tau 0.07077, lr 3e-05, tau 0.07 as written); '-' for a missing value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def score(value: float | None) -> str:
    """A measured objective at 4 significant digits, trailing zeros kept so that a column reads 81.00, 81.56."""
    return "-" if value is None or not math.isfinite(value) else f"{value:#.4g}"


def fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={fmt(value)}" for name, value in params.items())


def mean_std(mean: float | None, std: float | None) -> str:
    # the spread as the papers print it: two decimals, like the STS figures it qualifies
    return score(mean) if std is None or mean is None else f"{score(mean)} ± {std:.2f}"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table, right-aligned, floats at 4 significant digits."""
    cells = [[v if isinstance(v, str) else fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.rjust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def sts_table_rows(rows: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Rows like the papers' Table 2: the seven STS tasks and their average, 2 decimals.

    A figure is a number or a {"mean", "std"} dict (std may be missing or null): the latter prints as mean ± std.
    """
    def cell(figure: Any) -> str:
        if isinstance(figure, dict):
            mean, std = figure.get("mean"), figure.get("std")
            return "-" if mean is None else f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"
        return "-" if figure is None else f"{float(figure):.2f}"

    headers = [""] + [label for _, label in TEST_COLUMNS]
    return headers, [[name] + [cell(figures.get(key)) for key, _ in TEST_COLUMNS] for name, figures in rows.items()]


def test_row_table(rows: dict[str, dict[str, Any]]) -> str:
    return table(*sts_table_rows(rows))


# ------------------------------------------------------------------------------------------ the tables
@dataclass
class TrialRow:
    """One search-stage trial as the search table shows it."""

    trial_id: str
    family: str
    params: dict[str, Any]
    best_objective: float | None
    best_step: int | None  # the training step of the best evaluation
    last_step: int | None  # the training step of the last evaluation (where ASHA stopped it, if it did)
    status: str
    seed: int | None
    is_published: bool = False
    optuna_number: int | None = None


def best_of_history(history: list[tuple[int, float]]) -> tuple[float, int] | None:
    """(best value, its step) of an objective history; the earliest step wins a tie."""
    finite = [(step, value) for step, value in history if math.isfinite(value)]
    if not finite:
        return None
    step, value = min(finite, key=lambda point: (-point[1], point[0]))
    return value, step


def search_rows_from_summary(summary: dict) -> list[TrialRow]:
    """The search table from `search_summary.json` alone (what the end of `raycse search` has at hand)."""
    published_key = (summary.get("published") or {}).get("config_key")
    return [TrialRow(trial_id=t["trial_id"], family=t["family"], params=t["params"],
                     best_objective=t.get("best_objective"), best_step=t.get("best_step"), last_step=t.get("steps"),
                     status=t.get("status", "-"), seed=t.get("seed"), optuna_number=t.get("optuna_number"),
                     is_published=published_key is not None and t.get("config_key") == published_key)
            for t in summary.get("trials", []) if t.get("stage", "search") == "search"]


def _param_value(text: str) -> Any:
    """MLflow keeps parameters as strings: give numbers back their type so they print at 4 digits."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def search_rows_from_runs(client: MlflowClient, experiment_id: str, parent_run_id: str,
                          summary: dict) -> list[TrialRow]:
    """The search table from the child runs: best value and best step straight from each `objective` history."""
    searched = summary.get("searched_params") or {}
    published_key = (summary.get("published") or {}).get("config_key")
    runs = client.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
                              max_results=50000)
    rows = []
    for run in runs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        if tags.get("raycse.stage") != "search":
            continue
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "objective"))
        best = best_of_history(history)
        if best is not None:
            best_objective, best_step = best
        else:  # a run that logged only its summary metrics
            best_objective = metrics.get("best_objective")
            best_step = int(metrics["best_step"]) if "best_step" in metrics else None
        family = params.get("loss_family", "-")
        rows.append(TrialRow(
            trial_id=tags.get("raycse.trial_id", run.info.run_name), family=family,
            params={name: _param_value(params[name]) for name in searched.get(family, []) if name in params},
            best_objective=best_objective, best_step=best_step, last_step=history[-1][0] if history else None,
            status=tags.get("raycse.status", run.info.status.lower()),
            seed=int(tags["raycse.seed"]) if tags.get("raycse.seed", "").isdigit() else None,
            is_published=published_key is not None and tags.get("raycse.config_key") == published_key))
    return rows


def search_table_rows(rows: list[TrialRow], searched_params: dict[str, list[str]]) -> tuple[list[str], list[list[Any]]]:
    """Best first; trials without a score (failed, diverged before scoring) last; one column per searched parameter."""
    families = list(dict.fromkeys(r.family for r in rows))
    names = list(dict.fromkeys(name for family_names in searched_params.values() for name in family_names))
    ordered = sorted(rows, key=lambda r: (r.best_objective is None, -(r.best_objective or 0.0)))
    headers = (["optuna #", "trial"] + (["loss"] if len(families) > 1 else []) + names
               + ["best objective", "best step", "last eval step", "seed", "status", "point"])
    cells = [[r.optuna_number, r.trial_id] + ([r.family] if len(families) > 1 else [])
             + [r.params.get(n) for n in names]
             + [score(r.best_objective), r.best_step, r.last_step, r.seed, r.status,
                "published" if r.is_published else ""]
             for r in ordered]
    return headers, cells


def confirmation_table_rows(summary: dict) -> tuple[list[str], list[list[Any]]]:
    """The confirmation stage: each configuration re-run over seeds, and its paired difference to the published
    point."""
    headers = ["search rank", "loss", "parameters", "n", "seeds", "mean ± std", "diff to published", "95% interval"]
    cells = []
    for c in summary.get("confirmation") or []:
        diff = c.get("diff_to_published")
        if c.get("is_published"):
            diff_cell, interval = "(published point)", ""
        elif diff is None:
            diff_cell, interval = "-", ""
        else:
            # differences of STS figures, in the figures' own unit: two decimals, signed
            diff_cell = f"{diff['mean']:+.2f}" + (f" ± {diff['std']:.2f}" if diff.get("std") is not None else "")
            interval = "-" if diff.get("low") is None else f"[{diff['low']:+.2f}, {diff['high']:+.2f}]"
        cells.append([c.get("search_rank"), c.get("family", "-"), fmt_params(c.get("params") or {}), c.get("n"),
                      ", ".join(str(s) for s in c.get("seeds") or []), mean_std(c.get("mean"), c.get("std")),
                      diff_cell, interval])
    return headers, cells


def winner_test_rows(summary: dict) -> dict[str, dict[str, Any]]:
    """The winner's seven test tasks (mean ± std over its seeds) beside the paper's row."""
    rows: dict[str, dict[str, Any]] = {}
    winner, figures = summary.get("winner") or {}, summary.get("winner_test") or {}
    if figures:
        n = max((f.get("n") or 0 for f in figures.values()), default=0)
        rows[f"raycse winner ({winner.get('family', '?')}, {n} seed{'s' if n != 1 else ''})"] = figures
    paper = summary.get("paper") or {}
    if paper.get("figures"):
        rows[paper.get("label") or f"paper ({paper.get('family', '?')})"] = paper["figures"]
    return rows


def published_reference(summary: dict, rows: list[TrialRow]) -> tuple[float, str] | None:
    """The published point's objective and where it comes from: its confirmed mean, else its search trial."""
    for c in summary.get("confirmation") or []:
        if c.get("is_published") and c.get("mean") is not None:
            return c["mean"], f"mean of {c.get('n')} seeds"
    scored = [r for r in rows if r.is_published and r.best_objective is not None]
    if scored:
        return scored[0].best_objective, "its search trial, one seed"
    return None


SEED_NOISE_UNKNOWN = ("the confirmation stage measured no seed noise (no configuration ran with 2 or more seeds), "
                      "so whether the trials differ by more than noise is unknown")


def importance_warnings(objectives: list[float], seed_noise_std: float | None) -> list[str]:
    """Why importances computed from these completed trials' objectives may be noise (see the module docstring).

    With no seed-noise estimate only the trial count is judged; the caller says once that the noise is unknown.
    """
    warnings = []
    if len(objectives) < MIN_TRIALS_FOR_IMPORTANCE:
        warnings.append(f"only {len(objectives)} search trial{'s' if len(objectives) != 1 else ''} completed "
                        f"(fewer than {MIN_TRIALS_FOR_IMPORTANCE}): the importances are little more than a guess")
    if seed_noise_std is not None and len(objectives) >= 2:
        spread = max(objectives) - min(objectives)
        if spread < NOISE_SPREAD_FACTOR * seed_noise_std:
            warnings.append(f"the completed trials' objectives span {fmt(spread)}, "
                            f"less than {fmt(NOISE_SPREAD_FACTOR)} x the seed noise ({fmt(seed_noise_std)}): "
                            "the importances rank noise")
    return warnings


def format_search_summary(summary: dict, rows: list[TrialRow] | None = None) -> str:
    """The text summary of a search: search table, confirmation, verdict, winner's test tasks beside the paper's row.

    `rows` defaults to the trials listed in the summary; `raycse report` passes the rows read from MLflow.
    """
    rows = search_rows_from_summary(summary) if rows is None else rows
    baseline = (summary.get("baseline") or {}).get("objective")
    published = summary.get("published") or {}
    reference = published_reference(summary, rows)
    objective = summary.get("objective_description") or summary.get("objective")
    scored_at = f" -> {score(reference[0])} ({reference[1]})" if reference else ""
    out = [f"Search {summary.get('experiment')!r} ({summary.get('budget')} budget, {summary.get('space_file')}): "
           + f"{len(rows)} search trials; objective: {objective}",
           f"Baseline (untouched model): {score(baseline)}",
           f"Published point: {published.get('family', '-')} {fmt_params(published.get('params') or {})}{scored_at}",
           "", table(*search_table_rows(rows, summary.get("searched_params") or {}))]
    if summary.get("confirmation"):
        out += ["", "Confirmation:", table(*confirmation_table_rows(summary))]
    verdict = (summary.get("winner") or {}).get("sentence")
    out += ["", f"Verdict: {verdict}" if verdict else "Verdict: no configuration was confirmed."]
    test_rows = winner_test_rows(summary)
    if test_rows:
        out += ["", test_row_table(test_rows)]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ loading
@dataclass
class SearchRecord:
    """Everything a report reads about one search."""

    experiment: str
    parent_run_id: str
    summary: dict
    study: optuna.Study
    optuna_storage: str
    rows: list[TrialRow]


def _latest_parent_run(client: MlflowClient, tracking_uri: str, experiment: str) -> tuple[str, str]:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = ", ".join(sorted(e.name for e in client.search_experiments())) or "none"
        raise ConfigError(f"no MLflow experiment {experiment!r} at {tracking_uri} (experiments: {names})")
    parents = client.search_runs([exp.experiment_id], filter_string=f"tags.`{SEARCH_TAG}` LIKE '%'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise ConfigError(f"experiment {experiment!r} has no search parent run (a run tagged {SEARCH_TAG}): "
                          f"was it written by `raycse search`?")
    return exp.experiment_id, parents[0].info.run_id


def _read_summary(client: MlflowClient, experiment: str, run_id: str) -> dict:
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, SUMMARY_ARTIFACT, tmp)
        except (MlflowException, OSError) as err:
            raise ConfigError(f"the latest search of {experiment!r} (parent run {run_id}) has no {SUMMARY_ARTIFACT} "
                              f"artifact: the search did not finish, or predates reports ({err})") from None
        return json.loads(Path(path).read_text())


def load_study(study_name: str, storage: str) -> optuna.Study:
    """The search's own study; a one-line ConfigError naming the storage or study when either is missing."""
    import optuna
    import sqlalchemy.exc

    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
        # checked first: Optuna would create an empty database file at a wrong path
        raise ConfigError(f"Optuna storage {storage} does not exist (pass --optuna-storage if the study was moved)")
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        names = ", ".join(optuna.get_all_study_names(storage)) or "none"
        raise ConfigError(f"no Optuna study {study_name!r} in {storage} (studies: {names})") from None
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, RuntimeError, ValueError) as err:
        raise ConfigError(f"cannot open Optuna storage {storage}: {first_line(err)}") from None


def load_search(tracking_uri: str, experiment: str, optuna_storage: str | None = None) -> SearchRecord:
    """The experiment's latest search: its summary, its child runs' table and its Optuna study."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id, parent_run_id = _latest_parent_run(client, tracking_uri, experiment)
    summary = _read_summary(client, experiment, parent_run_id)
    storage = optuna_storage or summary["optuna_storage"]
    study = load_study(summary["study_name"], storage)
    rows = search_rows_from_runs(client, experiment_id, parent_run_id, summary)
    numbers = {t.user_attrs["ray_trial_id"]: t.number for t in study.trials if "ray_trial_id" in t.user_attrs}
    for row in rows:
        row.optuna_number = numbers.get(row.trial_id)
    return SearchRecord(experiment=experiment, parent_run_id=parent_run_id, summary=summary, study=study,
                        optuna_storage=storage, rows=rows)


# ------------------------------------------------------------------------------------------ the report
@dataclass
class ReportResult:
    html_path: Path
    images: list[Path]  # the page's plots, also written beside it as PNG files
    text: str  # what `raycse report` prints
    warnings: list[str]  # importance caveats and the plots Optuna could not draw, as on the page
    importances: dict[str, float]  # of the whole study's parameters (seeded fANOVA); empty when not computable
    parent_run_id: str


def write_report(tracking_uri: str, experiment: str, out_dir: Path,
                 optuna_storage: str | None = None) -> ReportResult:
    """Write `out_dir/index.html` (self-contained: the plots are embedded) for the experiment's latest search."""
    from raycse.report_html import render_report

    record = load_search(tracking_uri, experiment, optuna_storage)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    page = render_report(record, out_dir)
    html_path = out_dir / "index.html"
    html_path.write_text(page.html, encoding="utf-8")
    lines = [format_search_summary(record.summary, record.rows), ""]
    if page.importances:
        lines.append("Importances (fANOVA, seed 0): " + ", ".join(f"{k} {v:.2f}" for k, v in page.importances.items()))
    lines += [f"Warning: {w}" for w in page.warnings]
    lines.append(f"Report: {html_path}")
    return ReportResult(html_path=html_path, images=page.images, text="\n".join(lines), warnings=page.warnings,
                        importances=page.importances, parent_run_id=record.parent_run_id)


def log_report(tracking_uri: str, parent_run_id: str, html_path: Path) -> None:
    """The page becomes the parent run's `report/index.html` artifact (one file: its images are embedded)."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=tracking_uri).log_artifact(parent_run_id, str(html_path), REPORT_ARTIFACT_DIR)


def report_experiment(tracking_uri: str, experiment: str, out_dir: Path, optuna_storage: str | None = None) -> str:
    """`raycse report`: write the page, log it on the parent run, return the text to print."""
    result = write_report(tracking_uri, experiment, out_dir, optuna_storage)
    log_report(tracking_uri, result.parent_run_id, result.html_path)
    return result.text


def format_timings(timings: dict[str, float]) -> str:
    """Where a search's wall clock went, by phase, and the trials' own time by kind (search.py's metrics)."""
    phases = [(k[len("time_"):-len("_s")], v) for k, v in timings.items()
              if k.startswith("time_") and k != "time_total_s"]
    trials = [(k[len("trial_"):-len("_s")], timings[k])
              for k in ("trial_startup_s", "trial_compile_s", "trial_train_s", "trial_eval_s", "trial_checkpoint_s")
              if k in timings]
    return (f"Time: {timings.get('time_total_s', 0.0):.0f} s in all ("
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases)
            + "). Trials, summed: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in trials)
            + f"; slot utilisation {100 * timings.get('slot_utilisation', 0.0):.0f}% of "
            f"{timings.get('concurrent_slots', 1):.0f} slot(s).")
