"""MLflow: one run per training, or a parent run per search with one child run per trial.

Everything goes through an explicit `MlflowClient` and run ids (no global "active run"), so the search
driver can write every trial's run from one process, one thread. Two searches (or a search and the MLflow UI)
may still share one SQLite store: SQLite then answers "database is locked" when a write meets another's
transaction beyond MLflow's busy timeout, and every call here retries such errors with backoff.
Parameters are logged under the papers' names (tau, m, lambda, tau_dcl, phi, k, ...).
"""
from __future__ import annotations

import functools
import math
import random
import time
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError
from raycse.records import LOST, PARENT_RUN_TAG, STATUS_TAG, TRIAL_TAG

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
SECRET_MARKERS = ("password", "secret", "token", "key", "credential")
LOCK_RETRIES = 8  # attempts beyond the first for a call that met a locked SQLite database (~1 minute in all)
_LOCKED = ("database is locked", "database table is locked", "sqlite3.OperationalError) unable to open")


def retry_when_locked(call):
    """Retry `call` with jittered exponential backoff while SQLite reports a lock held by another writer."""
    @functools.wraps(call)
    def wrapper(*args, **kwargs):
        for attempt in range(LOCK_RETRIES + 1):
            try:
                return call(*args, **kwargs)
            except Exception as err:  # MlflowException and SQLAlchemy's OperationalError both carry the text
                if attempt == LOCK_RETRIES or not any(marker in str(err) for marker in _LOCKED):
                    raise
                time.sleep(min(16.0, 0.25 * 2 ** attempt) * (0.5 + random.random()))
    return wrapper


def training_params(config: dict[str, Any]) -> dict[str, Any]:
    """The parameters a run records: hyperparameters under their paper names, then the training settings."""
    params = {k: v for k, v in config.get("hparams", {}).items()}
    for key, value in config.items():
        if key == "hparams" or any(marker in key.lower() for marker in SECRET_MARKERS):
            continue
        params[key] = value
    return {k: ("" if v is None else v) for k, v in params.items()}


