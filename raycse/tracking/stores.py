"""Where a run's records go, checked before either store is opened: the MLflow tracking URI and the Optuna storage.

Opening a store is a side effect (MLflow and Optuna create a SQLite file, and its tables, on first contact), so a
command checks the address first, without writing to it: the scheme is one the library serves, a SQLite path is a
path whose folder can hold the file, an existing file is empty or a SQLite database of the store's kind (read only),
and a command that only reads (`raycse report`) finds the file already there. `probe_store` asks a server (an MLflow
tracking server, a PostgreSQL or MySQL database) whether it answers and is of its kind, before a search starts.

`state_layout` derives a search's four kinds of state from one place (`--state`): MLflow's runs and artifacts, the
Optuna study, Tune's experiment state and the trials' checkpoints.
"""
from __future__ import annotations

import os
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
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
    if exists:
        _check_sqlite_kind(name, url, path, table, must_exist)
    else:
        check_writable_dir(name, str(path.parent) if str(path.parent) else ".")


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
STORE_KINDS = {"experiments": "an MLflow store", "studies": "an Optuna storage"}  # a store's kind, by its key table


def _check_sqlite_kind(name: str, url: str, path: Path, table: str, must_exist: bool) -> None:
    """An existing file is one the store can take: empty (a new file), or a SQLite database that holds no table yet
    or this kind's tables (`table`: MLflow's `experiments`, Optuna's `studies`). Read only: nothing is created."""
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as err:
        raise ConfigError.at(name, f"cannot read {shown(url)}: {err.strerror}") from None
    if not header:
        if must_exist:  # a reader that came as a search makes its store (SQLite creates the file, then writes it)
            raise ConfigError.at(name, f"no store at {shown(url)} yet: {str(path)!r} is empty")
        return  # an empty file: SQLite makes it a database on first write
    if header != SQLITE_HEADER:
        raise ConfigError.at(name, f"{shown(url)} is not a SQLite database: {str(path)!r} holds something else")
    try:
        tables = _read_tables(path)
    except sqlite3.Error as err:
        raise ConfigError.at(name, f"{shown(url)} is not a readable SQLite database ({err})") from None
    if table and (table not in tables) and (tables or must_exist):
        what = STORE_KINDS.get(table, f"a store with a {table!r} table")
        held = f"other tables ({', '.join(sorted(tables)[:4])}{', ...' if len(tables) > 4 else ''})" if tables \
            else "no table"
        raise ConfigError.at(name, f"{shown(url)} is not {what}: {str(path)!r} holds {held} and no {table!r} table")


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


def resolve_tracking_uri(tracking_uri: str | None, must_exist: bool = False, name: str = "tracking_uri") -> str:
    """`tracking_uri` (given as `name`), else $MLFLOW_TRACKING_URI, else SQLite in the working directory; checked,
    never opened (an absolute path for SQLite: trial processes run elsewhere)."""
    if tracking_uri is not None:
        uri = tracking_uri
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


def _read_tables(path: Path) -> set[str]:
    """The tables of a SQLite file, read without writing anything; sqlite3.Error when it is no SQLite database."""
    db = _read_only(path)
    try:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


def _tables(path: Path) -> set[str]:
    """The tables of a SQLite file, read without writing anything (none when it is no SQLite database)."""
    try:
        return _read_tables(path)
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


def shown_store(url: str, folder: Path | None = None) -> str:
    """A store as a page shows it: a SQLite file under `folder` (default: the working directory) by its path from
    there, as a user names it (`sqlite:///optuna.db`), not by where this machine keeps it; any other as it is, a
    password masked.

    Args:
        url: the store's URL (an MLflow tracking URI or an Optuna storage).
        folder: the folder a SQLite path is shown from; None: the working directory.

    Returns:
        The URL to show.

    Example:
        >>> shown_store("sqlite:////work/search/optuna.db", Path("/work/search"))
        'sqlite:///optuna.db'
    """
    path = sqlite_file(url)
    if path is None:
        return hidden(url)
    folder = (folder or Path.cwd()).resolve()
    try:
        return f"sqlite:///{path.resolve().relative_to(folder)}"
    except ValueError:  # elsewhere: its own path, which is the one the user gave
        return url


# ------------------------------------------------------------------------------------------------ servers
PROBE_TIMEOUT_S = 10.0  # the longest a server may take to answer the probe


def hidden(url: str) -> str:
    """The URL as it may be shown: a database URL's password masked."""
    if "@" not in url or "://" not in url or url.startswith(("http://", "https://")):
        return url
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: shown as it is (it was checked before)
        return url


