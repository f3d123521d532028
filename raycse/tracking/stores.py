"""Where a run's records go, checked before either store is opened: the MLflow tracking URI and the Optuna storage.

Opening a store is a side effect (MLflow and Optuna create a SQLite file, and its tables, on first contact), so a
command checks the address first, without touching it: the scheme is one the library serves, a SQLite path is a
path whose folder can hold the file, and a command that only reads (`raycse report`) finds the file already there.
"""
from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_path_text, check_str, check_writable_dir
from raycse.tracking.tracker import DEFAULT_TRACKING_URI

# The tracking-store schemes MLflow 3 serves (its registry's, less the Databricks-only ones spelled out below).
TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks",
                    "databricks-uc", "uc")


def sqlite_file(url: str) -> Path | None:
    """The database file of a `sqlite:///PATH` URL, None for any other URL."""
    if not url.startswith("sqlite:///"):
        return None
    return Path(urllib.parse.unquote(url[len("sqlite:///"):].split("?", 1)[0])).expanduser()


def _check_sqlite(name: str, url: str, must_exist: bool, table: str = "") -> None:
    if url.rstrip("/") in ("sqlite:", "sqlite:/", "sqlite://") or not url.startswith("sqlite:///"):
        raise ConfigError.at(name, f"{shown(url)}: a SQLite store needs a file: sqlite:///PATH (three slashes, then "
                                   "the path; four for an absolute one)")
    path = sqlite_file(url)
    check_path_text(name, str(path))
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as err:
        raise ConfigError.at(name, f"cannot use {shown(str(path))}: {err.strerror}") from None
    if is_dir:
        raise ConfigError.at(name, f"{shown(url)}: {str(path)!r} is a directory, not a database file")
    if must_exist and not exists:
        raise ConfigError.at(name, f"no store at {shown(url)}: {str(path)!r} does not exist")
    if must_exist and table and table not in _tables(path):
        raise ConfigError.at(name, f"{shown(url)} is not the store it should be: {str(path)!r} holds no "
                                   f"{table!r} table")
    if not exists:
        check_writable_dir(name, str(path.parent) if str(path.parent) else ".")


def check_tracking_uri(name: str, uri: str, must_exist: bool = False) -> str:
    """An MLflow tracking URI MLflow can serve; `must_exist`: a SQLite store that is already there (a reader)."""
    check_str(name, uri)
    if uri.startswith("databricks"):
        return uri
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if not scheme:
        raise ConfigError.at(name, f"{shown(uri)} is not a URI (e.g. sqlite:///mlflow.db or http://host:5000)")
    if scheme not in TRACKING_SCHEMES:
        raise ConfigError.at(name, f"{shown(uri)}: MLflow serves no {shown(scheme)} store (schemes: "
                                   f"{', '.join(TRACKING_SCHEMES)})")
    if scheme == "sqlite":
        _check_sqlite(name, uri, must_exist, table="experiments")
    elif scheme == "file" and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("1", "true"):
        raise ConfigError.at(name, f"{shown(uri)}: MLflow 3 keeps its file store read-only (maintenance mode); use "
                                   "sqlite:///mlflow.db, or set MLFLOW_ALLOW_FILE_STORE=true")
    elif scheme in ("http", "https") and not urllib.parse.urlsplit(uri).netloc:
        raise ConfigError.at(name, f"{shown(uri)} names no host (e.g. http://host:5000)")
    elif scheme in ("postgresql", "mysql", "mssql"):
        _check_sqlalchemy_url(name, uri)
    return uri


def resolve_tracking_uri(tracking_uri: str | None, must_exist: bool = False) -> str:
    """`tracking_uri`, else $MLFLOW_TRACKING_URI, else SQLite in the working directory; checked, never opened (an
    absolute path for SQLite: trial processes run elsewhere)."""
    if tracking_uri is not None:
        uri, name = tracking_uri, "tracking_uri"
    elif os.environ.get("MLFLOW_TRACKING_URI"):
        uri, name = os.environ["MLFLOW_TRACKING_URI"], "$MLFLOW_TRACKING_URI"
    else:
        uri, name = DEFAULT_TRACKING_URI, "tracking_uri"
    check_tracking_uri(name, uri, must_exist=must_exist)
    if uri == DEFAULT_TRACKING_URI:
        uri = f"sqlite:///{Path('mlflow.db').resolve()}"
    return uri


def check_optuna_storage(name: str, url: str, must_exist: bool = False) -> str:
    """An SQLAlchemy URL Optuna's RDB storage can open; `must_exist`: a SQLite file already there (a reader)."""
    check_str(name, url)
    _check_sqlalchemy_url(name, url)
    if url.startswith("sqlite"):
        _check_sqlite(name, url, must_exist, table="studies")
    return url


def _check_sqlalchemy_url(name: str, url: str) -> None:
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    try:
        make_url(url).get_dialect()
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError.at(name, f"{shown(url)} is not a database URL SQLAlchemy can open "
                                   f"({shown(reason, 120)[1:-1]})") from None


def _read_only(path: Path) -> sqlite3.Connection:
    """A connection that writes nothing. A database in write-ahead-log mode (raycse's stores are) gets its -wal and
    -shm files created by any reader; when no -wal file exists every commit is in the main file, which is then read
    as immutable (no side files)."""
    wal = path.with_name(path.name + "-wal").exists()
    return sqlite3.connect(f"file:{urllib.parse.quote(str(path.resolve()))}?{'mode=ro' if wal else 'immutable=1'}",
                           uri=True)


def _tables(path: Path) -> set[str]:
    """The tables of a SQLite file, read without writing anything (none when it is no SQLite database)."""
    try:
        db = _read_only(path)
        try:
            return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            db.close()
    except sqlite3.Error:
        return set()


def study_names(url: str) -> list[str] | None:
    """The studies in an Optuna SQLite storage, read without creating or migrating anything ([] when the file is
    absent or holds no Optuna tables); None for a storage that is not a SQLite file (it must be asked through
    Optuna, which may create its tables)."""
    path = sqlite_file(url)
    if path is None:
        return None
    if not path.is_file():
        return []
    if "studies" not in _tables(path):
        return []  # no Optuna tables yet (or no SQLite file: Optuna will say so when it opens it)
    db = _read_only(path)
    try:
        return [row[0] for row in db.execute("SELECT study_name FROM studies")]
    except sqlite3.Error as err:
        raise ConfigError(f"cannot read the Optuna storage {shown(url)}: {err}") from None
    finally:
        db.close()