class Tracker:
    """A thin, explicit wrapper over MlflowClient for one experiment; every call retries a locked SQLite store.

    The only way into MLflow: every module that records or reads a run goes through a Tracker. `Tracker(uri,
    name)` creates the store and the experiment when missing (a run is about to be written); `Tracker.existing`
    opens them only if they exist (a reader must never create anything).
    """

    @retry_when_locked
    def __init__(self, tracking_uri: str, experiment: str, create: bool = True):
        import mlflow
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        from raycse.files import sqlite_creation_lock

        self.tracking_uri = tracking_uri
        self.experiment = experiment
        if not create:
            self.client = MlflowClient(tracking_uri=tracking_uri)
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                names = ", ".join(sorted(e.name for e in self.client.search_experiments())) or "none"
                raise ConfigError(f"no MLflow experiment {experiment!r} at {tracking_uri} (experiments: {names})")
            self.experiment_id = found.experiment_id
            return
        mlflow.set_tracking_uri(tracking_uri)
        with sqlite_creation_lock(tracking_uri):  # the client creates the store's tables if it is new
            self.client = MlflowClient(tracking_uri=tracking_uri)
            found = self.client.get_experiment_by_name(experiment)
        if found is not None and found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        if found is None:
            try:
                found = self.client.get_experiment(self.client.create_experiment(experiment))
            except MlflowException:  # another process created it between the two calls
                found = self.client.get_experiment_by_name(experiment)
                if found is None:
                    raise
        self.experiment_id = found.experiment_id

    @classmethod
    def existing(cls, tracking_uri: str, experiment: str) -> Tracker:
        """The store and experiment as they are: ConfigError (naming the store or the experiment) when either is
        missing, and nothing created: a SQLite file is checked for before MLflow would create an empty one."""
        if tracking_uri.startswith("sqlite:///") and not Path(tracking_uri[len("sqlite:///"):]).is_file():
            raise ConfigError(f"no MLflow store at {tracking_uri} (pass the --tracking-uri the search wrote to)")
        return cls(tracking_uri, experiment, create=False)

    # runs
    @retry_when_locked
    def start_run(self, name: str, tags: dict[str, str] | None = None, parent_run_id: str | None = None) -> str:
        tags = dict(tags or {})
        if parent_run_id:
            tags[PARENT_RUN_TAG] = parent_run_id
        return self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id

    @retry_when_locked
    def find_run(self, tag: str, value: str) -> str | None:
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=1)
        return runs[0].info.run_id if runs else None

    @retry_when_locked
    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    @retry_when_locked
    def reopen_run(self, run_id: str) -> None:
        """A run continued after a kill (--resume) is RUNNING again."""
        self.client.update_run(run_id, status="RUNNING")

    @retry_when_locked
    def run(self, run_id: str):
        """The MLflow run (info, params, metrics, tags)."""
        return self.client.get_run(run_id)

    def tags(self, run_id: str) -> dict[str, str]:
        return dict(self.run(run_id).data.tags)

    @retry_when_locked
    def runs(self, filter_string: str = "", max_results: int = 50000, order_by: list[str] | None = None) -> list:
        """The experiment's runs matching an MLflow filter."""
        return self.client.search_runs([self.experiment_id], filter_string=filter_string, max_results=max_results,
                                       order_by=order_by)

    def child_runs(self, parent_run_id: str, condition: str = "") -> list:
        """The child runs of `parent_run_id` that match an MLflow filter `condition`."""
        where = f"tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'" + (f" and {condition}" if condition else "")
        return self.runs(where)

    @retry_when_locked
    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of every logged value of a metric, by step."""
        return sorted((m.step, m.value) for m in self.client.get_metric_history(run_id, key))

    @retry_when_locked
    def download_artifact(self, run_id: str, path: str, destination: str) -> str:
        return self.client.download_artifacts(run_id, path, destination)

    @retry_when_locked
    def mark_orphans_killed(self, parent_run_id: str) -> int:
        """Children left RUNNING by a killed driver become KILLED (a resumed trial reopens its own)."""
        runs = self.child_runs(parent_run_id, "attributes.status = 'RUNNING'")
        for run in runs:
            self.client.set_terminated(run.info.run_id, status="KILLED")
        return len(runs)

    @retry_when_locked
    def drop_unrecorded_trials(self, parent_run_id: str, stage_tag: tuple[str, str], recorded: set[str]) -> list[str]:
        """Delete the unfinished child runs of one stage whose trial Tune's experiment does not hold.

        Tune snapshots its experiment at most once a second, so a driver killed just after a trial started leaves
        that trial's MLflow run (opened by the callback) but no Tune trial: `--resume` samples a new trial in its
        place, and the old run would stay as a stray, half-trained row. It is tagged `lost` and soft-deleted
        (`mlflow runs restore` brings it back). A FINISHED run is never dropped. Returns the dropped trial ids."""
        tag, value = stage_tag
        dropped = []
        for run in self.child_runs(parent_run_id, f"tags.`{tag}` = '{value}' and attributes.status != 'FINISHED'"):
            trial_id = run.data.tags.get(TRIAL_TAG)
            if trial_id and trial_id not in recorded:
                self.client.set_tag(run.info.run_id, STATUS_TAG, LOST)
                if run.info.status == "RUNNING":
                    self.client.set_terminated(run.info.run_id, status="KILLED")
                self.client.delete_run(run.info.run_id)
                dropped.append(trial_id)
        return dropped

    # contents
    @retry_when_locked
    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        if new:
            self.client.log_batch(run_id, params=new)

    @retry_when_locked
    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    @retry_when_locked
    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(run_id, key, str(value)[:5000])

    @retry_when_locked
    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str) -> None:
        self.client.log_artifacts(run_id, local_dir, artifact_path)

    @retry_when_locked
    def log_artifact(self, run_id: str, local_file: str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, local_file, artifact_path)

    @retry_when_locked
    def log_dict(self, run_id: str, payload: dict, artifact_file: str) -> None:
        self.client.log_dict(run_id, payload, artifact_file)

    @retry_when_locked
    def register_model(self, run_id: str, artifact_path: str, name: str) -> str:
        """A model version whose source is the run's checkpoint artifact (HF + sentence-transformers files)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException:
            pass  # already registered: add a version
        source = f"{self.client.get_run(run_id).info.artifact_uri}/{artifact_path}"
        return self.client.create_model_version(name, source=source, run_id=run_id).version
