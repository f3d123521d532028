"""Writing files so that a reader, or a crash, never sees half of one: build beside the target, then rename; and the
folder where raycse keeps what it reuses between runs (`cache_dir`)."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

CACHE_ENV = "RAYCSE_CACHE_DIR"


def cache_dir() -> Path:
    """The folder of what raycse keeps between runs: the untouched model's figures (raycse.evaluation.untouched_cache),
    the trials a GPU took (raycse.settings.gpu_share), the empty MLflow store (raycse.tracking.store_template).

    Returns:
        $RAYCSE_CACHE_DIR if set, else $XDG_CACHE_HOME/raycse, else ~/.cache/raycse.

    Example:
        >>> cache_dir()  # as root, with neither variable set  # doctest: +SKIP
        PosixPath('/root/.cache/raycse')
    """
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raycse"


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """`payload` as indented JSON at `path`, which holds either the old file or the whole new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, target)


def replace_directory(staging: Path, target: Path) -> None:
    """Rename `staging` to `target`; an old `target` is first renamed aside, then deleted."""
    if not target.exists():
        os.replace(staging, target)
        return
    # rename() cannot replace a non-empty directory, so the old one steps aside first.
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    os.replace(target, retired)
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(retired, target)  # put the old checkpoint back
        raise
    shutil.rmtree(retired, ignore_errors=True)


@contextlib.contextmanager
def sqlite_creation_lock(url: str):
    """Hold an exclusive lock beside a SQLite database while it may be created: two processes that create the same
    store at once (two searches starting together) would both run its schema migrations and one would fail. Other
    URLs (a tracking server, PostgreSQL) need no lock here."""
    if not url.startswith("sqlite:///"):
        yield
        return
    database = Path(url[len("sqlite:///"):])
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(_creation_lock_file(database), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def sqlite_created(url: str):
    """Wait, if a process is creating this SQLite store (under `sqlite_creation_lock`), until it has finished: a
    reader that opened it half made (its tables there, their migrations not yet done) would run the migrations a
    second time and fail (`raycse status` from a second terminal as a search starts). Creates nothing: a store no
    raycse process created has no lock file, and nothing to wait for."""
    lock_file = _creation_lock_file(Path(url[len("sqlite:///"):])) if url.startswith("sqlite:///") else None
    try:
        lock = open(lock_file) if lock_file is not None else None  # closed by the `with` below
    except FileNotFoundError:
        lock = None
    if lock is None:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _creation_lock_file(database: Path) -> Path:
    return database.with_name(f".{database.name}.lock")
