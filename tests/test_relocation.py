"""A search's folder copied, moved or mounted elsewhere: the commands work from the new place, or refuse in one line,
and never write into the old place.

Fast: `Relocation`'s mapping, and finding where a folder was from its MLflow artifact location. Slow: one tiny search
(the tiny BERT, two trials, --no-confirm) in a folder copied elsewhere; `report`, `status`, `load`, `export` and
`--resume` from the copy; the original's every byte unchanged, and the copy's stores unchanged by the read-only
commands; then the same with the original gone.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from raycse.tracking.relocation import NOT_MOVED, Relocation, relocation_of

EXPERIMENT = "relocated"


# ------------------------------------------------------------------------------------------------ fast
def test_paths_under_the_recorded_folder_are_read_under_the_present_one():
    moved = Relocation(recorded="/old/search", current="/new/place")
    assert moved.moved and not NOT_MOVED.moved
    assert moved.path("/old/search/ray_results/x/checkpoint_000001") == "/new/place/ray_results/x/checkpoint_000001"
    assert moved.path("sqlite:////old/search/optuna.db") == "sqlite:////new/place/optuna.db"
    assert moved.path("file:///old/search/mlruns/1/abc/artifacts") == "file:///new/place/mlruns/1/abc/artifacts"
    for outside in ("/old/search-2/optuna.db", "/elsewhere/ray_results", "s3://old/search", "report/index.html",
                    "sqlite:////old/searchx.db"):
        assert moved.path(outside) == outside
    summary = {"optuna_storage": "sqlite:////old/search/optuna.db", "n": 3, "objective": "stsb_dev",
               "trials": [{"checkpoint": "/old/search/ray_results/a", "params": {"tau": 0.05}}, {"checkpoint": None}]}
    assert moved.values(summary) == {
        "optuna_storage": "sqlite:////new/place/optuna.db", "n": 3, "objective": "stsb_dev",
        "trials": [{"checkpoint": "/new/place/ray_results/a", "params": {"tau": 0.05}}, {"checkpoint": None}]}
    assert NOT_MOVED.values(summary) is summary


def test_a_folder_is_found_moved_from_its_artifact_location(tmp_path):
    here = tmp_path / "copy"
    (here / "mlruns" / "1").mkdir(parents=True)
    (here / "mlflow-artifacts").mkdir()
    uri = f"sqlite:///{here / 'mlflow.db'}"
    assert relocation_of(uri, "/gone/search/mlruns/1") == Relocation("/gone/search", str(here.resolve()))
    assert relocation_of(uri, "file:///gone/state/mlflow-artifacts") == Relocation("/gone/state", str(here.resolve()))
    assert relocation_of(uri, str(here / "mlruns" / "1")) == NOT_MOVED  # where it was written
    (tmp_path / "link").symlink_to(here)
    assert relocation_of(uri, str(tmp_path / "link" / "mlruns" / "1")) == NOT_MOVED  # the same place, another name
    assert relocation_of(f"sqlite:///{tmp_path / 'link' / 'mlflow.db'}", str(here / "mlruns" / "1")) == NOT_MOVED
    assert relocation_of(uri, "/work/mlruns/2") == NOT_MOVED  # artifacts kept elsewhere, and not beside the store
    assert relocation_of(uri, "s3://bucket/mlflow-artifacts") == NOT_MOVED
    assert relocation_of("http://head:5000", "/gone/search/mlruns/1") == NOT_MOVED
    assert relocation_of("postgresql://u@db/mlflow", "/gone/search/mlruns/1") == NOT_MOVED


# ------------------------------------------------------------------------------------------------ slow
def checksum(folder: Path) -> dict[str, str]:
    """Every file under `folder` (SQLite's side files included) by its bytes' SHA-256."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def store_contents(folder: Path) -> dict[str, str]:
    """What the stores hold: each SQLite database's rows (read through a read-only connection, so that reading
    changes nothing) and every other file's bytes. SQLite's -wal and -shm files are left out: any reader's
    connection maintains them, and folds the log into the database file, without changing a row."""
    contents = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if not path.is_file() or name.endswith(("-wal", "-shm")):
            continue
        if path.suffix == ".db":
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                contents[name] = hashlib.sha256("\n".join(db.iterdump()).encode()).hexdigest()
            finally:
                db.close()
        else:
            contents[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return contents


@pytest.fixture(scope="module")
def searched(tmp_path_factory, tiny_bert_dir, few_sts_pairs) -> Path:
    """A finished tiny search, run in its own folder as a user runs one: no store flag, the working directory."""
    from test_search import write_space

    root = tmp_path_factory.mktemp("relocation")
    space = write_space(root, tiny_bert_dir, EXPERIMENT, num_samples=2, test_eval="best")
    folder = root / "original"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(RAYCSE_STS_DATA=str(few_sts_pairs), RAYCSE_CACHE_DIR=str(root / "cache"))
    done = subprocess.run([sys.executable, "-m", "raycse", "search", "--space", str(space), "--no-confirm"],
                          capture_output=True, text=True, timeout=800, cwd=folder, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {"mlflow.db", "optuna.db", "ray_results", "mlruns", "report"} <= {p.name for p in folder.iterdir()}
    return folder


def run_cli(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    """A raycse command run in `folder`, as a user who copied the search there runs it."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([sys.executable, "-m", "raycse", *argv], capture_output=True, text=True, timeout=600,
                          cwd=folder, env=env)


def load_in(folder: Path) -> str:
    """`raycse.load` in `folder`: the winner's checkpoint and the Optuna storage it names, one a line."""
    code = (f"import raycse; o = raycse.load({EXPERIMENT!r}); print(o.best_checkpoint); "
            "print(o.summary['optuna_storage'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=folder,
                          env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_copied_search_works_from_its_new_place_and_leaves_the_original_untouched(searched, tmp_path):
    original = checksum(searched)
    copy = tmp_path / "copied"
    shutil.copytree(searched, copy, symlinks=True)
    stores = store_contents(copy)

    # read-only: status and load answer from the copy's stores and write nothing to them
    assert run_cli(copy, "status", EXPERIMENT).returncode == 0
    checkpoint, storage = load_in(copy).split()
    assert checkpoint.startswith(f"{copy}/ray_results/") and Path(checkpoint).is_dir()
    assert storage == f"sqlite:///{copy}/optuna.db"
    assert store_contents(copy) == stores

    # report writes its page and logs it on the parent run, in the copy, and changes nothing else ('report --help')
    logged = sorted(copy.glob("mlruns/*/*/artifacts/report/index.html"))
    assert len(logged) == 1
    before = logged[0].stat().st_mtime_ns
    (copy / "report" / "index.html").unlink()
    done = run_cli(copy, "report", EXPERIMENT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (copy / "report" / "index.html").is_file() and logged[0].stat().st_mtime_ns > before
    after = store_contents(copy)
    changed = {name for name in {*stores, *after} if stores.get(name) != after.get(name)}
    # the page is rewritten (its logged copy's time above); its text may be the same byte for byte, as it names the
    # stores the way the user does (sqlite:///optuna.db), not by the folder's path: nothing but the report changes
    assert all(name.startswith("report/") or "/artifacts/report/" in name for name in changed), changed

    exported = tmp_path / "exported"
    done = run_cli(copy, "export", EXPERIMENT, str(exported))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (exported / "README.md").is_file() and list(exported.glob("*.safetensors"))

    # --resume continues a search only where it was written (Tune and Optuna keep that folder's paths): one line
    space = searched.parent / f"{EXPERIMENT}.yaml"
    before = checksum(copy)
    done = run_cli(copy, "search", "--space", str(space), "--no-confirm", "--resume")
    assert done.returncode == 2 and done.stderr.startswith("raycse: error: --resume") \
        and len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]
    assert checksum(copy) == before

    assert checksum(searched) == original  # not a byte of the original changed, its SQLite side files included

    # moved: the original gone, the copy still answers, and nothing comes back at the old place
    away = searched.with_name("original-away")
    searched.rename(away)
    try:
        assert run_cli(copy, "report", EXPERIMENT).returncode == 0
        assert load_in(copy).split()[0].startswith(f"{copy}/")
        assert not searched.exists()
    finally:
        away.rename(searched)
