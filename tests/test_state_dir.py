"""`--state`: one place for a search's four kinds of state, each store's own flag an override.

Fast: the derivation (`state_layout`) and its refusals at the edge. Slow: a real 2-trial search given only
`--state DIR` keeps MLflow's runs and artifacts, the Optuna study, Tune's state and the checkpoints inside DIR and
nothing in its working directory.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from raycse.errors import ConfigError
from raycse.tracking.stores import state_layout


def test_a_directory_derives_all_four_and_each_flag_overrides_it(tmp_path):
    root = tmp_path / "state"
    layout = state_layout(str(root))
    assert (layout.tracking_uri, layout.optuna_storage, layout.storage_path, layout.artifact_location) == (
        f"sqlite:///{root / 'mlflow.db'}", f"sqlite:///{root / 'optuna.db'}", str(root / "ray_results"),
        str(root / "mlflow-artifacts"))
    assert set(layout.named_by.values()) == {"state"}
    assert not root.exists()  # checked, not created

    layout = state_layout(str(root), tracking_uri="http://127.0.0.1:5000", storage_path="s3://b/p")
    assert layout.tracking_uri == "http://127.0.0.1:5000" and layout.storage_path == "s3://b/p"
    assert layout.optuna_storage == f"sqlite:///{root / 'optuna.db'}"
    assert layout.named_by == {"tracking_uri": "tracking_uri", "optuna_storage": "state",
                               "storage_path": "storage_path"}
    assert layout.artifacts_for("http://127.0.0.1:5000") is None  # a server decides where its artifacts go
    assert layout.artifacts_for(f"sqlite:///{root / 'mlflow.db'}") == str(root / "mlflow-artifacts")


def test_without_state_nothing_changes():
    layout = state_layout(None)
    assert (layout.tracking_uri, layout.optuna_storage, layout.storage_path, layout.artifact_location) == (
        None, None, "ray_results", None)


def test_object_storage_holds_files_and_asks_for_the_two_databases(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match="^state: 's3://b/raycse/' is object storage.*--tracking-uri"):
        state_layout("s3://b/raycse/", optuna_storage="postgresql+psycopg2://u@db/optuna")
    with pytest.raises(ConfigError, match="^state: .*--optuna-storage"):
        state_layout("s3://b/raycse", tracking_uri="http://head:5000")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://head:5000")  # what every node of a launcher cluster exports
    layout = state_layout("s3://b/raycse/", optuna_storage="sqlite:////home/ray/raycse-head/optuna.db")
    assert layout.tracking_uri is None  # $MLFLOW_TRACKING_URI, resolved later
    assert layout.storage_path == "s3://b/raycse/ray_results"
    assert layout.artifact_location == "s3://b/raycse/mlflow-artifacts"
    for bad in ("s3://", "://x", "s3:// bucket"):
        with pytest.raises(ConfigError, match="neither a directory nor an object-storage URI"):
            state_layout(bad, tracking_uri="http://h:5000", optuna_storage="sqlite:////tmp/o.db")


def test_a_file_is_no_state_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="^state: .*exists and is not a directory"):
        state_layout(str(tmp_path / "file"))


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_search_with_only_state_keeps_everything_inside_it(tmp_path, tiny_bert_dir):
    import optuna
    from mlflow.tracking import MlflowClient
    from test_search import runs_of, write_space

    space = write_space(tmp_path, tiny_bert_dir, "state-dir", num_samples=2, test_eval="none")
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run([sys.executable, "-m", "raycse", "search", "--space", str(space), "--state", str(state),
                           "--no-confirm"], capture_output=True, text=True, timeout=800, cwd=work, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    assert {p.name for p in state.iterdir()} >= {"mlflow.db", "optuna.db", "ray_results", "mlflow-artifacts"}
    # nothing of the search's state in its working directory (the report page is a copy of an MLflow artifact)
    assert not {p.name for p in work.iterdir()} & {"mlflow.db", "optuna.db", "ray_results", "mlruns"}
    client = MlflowClient(tracking_uri=f"sqlite:///{state / 'mlflow.db'}")
    parent, children = runs_of(client, "state-dir")
    assert len(children) == 2
    assert parent.info.artifact_uri.startswith(str(state / "mlflow-artifacts"))
    assert list((state / "mlflow-artifacts").rglob("search_summary.json"))
    study = optuna.load_study(study_name="state-dir", storage=f"sqlite:///{state / 'optuna.db'}")
    assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials) == \
        sorted(r.data.tags["raycse.trial_id"] for r in children)
    assert list((state / "ray_results").rglob("checkpoint_*"))  # the trials' checkpoints, beside Tune's state
