"""A new SQLite MLflow store, copied from an empty one rather than migrated.

MLflow makes a new SQLite store by running every schema migration since its first release: about 1.2 CPU-seconds
(its alembic scripts loaded and run one by one), spent again by every search, comparison or test that starts in a
fresh folder. The result depends only on the MLflow version, so the first store a version makes is kept, emptied,
in the raycse cache folder (`raycse.files.cache_dir()/mlflow-store/`), and the next new store is a copy of it (a few
milliseconds); MLflow then finds its tables at their head revision and migrates nothing.

Emptied: the copy keeps the schema, its revision (`alembic_version`) and the default workspace's row, and drops the
"Default" experiment (id 0), whose artifact location MLflow derives from where the store was made; MLflow creates
it again, with this store's location, when it opens the copy. A store created this way holds what MLflow would have
written itself (tests/test_store_template.py compares the two, table by table).

Only a store that does not exist yet (or is an empty file) is copied, under the store's creation lock
(`raycse.files.sqlite_creation_lock`); a template is written beside its final name and renamed into place, so that
two processes keeping one at once leave one whole file.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from raycse.files import cache_dir

SUBDIR = "mlflow-store"
DEFAULT_EXPERIMENT_ID = 0


def template_path() -> Path:
    """Where the empty store of this MLflow version is kept.

    Returns:
        `<cache>/mlflow-store/empty-<mlflow version>.db` (it may not exist yet).

    Example:
        >>> template_path().name.startswith("empty-")
        True
    """
    import mlflow

    return cache_dir() / SUBDIR / f"empty-{mlflow.__version__}.db"


def is_new(database: Path) -> bool:
    """Whether `database` is yet to be made: no file, or an empty one (SQLite's own first state)."""
    return not database.exists() or database.stat().st_size == 0


def copy_template(database: Path) -> bool:
    """Make `database` a copy of the kept empty store, if there is one and `database` is new.

    Args:
        database: the SQLite file of a store about to be opened for the first time.

    Returns:
        True if it was copied; False if not (no template, or one that cannot be read): MLflow then migrates, and
        `keep_template` keeps the result.
    """
    template = template_path()
    if not is_new(database) or not template.is_file():
        return False
    staging = database.with_name(f".{database.name}.new")
    try:
        _backup(template, staging)
    except (OSError, sqlite3.Error):  # the cache only saves time: a template it cannot read is not used
        with contextlib.suppress(OSError):
            staging.unlink(missing_ok=True)
        return False
    os.replace(staging, database)
    return True


def keep_template(database: Path) -> None:
    """Keep `database`, a store MLflow has just made, emptied, as this version's template (unless one is kept); a
    cache folder that cannot be written keeps none, and the store is as MLflow made it either way.

    Args:
        database: the SQLite file of a store MLflow created (its tables migrated, its default experiment made).
    """
    template = template_path()
    if template.is_file():
        return
    staging = template.with_name(f".{template.name}.{os.getpid()}.new")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        _backup(database, staging, "DELETE FROM experiments WHERE experiment_id = ?", (DEFAULT_EXPERIMENT_ID,))
        os.replace(staging, template)
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            staging.unlink(missing_ok=True)


def _backup(source: Path, target: Path, *statement) -> None:
    """`source` copied to `target` page by page (SQLite's backup: consistent while another connection reads it), then
    `statement` run on the copy and the copy compacted."""
    with contextlib.closing(sqlite3.connect(source)) as origin, contextlib.closing(sqlite3.connect(target)) as copy:
        origin.backup(copy)
        if statement:
            with copy:
                copy.execute(*statement)
            copy.execute("VACUUM")
