"""A resumed stage whose snapshot names a checkpoint Tune had already deleted: the newer one takes its name.

Tune keeps one checkpoint a trial (`CheckpointConfig(num_to_keep=1)`). When a trial hands over checkpoint k+1, Tune
deletes checkpoint k and only then writes the snapshot of the search that names k+1. A search killed between the
two leaves a snapshot naming k, which no longer exists, and checkpoint k+1 on the storage: Tune's own restore fails
that trial ("Could not recover from checkpoint as it does not exist on storage anymore"), and the failure would count
against its configuration. The window is one pass of Tune's loop; a kill-and-resume test hit it about once in ten
runs on a loaded 2-core machine.

Before the resumed stage starts its first trial, this callback gives every unfinished trial whose named checkpoint
is gone the newest checkpoint left in its folder, under the name the snapshot holds: the trial then continues from
the newer checkpoint (fewer steps to train again), and Tune's next checkpoint of it takes the next free name.
"""
from __future__ import annotations

import posixpath

from ray import tune

CHECKPOINT_PREFIX = "checkpoint_"  # Tune's folder name for a trial's checkpoint k: checkpoint_{k:06d}


def recover_deleted_checkpoint(trial) -> None:
    """Move the newest checkpoint in `trial`'s folder to the path its snapshot names, when that path is gone."""
    from pyarrow.fs import FileSelector, FileType

    checkpoint = trial.checkpoint
    if checkpoint is None:
        return
    fs, named = checkpoint.filesystem, checkpoint.path.rstrip("/")
    if fs.get_file_info(named).type != FileType.NotFound:
        return
    folder, name = posixpath.split(named)
    newer = sorted(info.path for info in fs.get_file_info(FileSelector(folder, allow_not_found=True))
                   if info.type == FileType.Directory and info.base_name.startswith(CHECKPOINT_PREFIX)
                   and info.base_name > name)
    if not newer:
        return  # nothing newer either: Tune's own error stands, and the trial fails
    _move_folder(fs, newer[-1], named)
    for stale in newer[:-1]:
        fs.delete_dir(stale)


def _move_folder(fs, source: str, target: str) -> None:
    """A rename where the storage has one (a local disk), else a copy, then the source deleted (object stores)."""
    from pyarrow.fs import copy_files

    try:
        fs.move(source, target)
    except OSError:
        copy_files(source, target, source_filesystem=fs, destination_filesystem=fs)
        fs.delete_dir(source)


class RecoverDeletedCheckpoints(tune.Callback):
    """Checks, once per driver process and before the stage's first trial starts, every trial that is not finished
    (see the module's docstring). Pickled with the stage's run config, it is checked again after each `--resume`."""

    def __init__(self) -> None:
        self._checked = False

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._checked = False

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        if self._checked:
            return
        self._checked = True
        for trial in trials:
            if trial.status != "TERMINATED":
                recover_deleted_checkpoint(trial)
