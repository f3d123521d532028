"""`raycse report EXPERIMENT`: the tables and the one-page HTML report of a search.

    tables.py  the tables and the printed summary, from the summary file and the trial rows (no I/O)
    compare_table.py  what `raycse compare` prints, from compare_summary.json (no I/O)
    card_facts.py  what the model card of `raycse export` says, from the summary file (no I/O)
    load.py    reading a search back through the Tracker: summary, trial rows, the Optuna study
    page.py    the HTML page: the tables and the plots
    plots.py   the plots: interactive plotly figures on the page, matplotlib PNGs beside it
    answer.py  the answer first: the lines that open the printed answer, the page and the model card
    status.py  `raycse status`: where the latest search stands, read from MLflow alone

May import: tracking, settings (how a paper's reported row is shown) and the leaves; never the driver (a search's
files are read, not its code) or the commands.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from raycse.reporting.load import SearchRecord, load_search
from raycse.reporting.page import render_report
from raycse.reporting.tables import format_search_summary
from raycse.tracking.tracker import Tracker

REPORT_ARTIFACT_DIR = "report"


@dataclass
class ReportResult:
    html_path: Path
    images: list[Path]  # the page's plots as PNG files, written beside it
    figures: list[str]  # the element ids of the page's interactive figures
    text: str  # what `raycse report` prints
    warnings: list[str]  # importance caveats and the plots Optuna could not draw, as on the page
    importances: dict[str, float]  # of the whole study's parameters (seeded fANOVA); empty when not computable
    parent_run_id: str


def write_report(tracking_uri: str, experiment: str, out_dir: Path, optuna_storage: str | None = None,
                 record: SearchRecord | None = None) -> ReportResult:
    """Write `out_dir/index.html` (self-contained: plotly.js and the figures are inline) and the plots' PNGs for
    the experiment's latest search (`record`, when it was loaded already)."""
    record = record or load_search(tracking_uri, experiment, optuna_storage)
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
    return ReportResult(html_path=html_path, images=page.images, figures=page.figures, text="\n".join(lines),
                        warnings=page.warnings, importances=page.importances, parent_run_id=record.parent_run_id)


def log_report(tracker: Tracker, parent_run_id: str, html_path: Path, images: list[Path] = ()) -> None:
    """The page becomes the parent run's `report/index.html` artifact, and its plots `report/plots/*.png`: MLflow's
    artifact view shows images, but may not run the page's script."""
    tracker.log_artifact(parent_run_id, str(html_path), REPORT_ARTIFACT_DIR)
    if images:
        with tempfile.TemporaryDirectory() as folder:  # only this page's images, not others left in its directory
            for image in images:
                shutil.copy(image, folder)
            tracker.log_artifacts(parent_run_id, folder, f"{REPORT_ARTIFACT_DIR}/plots")


def report_experiment(tracking_uri: str, experiment: str, out_dir: Path, optuna_storage: str | None = None,
                      record: SearchRecord | None = None) -> str:
    """`raycse report`: write the page, log it on the parent run, return the text to print."""
    result = write_report(tracking_uri, experiment, out_dir, optuna_storage, record)
    log_report(Tracker.existing(tracking_uri, experiment), result.parent_run_id, result.html_path, result.images)
    return result.text
