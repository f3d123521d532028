"""raycse/driver/tune/checkpoint_recovery.py on a real Tune experiment: a snapshot naming a checkpoint that Tune had
deleted after taking a newer one (a search killed between the deletion and the next snapshot) no longer fails the
trial on resume; it continues from the newer checkpoint. Without the callback, Tune's own restore fails it."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _trainable(config):
    """Hands over one checkpoint holding step 1 and fails; restored, it reports the step its checkpoint holds."""
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "step").write_text("1")
            tune.report({"step": 1}, checkpoint=tune.Checkpoint.from_directory(folder))
        raise RuntimeError("stopped after its first checkpoint")
    with checkpoint.as_directory() as folder:
        tune.report({"step": 2, "resumed_from": int(Path(folder, "step").read_text())})


def _killed_in_the_window(tmp_path: Path, name: str, callbacks: list) -> Path:
    """A finished run whose one trial failed after its checkpoint 0, then left as a kill in Tune's window leaves it:
    the snapshot names checkpoint_000000, and the storage holds only the newer checkpoint_000001 (step 2)."""
    from ray import tune

    tune.Tuner(_trainable, run_config=tune.RunConfig(
        name=name, storage_path=str(tmp_path), callbacks=callbacks, verbose=0,
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1), failure_config=tune.FailureConfig(max_failures=0),
    )).fit()
    (named,) = (tmp_path / name).glob("*/checkpoint_000000")
    (named / "step").write_text("2")
    named.rename(named.with_name("checkpoint_000001"))
    return tmp_path / name


def test_a_snapshot_naming_a_deleted_checkpoint_resumes_from_the_newer_one(tmp_path, local_ray):
    from ray import tune

    from raycse.driver.tune.checkpoint_recovery import RecoverDeletedCheckpoints

    path = _killed_in_the_window(tmp_path, "recovered", [RecoverDeletedCheckpoints()])
    (result,) = tune.Tuner.restore(str(path), trainable=_trainable, resume_errored=True).fit()
    assert result.error is None and result.metrics["resumed_from"] == 2
    (trial,) = [folder for folder in path.iterdir() if folder.is_dir()]
    assert sorted(p.name for p in trial.glob("checkpoint_*")) == ["checkpoint_000000"]  # moved, not copied

    # the same state restored without the callback: Tune's own restore fails the trial
    path = _killed_in_the_window(tmp_path, "unrecovered", [])
    (result,) = tune.Tuner.restore(str(path), trainable=_trainable, resume_errored=True).fit()
    assert result.error is not None and "does not exist on storage" in str(result.error)
