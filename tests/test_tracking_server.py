"""raycse against a real tracking server: PostgreSQL (Debian's `postgresql`, started here in a temporary directory
on a free local port) behind an `mlflow server` (artifacts proxied by the server into a temporary directory), and
the Optuna study in the same PostgreSQL — the setup docs/scaling.md recommends for a search that must outlive its
cluster.

Two searches at once share the server and every run, metric and artifact is there; stopping and restarting the
MLflow server in the middle of a search loses no run and no metric (the driver waits, and says so once); a killed
search resumes against the server with --resume.

PostgreSQL refuses to run as root (as CI runs): as root, the server runs as the `postgres` user that Debian's
package creates. Without PostgreSQL the tests are skipped, unless CI is set (.ci/run installs it).
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from skips import require_module, unavailable
from test_search import finished_lines, kill_when, runs_of, small_dev_file, start_cli, write_space

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The directory of Debian's PostgreSQL server binaries (the newest version), or of `initdb` on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def as_server_user() -> dict:
    """subprocess arguments that run PostgreSQL as `postgres` when this process is root (initdb refuses root)."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres"}


class Postgres:
    """A PostgreSQL server in a temporary directory on a free port: trust authentication, user `postgres`, local
    connections only, no fsync (a test's data need not survive a power cut)."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="raycse-pg-", dir="/tmp"))  # a path the postgres user can reach
        self.data = self.root / "data"
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        os.chmod(self.root, 0o700)

    def start(self) -> None:
        log = self.root / "initdb.log"
        with log.open("w") as out:
            code = subprocess.call([self.bin_dir / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
                                    "-E", "UTF8", "--no-sync"], stdout=out, stderr=subprocess.STDOUT, cwd=self.root,
                                   **as_server_user())
        assert code == 0, log.read_text()
        self.process = subprocess.Popen(
            [self.bin_dir / "postgres", "-D", self.data, "-p", str(self.port), "-k", self.root,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=200"],
            stdout=(self.root / "postgres.log").open("w"), stderr=subprocess.STDOUT, cwd=self.root,
            start_new_session=True, **as_server_user())
        self.wait_until_ready()
        for database in ("mlflow", "optuna"):
            self.sql(f"CREATE DATABASE {database}")

    def wait_until_ready(self, timeout: float = 120) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, (self.root / "postgres.log").read_text()
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres").close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def sql(self, statement: str) -> None:
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        connection.autocommit = True  # CREATE DATABASE runs outside a transaction
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement)
        finally:
            connection.close()

    def url(self, database: str) -> str:
        # the driver named: SQLAlchemy 2.1 takes a bare postgresql:// to mean psycopg 3, older ones psycopg2
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer:
    """`mlflow server` on PostgreSQL, artifacts proxied into a directory; it can be stopped and started again on the
    same port (a restart, as `ray up` or a supervisor does on the head)."""

    def __init__(self, backend_uri: str, artifacts: Path, log: Path):
        self.backend_uri, self.artifacts, self.log = backend_uri, artifacts, log
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 300) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner: only tracking here
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend_uri,
             "--artifacts-destination", str(self.artifacts), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"],
            stdout=self.log.open("a"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.uri}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            assert time.monotonic() < deadline, f"no MLflow server after {timeout} s:\n{self.log.read_text()[-3000:]}"
            time.sleep(1)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)  # the server and the uvicorn worker it started
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        with contextlib.suppress(ProcessLookupError):  # a worker that outlived its parent
            os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def postgres():
    bin_dir = postgres_bin()
    if bin_dir is None:
        unavailable("no PostgreSQL (Debian: apt-get install postgresql; .ci/run installs it)")
    require_module("psycopg2", "pip install psycopg2-binary (the test extra, which .ci/run installs)")
    server = Postgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_server(postgres, tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    server = MlflowServer(postgres.url("mlflow"), root / "artifacts", root / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def server_args(tmp_path: Path, space: Path, server: MlflowServer, postgres: Postgres, name: str, *extra: str):
    return ["search", "--space", str(space), "--tracking-uri", server.uri, "--optuna-storage",
            postgres.url("optuna"), "--storage-path", str(tmp_path / f"ray-{name}"), *extra]


def histories(client: MlflowClient, children) -> dict[str, list[int]]:
    return {r.data.tags["raycse.trial_id"]: [m.step for m in client.get_metric_history(r.info.run_id, "objective")]
            for r in children}


def waits_said(text: str) -> list[str]:
    return [line for line in text.splitlines() if "does not answer" in line]


@pytest.mark.timeout(1500)
def test_two_searches_at_once_record_every_run_metric_and_artifact_on_the_server(tmp_path, tiny_bert_dir, postgres,
                                                                                 mlflow_server):
    import optuna

    drivers = {}
    for name in ("first", "second"):
        space = write_space(tmp_path, tiny_bert_dir, f"server-{name}", num_samples=2, test_eval="none",
                            objective=small_dev_file(tmp_path))
        args = server_args(tmp_path, space, mlflow_server, postgres, name, "--no-confirm")
        drivers[name] = (start_cli(args, tmp_path / f"{name}.log", tmp_path), tmp_path / f"{name}.log")
    for driver, log in drivers.values():
        assert driver.wait(timeout=1200) == 0, log.read_text()[-3000:]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    for name in drivers:
        experiment = f"server-{name}"
        parent, children = runs_of(client, experiment)
        assert parent.info.status == "FINISHED" and len(children) == 2
        assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
        assert set(map(tuple, histories(client, children).values())) == {(2, 4)}  # every evaluation, once
        assert all({"tau", "m", "lr", "seed"} <= set(r.data.params) for r in children)
        # the artifacts, through the server: the space file, the summary, the report page, the best checkpoint
        artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
        assert {f"{experiment}.yaml", "search_summary.json", "report", "best_checkpoint"} <= artifacts
        files = {a.path for a in client.list_artifacts(parent.info.run_id, "best_checkpoint")}
        assert {"best_checkpoint/config.json", "best_checkpoint/modules.json"} <= files
        assert client.search_model_versions(f"name='{experiment}'")[0].run_id == parent.info.run_id
        # ... stored where the server keeps them, under its artifacts destination
        assert list(mlflow_server.artifacts.rglob("best_checkpoint/modules.json"))
        study = optuna.load_study(study_name=experiment, storage=postgres.url("optuna"))
        assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials) == \
            sorted(r.data.tags["raycse.trial_id"] for r in children)
        assert waits_said(drivers[name][1].read_text()) == []


@pytest.mark.timeout(1500)
def test_a_restart_of_the_mlflow_server_mid_search_loses_no_run_and_no_metric(tmp_path, tiny_bert_dir, postgres,
                                                                              mlflow_server):
    space = write_space(tmp_path, tiny_bert_dir, "server-restart", num_samples=3, test_eval="none", steps=8,
                        objective=small_dev_file(tmp_path))
    args = server_args(tmp_path, space, mlflow_server, postgres, "restart", "--no-confirm")
    log = tmp_path / "restart.log"
    driver = start_cli(args, log, tmp_path)
    deadline = time.monotonic() + 900
    while " step " not in log.read_text():  # a trial is training and its results are being written
        assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    mlflow_server.stop()
    time.sleep(10)  # down long enough for the driver's writes to fail and wait
    mlflow_server.start()
    assert driver.wait(timeout=1200) == 0, log.read_text()[-3000:]

    text = log.read_text()
    said = waits_said(text)
    assert len(said) == 1, text[-3000:]  # says so, once
    assert said[0].startswith(f"raycse: the MLflow store at {mlflow_server.uri} does not answer")
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    parent, children = runs_of(client, "server-restart")
    assert parent.info.status == "FINISHED" and len(children) == 3
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    assert set(map(tuple, histories(client, children).values())) == {(2, 4, 6, 8)}


@pytest.mark.timeout(1800)
def test_a_killed_search_resumes_against_the_server(tmp_path, tiny_bert_dir, postgres, mlflow_server):
    import optuna

    space = write_space(tmp_path, tiny_bert_dir, "server-resume", num_samples=3, test_eval="none",
                        objective=small_dev_file(tmp_path))
    args = server_args(tmp_path, space, mlflow_server, postgres, "resume", "--no-confirm")
    before = kill_when(start_cli(args, tmp_path / "first.log", tmp_path), tmp_path / "first.log",
                       lambda text: len(finished_lines(text)) >= 1)
    done = finished_lines(before)[0].split()[1]

    resumed = subprocess.run([sys.executable, "-m", "raycse.cli", *args, "--resume"], capture_output=True, text=True,
                             timeout=1200, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming search" in resumed.stdout
    assert not [line for line in resumed.stdout.splitlines() if line.startswith(f"trial {done} ") and " step " in line]

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    parent, children = runs_of(client, "server-resume")
    trial_ids = [r.data.tags["raycse.trial_id"] for r in children]
    assert parent.info.status == "FINISHED" and len(trial_ids) == 3 == len(set(trial_ids))
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    assert set(map(tuple, histories(client, children).values())) == {(2, 4)}
    study = optuna.load_study(study_name="server-resume", storage=postgres.url("optuna"))
    assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials if t.state.name == "COMPLETE") == sorted(trial_ids)
