"""Real services the tests start on this machine, and stop: a fake multi-node Ray cluster (cluster/fake-gpu.yaml),
PostgreSQL, and an MLflow tracking server on it. tests/conftest.py turns the stores into fixtures; test_cluster.py,
test_tracking_server.py and test_cluster_path.py use them.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import glob
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------- a fake GPU cluster
def processes_of(temp_dir: str, *arguments: str) -> list:
    """A cluster's processes: every process with its private temp dir on its command line (GCS, raylets -- also the
    fake workers' --, monitor, dashboard, log monitors), or one of `arguments` among its arguments, and their
    descendants (agents, workers, a job's driver)."""
    import psutil  # vendored by Ray (ray/thirdparty_files), on sys.path once ray is imported

    procs: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if proc.pid != os.getpid() and (temp_dir in " ".join(cmdline) or set(arguments) & set(cmdline)):
                procs[proc.pid] = proc
                procs.update({child.pid: child for child in proc.children(recursive=True)})
        except psutil.Error:
            continue
    return list(procs.values())


def stop_processes(procs: list, hard: bool = False) -> None:
    """SIGTERM (or, `hard`, SIGKILL at once: a machine lost) the processes, SIGKILL any left after 10 s. A process
    counts as gone once it is a zombie: whoever reaps it (its parent, or init once its parent is gone) is not ours."""
    import psutil

    def gone(proc) -> bool:
        try:
            return proc.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill() if hard else proc.terminate()
    deadline = time.monotonic() + 10
    while not all(map(gone, procs)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in procs:
        if not gone(proc):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def stop_processes_of(temp_dir: str, *arguments: str, hard: bool = False) -> None:
    """Stop this cluster's Ray processes, and only those.

    `ray stop --force` (what ray.cluster_utils.AutoscalingCluster uses) kills every Ray process on the machine,
    including other tests' or users' clusters: here only the processes of this cluster's temp dir (or `arguments`) go.
    """
    stop_processes(processes_of(temp_dir, *arguments), hard)


@dataclasses.dataclass(frozen=True)
class FakeCluster:
    address: str    # the GCS, ip:port (RAY_ADDRESS for a driver on this machine)
    dashboard: str  # Ray's dashboard and job API, http://127.0.0.1:port (`ray job submit --address`)
    temp_dir: str   # the cluster's private temp dir: its processes carry it on their command lines



def _wait_for_job_server(dashboard: str, timeout_s: float = 120.0) -> None:
    """`ray start --head` returns before the dashboard's job server answers (seconds later on a loaded machine), and
    `ray job submit` checks it once: asked too soon, it exits 1 and no job starts. Wait until it answers, whatever
    it answers (with Ray's token authentication on, 401 to a request without the token)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{dashboard}/api/version", timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"Ray's job server at {dashboard} did not answer within {timeout_s:.0f} s")
        time.sleep(0.5)

@contextlib.contextmanager
def fake_gpu_cluster(config: dict, env: dict | None = None, logs: Path | None = None) -> Iterator[FakeCluster]:
    """Start a Ray head whose autoscaler uses the fake multi-node provider with `config`; stop it at the end.

    The same mechanism as ray.cluster_utils.AutoscalingCluster (`RAY_FAKE_CLUSTER=1 ray start --head
    --autoscaling-config=...`), which cannot be used as is: it builds its config from the example.yaml
    missing from the 2.60 wheel, and it runs `ray stop --force`. Here the shipped node types are used
    unchanged; the head gets a free port and a private temp dir, and only its processes are stopped.
    `env`: more environment for the head and the nodes its autoscaler starts (Ray's RAY_* settings); `logs`: a
    folder that keeps the cluster's logs once it is stopped.
    """
    import ray

    if ray.is_initialized():  # e.g. a local runtime left by an earlier test in the same process
        ray.shutdown()
    config = copy.deepcopy(config)
    port = free_port()
    address = f"{ray.util.get_node_ip_address()}:{port}"
    # Tell the fake provider where the GCS is (it assumes port 6379 otherwise).
    config["provider"]["gcs_address"] = address
    head = dict(config["available_node_types"][config["head_node_type"]]["resources"])
    # A short path: Ray's Unix sockets live under it (limit ~107 characters).
    temp_dir = tempfile.mkdtemp(prefix="rcf-", dir="/tmp")
    config_path = Path(temp_dir) / "autoscaling.json"
    config_path.write_text(json.dumps(config))
    dashboard_port = free_port()
    # Ray's client server (ray[client]), started by the head and left to init when `ray start` returns: the only
    # process of the cluster whose command line names no temp dir. A port of its own (10001 by default, which two
    # clusters at once would share), its `--port=` argument, by which it is found and stopped with the rest
    client_port = free_port()
    cmd = [
        "ray", "start", "--head",
        f"--ray-client-server-port={client_port}",
        f"--port={port}",
        f"--temp-dir={temp_dir}",
        f"--autoscaling-config={config_path}",
        f"--num-cpus={head.pop('CPU', 0)}",
        f"--num-gpus={head.pop('GPU', 0)}",
        "--object-store-memory=100000000",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        "--disable-usage-stats",
    ]
    # Token authentication must be the same on both sides. Ray 2.60's `ray start` turns it on
    # whenever ~/.ray/auth_token exists (any earlier local `ray.init()` creates that file), while a
    # driver given an explicit address uses it only if RAY_AUTH_MODE=token is in its environment,
    # which a local `ray.init()` earlier in this process sets. So the cluster follows this process.
    env = dict(os.environ, RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1",
               RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", RAY_USAGE_STATS_ENABLED="0",
               RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE") or "disabled", **(env or {}))
    env.pop("RAY_ADDRESS", None)
    try:
        started = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise RuntimeError(f"`{shlex.join(cmd)}` failed:\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}")
        dashboard = f"http://127.0.0.1:{dashboard_port}"
        if importlib.util.find_spec("ray.dashboard.optional_deps") is not None:  # ray[default]: a dashboard started
            _wait_for_job_server(dashboard)
        yield FakeCluster(address, dashboard, temp_dir)
    finally:
        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            stop_processes_of(temp_dir, f"--port={client_port}")
            if logs is not None:
                with contextlib.suppress(OSError):
                    shutil.copytree(Path(temp_dir) / "session_latest" / "logs", logs, dirs_exist_ok=True,
                                    ignore_dangling_symlinks=True)
            shutil.rmtree(temp_dir, ignore_errors=True)


def trial_actors() -> list[tuple[str, int]]:
    """(node id, pid) of the Tune trials (function trainables) of the connected cluster, from the GCS actor table.

    Needs nothing from the trials themselves. `ray._private.state` is private (Ray may change it in any release);
    Ray's public state API (`ray.util.state`) would need the dashboard.
    """
    from ray._private.state import state

    return [(actor["Address"]["NodeID"], actor["Pid"]) for actor in state.actor_table(None).values()
            if actor["ActorClassName"] == "ImplicitFunc"]


# ------------------------------------------------------------------------------ PostgreSQL and MLflow
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
