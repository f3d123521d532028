"""raycse/tracking/store_template.py: a new SQLite MLflow store copied from the kept empty one holds what MLflow would
have written itself, and MLflow migrates nothing when it opens it. A real MLflow, real SQLite files."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from raycse.tracking import store_template
from raycse.tracking.tracker import Tracker


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def contents(database: Path) -> dict[str, object]:
    """The schema and every row of every table, the default experiment's times left out (they say when)."""
    with sqlite3.connect(database) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        found = {"schema": sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall())}
        for table in tables:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info('{table}')")]
            kept = [c for c in columns if not c.endswith("_time")]
            found[table] = sorted(db.execute(f"SELECT {', '.join(kept)} FROM '{table}'").fetchall(), key=repr)
    return found


def count_migrations(monkeypatch) -> list[str]:
    """MLflow's own `_initialize_tables` (every migration from an empty database), run as before and counted."""
    import mlflow.store.db.utils as db_utils

    calls = []
    original = db_utils._initialize_tables

    def initialize_tables(engine):
        calls.append(str(engine.url))
        return original(engine)

    monkeypatch.setattr(db_utils, "_initialize_tables", initialize_tables)
    return calls


def test_a_new_store_is_a_copy_of_the_kept_empty_one_and_holds_what_mlflow_writes(tmp_path, cache, monkeypatch):
    assert not store_template.template_path().exists()
    migrations = count_migrations(monkeypatch)
    # MLflow puts the default experiment's artifacts under the working directory's mlruns/: each store is made in
    # its own, so that a default experiment copied from the first store would show in the second
    first = tmp_path / "first" / "mlflow.db"
    first.parent.mkdir()
    monkeypatch.chdir(first.parent)
    Tracker(f"sqlite:///{first}", "search-a")
    assert migrations == [f"sqlite:///{first}"]  # no template yet: MLflow migrated this one
    template = store_template.template_path()
    assert template.parent == cache / "mlflow-store" and template.is_file()
    with sqlite3.connect(template) as db:  # kept emptied: no default experiment, whose location is the first store's
        assert db.execute("SELECT COUNT(*) FROM experiments").fetchone() == (0,)

    second = tmp_path / "second" / "mlflow.db"
    second.parent.mkdir()
    monkeypatch.chdir(second.parent)
    tracker = Tracker(f"sqlite:///{second}", "search-a")
    assert migrations == [f"sqlite:///{first}"]  # copied: nothing migrated
    # what MLflow made for the first store, but for the default experiment's location: the second store's
    expected = contents(first)
    expected["experiments"] = [tuple(str(v).replace(str(first.parent), str(second.parent)) if isinstance(v, str) else v
                                     for v in row) for row in expected["experiments"]]
    assert contents(second) == expected
    default = tracker.client.get_experiment("0")
    assert default.name == "Default" and default.artifact_location == str(second.parent / "mlruns" / "0")
    # and it records like any store
    run = tracker.start_run("trial", tags={"raycse.stage": "search"})
    tracker.client.log_metric(run, "objective", 0.5, step=2)
    tracker.end_run(run)
    assert tracker.client.get_run(run).data.metrics == {"objective": 0.5}


def test_an_existing_store_is_never_replaced_and_a_template_of_another_version_is_not_read(tmp_path, cache,
                                                                                           monkeypatch):
    store = tmp_path / "mlflow.db"
    tracker = Tracker(f"sqlite:///{store}", "mine")
    tracker.end_run(tracker.start_run("kept"))
    assert store_template.copy_template(store) is False  # it exists: left as it is
    assert Tracker(f"sqlite:///{store}", "mine").client.search_runs([tracker.experiment_id])[0].info.run_name == "kept"

    import mlflow

    monkeypatch.setattr(mlflow, "__version__", "0.0.0-another")  # the kept template belongs to the real version
    assert store_template.copy_template(tmp_path / "other.db") is False
    assert not (tmp_path / "other.db").exists()


def test_a_cache_that_cannot_be_written_or_read_costs_the_migration_and_nothing_else(tmp_path, monkeypatch):
    migrations = count_migrations(monkeypatch)
    blocked = tmp_path / "a-file"  # the cache folder's place holds a file: nothing can be kept under it
    blocked.write_text("")
    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(blocked))
    tracker = Tracker(f"sqlite:///{tmp_path / 'one.db'}", "mine")
    tracker.end_run(tracker.start_run("recorded"))
    assert not store_template.template_path().exists() and len(migrations) == 1

    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path / "cache"))  # a template that is not a SQLite file
    store_template.template_path().parent.mkdir(parents=True)
    store_template.template_path().write_bytes(b"not a database" * 100)
    tracker = Tracker(f"sqlite:///{tmp_path / 'two.db'}", "mine")
    tracker.end_run(tracker.start_run("recorded"))
    assert len(migrations) == 2  # MLflow made the store itself
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")] == []  # no copy left half made
