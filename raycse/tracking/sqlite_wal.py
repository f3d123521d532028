"""SQLite stores in write-ahead-log mode: a commit appends to a log instead of rewriting pages and a journal.

The driver commits to two SQLite files on its own machine at every step of a search: Optuna's study (each ask is a
new trial, one commit per sampled parameter and one for its id; each evaluation an intermediate value; each tell)
and MLflow's store (every run, metric, parameter and tag). In SQLite's default mode (a rollback journal,
synchronous=FULL) each commit waits for the disk two or three times: about 12 ms on this project's 2-core machine,
and hundreds of milliseconds when the machine is busy, so that an Optuna ask of ten parameters took 0.3 to 0.8 s
and Tune's loop spent most of a 256-trial search waiting for SQLite (benchmarks/scale.py).

In WAL mode a commit with synchronous=FULL waits for the disk once (about 2.6 ms here), with synchronous=NORMAL not
at all (about 0.02 ms): the log is synced at checkpoints. NORMAL keeps every commit through a crash of the process
(the driver killed); only a power cut or an OS crash can take back the last commits, which --resume then redoes.
Readers in other processes (trials of a resumed search, `mlflow ui`, optuna-dashboard) keep working: WAL lets them
read while the driver writes. WAL needs the file on a local disk (not NFS), where raycse keeps its stores.

Optuna's engine connects through `connect` (a picklable partial, so that a restored searcher keeps it) and gets
both settings; MLflow's store is opened by MLflow, so its file is switched to WAL once (`use_write_ahead_log`: the
mode is kept in the file) and MLflow's connections keep synchronous=FULL, each commit still durable.
"""
from __future__ import annotations

import contextlib
import functools
import sqlite3
from pathlib import Path

BUSY_TIMEOUT_S = 60.0  # a connection waits this long for another process's write lock (two searches on one file)


def database_path(url: str) -> Path | None:
    """The file of a `sqlite:///...` URL, else None (a server: PostgreSQL, MySQL, an MLflow tracking server)."""
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


def connect(path: str, timeout: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A connection to `path` in WAL mode with synchronous=NORMAL (for SQLAlchemy's `creator`)."""
    connection = sqlite3.connect(path, timeout=timeout, check_same_thread=False)  # SQLAlchemy's pool shares it
    with contextlib.suppress(sqlite3.OperationalError):  # another process holds the file: it stays as it is
        connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


def engine_kwargs(url: str) -> dict:
    """create_engine's keyword arguments for Optuna's storage at `url`: WAL connections for a SQLite file."""
    path = database_path(url)
    return {} if path is None else {"creator": functools.partial(connect, str(path.resolve()))}


def use_write_ahead_log(url: str) -> None:
    """Switch an existing SQLite store to WAL mode (kept in the file); nothing for other URLs. Best effort: a store
    that another process is writing at that moment stays in its mode, as correct and only slower."""
    path = database_path(url)
    if path is None or not path.is_file():
        return
    with contextlib.suppress(sqlite3.Error):
        connection = sqlite3.connect(str(path), timeout=1.0)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
        finally:
            connection.close()
