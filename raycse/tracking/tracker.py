"""MLflow: one run per training, or a parent run per search with one child run per trial.

Everything goes through an explicit `MlflowClient` and run ids (no global "active run"), so the search
driver can write every trial's run from one process, one thread. Two searches (or a search and the MLflow UI)
may still share one SQLite store: SQLite then answers "database is locked" when a write meets another's
transaction beyond MLflow's busy timeout, and every call here retries such errors with backoff. A tracking server
(or a database) that stops answering, say while it restarts, is waited for too: with backoff, for at most
$RAYCSE_TRACKING_WAIT_S seconds (600 by default), and with one line on stderr when the wait starts; MLflow's own
retries of an HTTP request are cut to two (unless $MLFLOW_HTTP_REQUEST_MAX_RETRIES says otherwise) so that the
wait is this one, bounded and said. Every call's duration is kept in `raycse.tracking.latency`.
Parameters are logged under the papers' names (tau, m, lambda, tau_dcl, phi, k, ...).
"""
from __future__ import annotations

import functools
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError
from raycse.records import LOST, PARENT_RUN_TAG, STATUS_TAG, TRIAL_TAG
from raycse.tracking.latency import LATENCIES
from raycse.tracking.relocation import relocation_of

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
SECRET_MARKERS = ("password", "secret", "token", "key", "credential")
LOCK_RETRIES = 8  # attempts beyond the first for a call that met a locked SQLite database (~1 minute in all)
_LOCKED = ("database is locked", "database table is locked", "sqlite3.OperationalError) unable to open")
WAIT_ENV = "RAYCSE_TRACKING_WAIT_S"  # the longest a call waits for a store that does not answer
DEFAULT_WAIT_S = 600.0
HTTP_RETRIES = "2"  # MLflow's own retries of one HTTP request (about 6 s), unless the environment sets them
# A server that does not answer (stopped, restarting, behind a proxy that says so), or a database that went away:
# urllib3's words inside MLflow's "API request ... failed", and psycopg2's / PyMySQL's
_UNREACHABLE = ("Connection refused", "Failed to establish a new connection", "Connection aborted",
                "Connection reset", "RemoteDisconnected", "too many 502 error", "too many 503 error",
                "too many 504 error", "could not connect to server", "server closed the connection unexpectedly",
                "terminating connection due to administrator command", "Can't connect to MySQL server")


