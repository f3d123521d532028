"""Report: report/index.html, built from the summary (with the timings up to here) and the Optuna study, logged on
the parent run. A report is a view of the results, never a reason to lose them: a failure is one line."""
from __future__ import annotations

from pathlib import Path

from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.summary import SUMMARY_FILE


class ReportStage(Stage):
    name = "report"
    needs = ("tracker", "parent_run_id", "outcome", "optuna_storage")

    def run(self, state: SearchState) -> None:
        outcome = state.outcome
        outcome.summary["timings"] = state.timings()
        try:
            from raycse.reporting import log_report, write_report

            state.tracker.log_dict(outcome.parent_run_id, outcome.summary, SUMMARY_FILE)
            report = write_report(state.tracker.tracking_uri, outcome.experiment, Path("report"), state.optuna_storage)
            log_report(state.tracker, outcome.parent_run_id, report.html_path, report.images)
            outcome.summary["report"] = str(report.html_path)
        except Exception as err:  # noqa: BLE001 - a report is a view of the results, never a reason to lose them
            state.log(f"The report page could not be written: {type(err).__name__}: {err}")
