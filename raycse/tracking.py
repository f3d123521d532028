"""MLflow: one run per training, or a parent run per search with one child run per trial.

Everything goes through an explicit `MlflowClient` and run ids (no global "active run"), so the search
driver can write every trial's run from one process, one thread: SQLite is never written concurrently.
Parameters are logged under the papers' names (tau, m, lambda, tau_dcl, phi, k, ...).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
TRIAL_TAG = "raycse.trial_id"
SEARCH_TAG = "raycse.search"
STATUS_TAG = "raycse.status"
SECRET_MARKERS = ("password", "secret", "token", "key", "credential")


def resolve_tracking_uri(cli_value: str | None = None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else SQLite in the working directory."""
    uri = cli_value or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    if uri == DEFAULT_TRACKING_URI:
        uri = f"sqlite:///{Path('mlflow.db').resolve()}"  # absolute: trial processes run elsewhere
    if "://" not in uri and not uri.startswith("databricks"):
        raise ConfigError(f"--tracking-uri: {uri!r} is not a URI (e.g. sqlite:///mlflow.db or http://host:5000)")
    return uri


def training_params(config: dict[str, Any]) -> dict[str, Any]:
    """The parameters a run records: hyperparameters under their paper names, then the training settings."""
    params = {k: v for k, v in config.get("hparams", {}).items()}
    for key, value in config.items():
        if key == "hparams" or any(marker in key.lower() for marker in SECRET_MARKERS):
            continue
        params[key] = value
    return {k: ("" if v is None else v) for k, v in params.items()}


class Tracker:
    """A thin, explicit wrapper over MlflowClient for one experiment."""

    def __init__(self, tracking_uri: str, experiment: str):
        import mlflow
        from mlflow.tracking import MlflowClient

        self.tracking_uri = tracking_uri
        mlflow.set_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is not None and found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.experiment = experiment

    # runs
    def start_run(self, name: str, tags: dict[str, str] | None = None, parent_run_id: str | None = None) -> str:
        tags = dict(tags or {})
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        return self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id

    def find_run(self, tag: str, value: str) -> str | None:
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=1)
        return runs[0].info.run_id if runs else None

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def mark_orphans_killed(self, parent_run_id: str) -> int:
        """Children left RUNNING by a killed driver become KILLED (a resumed trial reopens its own)."""
        runs = self.client.search_runs([self.experiment_id],
                                       filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}' and attributes.status = 'RUNNING'")
        for run in runs:
            self.client.set_terminated(run.info.run_id, status="KILLED")
        return len(runs)

    # contents
    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        if new:
            self.client.log_batch(run_id, params=new)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(run_id, key, str(value)[:5000])

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str) -> None:
        self.client.log_artifacts(run_id, local_dir, artifact_path)

    def log_artifact(self, run_id: str, local_file: str) -> None:
        self.client.log_artifact(run_id, local_file)

    def register_model(self, run_id: str, artifact_path: str, name: str) -> str:
        """A model version whose source is the run's checkpoint artifact (HF + sentence-transformers files)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException:
            pass  # already registered: add a version
        source = f"{self.client.get_run(run_id).info.artifact_uri}/{artifact_path}"
        return self.client.create_model_version(name, source=source, run_id=run_id).version