class _Outage:
    """The store's current outage, shared by every call of this process: when it began and how often the calls
    waited; its one line is written when it begins."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.waits = 0

    def delay(self, err: Exception, uri: str) -> float | None:
        """Seconds to wait before the next attempt, or None when the outage has lasted the longest wait."""
        now = time.monotonic()
        limit = float(os.environ.get(WAIT_ENV) or DEFAULT_WAIT_S)
        if self.since is None:
            self.since, self.waits = now, 0
            reason = next(marker for marker in _UNREACHABLE if marker in str(err))
            print(f"raycse: the MLflow store at {uri} does not answer ({reason}): retrying with backoff for up to "
                  f"{limit:.0f} s", file=sys.stderr, flush=True)
        left = self.since + limit - now
        if left <= 0:
            return None
        self.waits += 1
        return min(left, min(30.0, 2.0 ** min(self.waits, 5)) * (0.5 + random.random() / 2))

    def over(self) -> None:
        self.since = None


_OUTAGE = _Outage()


def retried(call):
    """Retry a Tracker call while its store is briefly unavailable, and time it (`mlflow.<name>` in
    raycse.tracking.latency).

    A locked SQLite database (another writer's transaction) is retried silently with jittered exponential backoff,
    about a minute in all. A server or database that does not answer is waited for with backoff up to
    $RAYCSE_TRACKING_WAIT_S seconds in all, saying so once; then the error is raised. A request whose connection
    broke after the server received it may be applied twice: MLflow's own retries do the same.
    """
    kind = f"mlflow.{call.__name__}"

    @functools.wraps(call)
    def wrapper(*args, **kwargs):
        started, locked = time.perf_counter(), 0
        try:
            while True:
                try:
                    result = call(*args, **kwargs)
                    _OUTAGE.over()
                    return result
                except Exception as err:  # MlflowException, SQLAlchemy's and the drivers' errors all carry the text
                    text = str(err)
                    if locked < LOCK_RETRIES and any(marker in text for marker in _LOCKED):
                        time.sleep(min(16.0, 0.25 * 2 ** locked) * (0.5 + random.random()))
                        locked += 1
                        continue
                    if not any(marker in text for marker in _UNREACHABLE):
                        raise
                    delay = _OUTAGE.delay(err, getattr(args[0], "tracking_uri", "?") if args else "?")
                    if delay is None:
                        raise
                    time.sleep(delay)
        finally:
            LATENCIES.record(kind, time.perf_counter() - started)
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
    """A thin, explicit wrapper over MlflowClient for one experiment; every call waits out a locked SQLite store or a
    server that does not answer (`retried`).

    The only way into MLflow: every module that records or reads a run goes through a Tracker. `Tracker(uri,
    name)` creates the store and the experiment when missing (a run is about to be written); `Tracker.existing`
    opens them only if they exist (a reader must never create anything).
    """

    @retried
    def __init__(self, tracking_uri: str, experiment: str, create: bool = True, artifact_location: str | None = None):
        import mlflow
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        from raycse.files import sqlite_created, sqlite_creation_lock
        from raycse.tracking import sqlite_wal, store_template

        self.tracking_uri = tracking_uri
        self.experiment = experiment
        if tracking_uri.startswith(("http://", "https://")):  # a wait beyond a blip is `retried`'s, said and bounded
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_RETRIES)
        if not create:
            with sqlite_created(tracking_uri):  # a search may be creating it right now
                self.client = MlflowClient(tracking_uri=tracking_uri)
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                names = ", ".join(sorted(e.name for e in self.client.search_experiments())) or "none"
                raise ConfigError(f"no MLflow experiment {experiment!r} at {tracking_uri} (experiments: {names})")
            self.experiment_id = found.experiment_id
            self.relocation = relocation_of(tracking_uri, found.artifact_location)
            return
        mlflow.set_tracking_uri(tracking_uri)
        with sqlite_creation_lock(tracking_uri):  # the client creates the store's tables if it is new
            database = sqlite_wal.database_path(tracking_uri)
            copied = database is not None and store_template.copy_template(database)
            migrated = database is not None and not copied and store_template.is_new(database)  # kept for the next
            self.client = MlflowClient(tracking_uri=tracking_uri)
            found = self.client.get_experiment_by_name(experiment)
            if migrated:
                store_template.keep_template(database)
            sqlite_wal.use_write_ahead_log(tracking_uri)  # the driver's commits wait for the disk once, not thrice
        if found is not None and found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        if found is None:
            try:
                # artifact_location: where a new experiment's artifacts go (None: MLflow's default, or the server's)
                found = self.client.get_experiment(self.client.create_experiment(experiment,
                                                                                 artifact_location=artifact_location))
            except MlflowException:  # another process created it between the two calls
                found = self.client.get_experiment_by_name(experiment)
                if found is None:
                    raise
        self.experiment_id = found.experiment_id
        self.relocation = relocation_of(tracking_uri, found.artifact_location)  # a search folder copied elsewhere

    @classmethod
    def existing(cls, tracking_uri: str, experiment: str) -> Tracker:
        """The store and experiment as they are: ConfigError (naming the store or the experiment) when either is
        missing, and nothing created: a SQLite file is checked for before MLflow would create an empty one."""
        if tracking_uri.startswith("sqlite:///") and not Path(tracking_uri[len("sqlite:///"):]).is_file():
            raise ConfigError(f"no MLflow store at {tracking_uri} (pass the --tracking-uri the search wrote to)")
        return cls(tracking_uri, experiment, create=False)

    # runs
    @retried
    def start_run(self, name: str, tags: dict[str, str] | None = None, parent_run_id: str | None = None) -> str:
        tags = {key: str(value) for key, value in (tags or {}).items()}  # a server's protocol takes strings only
        if parent_run_id:
            tags[PARENT_RUN_TAG] = parent_run_id
        return self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id

    @retried
    def find_run(self, tag: str, value: str) -> str | None:
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=1)
        return runs[0].info.run_id if runs else None

    @retried
    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    @retried
    def reopen_run(self, run_id: str) -> None:
        """A run continued after a kill (--resume) is RUNNING again."""
        self.client.update_run(run_id, status="RUNNING")

    @retried
    def run(self, run_id: str):
        """The MLflow run (info, params, metrics, tags)."""
        return self.client.get_run(run_id)

    def tags(self, run_id: str) -> dict[str, str]:
        return dict(self.run(run_id).data.tags)

    @retried
    def runs(self, filter_string: str = "", max_results: int = 50000, order_by: list[str] | None = None) -> list:
        """The experiment's runs matching an MLflow filter."""
        return self.client.search_runs([self.experiment_id], filter_string=filter_string, max_results=max_results,
                                       order_by=order_by)

    def child_runs(self, parent_run_id: str, condition: str = "") -> list:
        """The child runs of `parent_run_id` that match an MLflow filter `condition`."""
        where = f"tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'" + (f" and {condition}" if condition else "")
        return self.runs(where)

    @retried
    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of every logged value of a metric, by step."""
        return sorted((m.step, m.value) for m in self.client.get_metric_history(run_id, key))

    def artifact_uri(self, run_id: str) -> str:
        """Where the run's artifacts are: MLflow's record of it, read under the folder's present place when the
        search's folder was copied or moved (raycse.tracking.relocation)."""
        return self.relocation.path(self.run(run_id).info.artifact_uri)

    def _moved_artifacts(self, run_id: str):
        """The run's artifacts at the folder's present place, None when it was not moved (MLflow's own way then)."""
        if not self.relocation.moved:
            return None
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        return get_artifact_repository(self.artifact_uri(run_id))

    @retried
    def download_artifact(self, run_id: str, path: str, destination: str) -> str:
        repository = self._moved_artifacts(run_id)
        if repository is not None:
            return repository.download_artifacts(path, destination)
        return self.client.download_artifacts(run_id, path, destination)

    @retried
    def mark_orphans_killed(self, parent_run_id: str) -> int:
        """Children left RUNNING by a killed driver become KILLED until their trials resume, each reopening its own
        run (raycse.driver.tune.callback); returns how many."""
        runs = self.child_runs(parent_run_id, "attributes.status = 'RUNNING'")
        for run in runs:
            self.client.set_terminated(run.info.run_id, status="KILLED")
        return len(runs)

    @retried
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
    @retried
    def log_params(self, run_id: str, params: dict[str, Any], new_run: bool = False) -> None:
        """Log the parameters the run does not hold yet (MLflow refuses to change one); a run created just now holds
        none, and is not asked."""
        from mlflow.entities import Param

        existing = {} if new_run else self.client.get_run(run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        if new:
            self.client.log_batch(run_id, params=new)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        self.log_metric_steps(run_id, [(step or 0, metrics)])

    @retried
    def log_metric_steps(self, run_id: str, steps: list[tuple[int, dict[str, float]]]) -> None:
        """Several steps' metrics of one run in one request (MLflow takes up to 1,000 values a request)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for step, metrics in steps for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        for start in range(0, len(batch), 1000):
            self.client.log_batch(run_id, metrics=batch[start:start + 1000])

    @retried
    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        """All of them in one request (one transaction of the store)."""
        from mlflow.entities import RunTag

        if tags:
            self.client.log_batch(run_id, tags=[RunTag(key, str(value)[:5000]) for key, value in tags.items()])

    @retried
    def delete_tag(self, run_id: str, key: str) -> None:
        self.client.delete_tag(run_id, key)

    # Artifacts are written where the run's folder is now: never into the place a copied folder came from.
    @retried
    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str) -> None:
        repository = self._moved_artifacts(run_id)
        if repository is not None:
            repository.log_artifacts(local_dir, artifact_path)
        else:
            self.client.log_artifacts(run_id, local_dir, artifact_path)

    @retried
    def log_artifact(self, run_id: str, local_file: str, artifact_path: str | None = None) -> None:
        repository = self._moved_artifacts(run_id)
        if repository is not None:
            repository.log_artifact(local_file, artifact_path)
        else:
            self.client.log_artifact(run_id, local_file, artifact_path)

    @retried
    def log_dict(self, run_id: str, payload: dict, artifact_file: str) -> None:
        if not self.relocation.moved:
            self.client.log_dict(run_id, payload, artifact_file)
            return
        import json
        import tempfile

        folder, name = os.path.split(artifact_file)
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, name).write_text(json.dumps(payload, indent=2), encoding="utf-8")
            self.log_artifact(run_id, str(Path(tmp, name)), folder or None)

    @retried
    def register_model(self, run_id: str, artifact_path: str, name: str) -> str:
        """A model version whose source is the run's checkpoint artifact (HF + sentence-transformers files)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException:
            pass  # already registered: add a version
        source = f"{self.artifact_uri(run_id)}/{artifact_path}"
        return self.client.create_model_version(name, source=source, run_id=run_id).version