def probe_store(name: str, url: str, table: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """A store on a server answers and is of its kind, asked read-only: an MLflow tracking server answers `/health`;
    a database server accepts a connection and holds no table yet or this kind's (`table`: MLflow's `experiments`,
    Optuna's `studies`). SQLite files and other schemes are left to check_tracking_uri / check_optuna_storage."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme in ("http", "https"):
        _probe_mlflow_server(name, url, timeout)
    elif scheme in ("postgresql", "mysql", "mssql"):
        _probe_database(name, url, table, timeout)


def _probe_mlflow_server(name: str, url: str, timeout: float) -> None:
    import urllib.error
    import urllib.request

    health = url.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(health, timeout=timeout) as response:
            body = response.read(64)
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):  # a server that wants credentials: MLflow's client sends them
            return
        raise ConfigError.at(name, f"{shown(url)} answers, but is not an MLflow tracking server (GET {health}: HTTP "
                                   f"{err.code})") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        reason = getattr(reason, "strerror", None) or str(reason)
        raise ConfigError.at(name, f"the MLflow tracking server at {shown(url)} does not answer ({reason}): start it "
                                   "first, or pass the address it listens on") from None
    if body.strip() != b"OK":
        raise ConfigError.at(name, f"{shown(url)} answers, but is not an MLflow tracking server (GET {health} did not "
                                   "answer OK)")


def _probe_database(name: str, url: str, table: str, timeout: float) -> None:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    backend = sqlalchemy.engine.make_url(url).get_backend_name()
    connect_args = {"connect_timeout": max(1, int(timeout))} if backend in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=connect_args)
        try:
            with engine.connect() as connection:
                tables = set(sqlalchemy.inspect(connection).get_table_names())
        finally:
            engine.dispose()
    except Exception as err:  # noqa: BLE001 - a missing driver, a refused connection, a refused login, a missing database
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()
        raise ConfigError.at(name, f"the database at {shown(hidden(url))} does not answer "
                                   f"({shown(reason[0] if reason else type(err).__name__, 160)[1:-1]})") from None
    if tables and table not in tables:
        what = STORE_KINDS.get(table, f"a store with a {table!r} table")
        raise ConfigError.at(name, f"{shown(hidden(url))} is not {what}: the database holds other tables "
                                   f"({', '.join(sorted(tables)[:4])}{', ...' if len(tables) > 4 else ''}) and no "
                                   f"{table!r} table")


# -------------------------------------------------------------------------------------------- --state
TUNE_DIR, MLFLOW_FILE, OPTUNA_FILE, ARTIFACTS_DIR = "ray_results", "mlflow.db", "optuna.db", "mlflow-artifacts"
_OBJECT_STORE = re.compile(r"^[a-z][a-z0-9+.-]*://[^/\s]")


@dataclass(frozen=True)
class StoreLayout:
    """Where a search's state goes: each store from its own flag when given, else derived from `--state`.

    tracking_uri       MLflow's runs (None: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory)
    optuna_storage     the Optuna study (None: optuna.db beside a SQLite MLflow store, else in the working directory)
    storage_path       Tune's experiment state and the trials' checkpoints
    artifact_location  MLflow's artifacts for a new experiment when the client writes them itself (a database store);
                       None: MLflow's default, or what a tracking server decides (its --artifacts-destination)
    named_by           each store's culprit in an error message: its own flag, or "state"
    """

    tracking_uri: str | None
    optuna_storage: str | None
    storage_path: str
    artifact_location: str | None = None
    named_by: dict[str, str] = field(default_factory=dict)

    def artifacts_for(self, tracking_uri: str) -> str | None:
        """The artifact location to give a new experiment in this MLflow store (none for a tracking server's)."""
        return None if tracking_uri.startswith(("http://", "https://", "databricks")) else self.artifact_location


def state_layout(state: str | None, tracking_uri: str | None = None, optuna_storage: str | None = None,
                 storage_path: str | None = None) -> StoreLayout:
    """The search's stores from `--state` (a directory, or an object-storage URI such as s3://bucket/prefix) with
    each store's own flag as an override; checked, nothing created.

    A directory holds all four: mlflow.db (runs) and mlflow-artifacts/, optuna.db (the study), ray_results/ (Tune's
    state and checkpoints). Object storage holds Tune's state, the checkpoints and MLflow's artifacts, but no
    database: MLflow's store (--tracking-uri or $MLFLOW_TRACKING_URI) and the study (--optuna-storage) must be named.
    """
    named = {"tracking_uri": "tracking_uri", "optuna_storage": "optuna_storage", "storage_path": "storage_path"}
    if state is None:
        return StoreLayout(tracking_uri, optuna_storage, storage_path or TUNE_DIR, None, named)
    check_str("state", state)
    derived = {key: "state" for key, given in (("tracking_uri", tracking_uri), ("optuna_storage", optuna_storage),
                                              ("storage_path", storage_path)) if given is None}
    named.update(derived)
    if "://" in state:
        if not _OBJECT_STORE.match(state):
            raise ConfigError.at("state", f"{shown(state)} is neither a directory nor an object-storage URI "
                                          "(s3://bucket/prefix, gs://bucket/prefix)")
        base = state.rstrip("/")
        if tracking_uri is None and not os.environ.get("MLFLOW_TRACKING_URI"):
            raise ConfigError.at("state", f"{shown(state)} is object storage: it holds Tune's state, the checkpoints "
                                          "and MLflow's artifacts, but MLflow's runs need a database: pass "
                                          "--tracking-uri (a tracking server or a database)")
        if optuna_storage is None:
            raise ConfigError.at("state", f"{shown(state)} is object storage: it holds Tune's state, the checkpoints "
                                          "and MLflow's artifacts, but the Optuna study needs a database: pass "
                                          "--optuna-storage (PostgreSQL, or SQLite on a disk that outlives the "
                                          "cluster)")
        return StoreLayout(tracking_uri, optuna_storage, storage_path or f"{base}/{TUNE_DIR}",
                           f"{base}/{ARTIFACTS_DIR}", named)
    root = check_writable_dir("state", state).resolve()
    check_path_text("state", str(root / ARTIFACTS_DIR))
    return StoreLayout(tracking_uri or f"sqlite:///{root / MLFLOW_FILE}",
                       optuna_storage or f"sqlite:///{root / OPTUNA_FILE}",
                       storage_path or str(root / TUNE_DIR), str(root / ARTIFACTS_DIR), named)
