"""What a trial that has ended keeps on Tune's storage: its best/ (the weights of its best evaluation), not its last/.

A trial's Tune checkpoint holds best/ and last/: the weights, the optimiser's state, the RNG states and the data
position, 3-4 times the weights, so that a trial killed or crashed goes on where it was. Once the trial has ended
(every step run, stopped by ASHA, diverged, or failed for good) nothing continues it: Tune restarts no trial it
holds as ended, and a resumed search replays the result of a trial whose run MLflow holds as ended
(raycse.driver.tune.replay) instead of training it. So its last/ is deleted then, unless the search keeps it
(--keep-checkpoints); best/ stays, for the report, the test scoring and the registered model.

The driver deletes it, not the trial: a trial that ASHA stops is told nothing (Tune stops its function in its next
report), and its checkpoint is Tune's copy on the storage, not the trial's folder. The driver's MLflow callback
deletes it on its writer thread right after the trial's run is recorded as ended (raycse.driver.tune.callback):
until then a search killed and resumed may restart the trial from its checkpoint (Tune's snapshot can predate the
trial's end), which needs last/; from then on it replays instead. A search killed between the two writes leaves
last/ in place, and the replayed trial's end deletes it. Tune itself never touches a trial's checkpoint after the
trial has ended (CheckpointConfig(num_to_keep=1) deletes a checkpoint only when a newer one of the same trial comes),
and the checkpoint's folder stays, best/ inside: no snapshot ever names a missing folder, so
raycse.driver.tune.checkpoint_recovery has nothing to recover.
"""
from __future__ import annotations

from collections.abc import Callable


def drop_training_state(checkpoint, log: Callable[[str], None]) -> None:
    """Delete last/ from a trial's Tune checkpoint (a `ray.tune.Checkpoint` on any storage) if it holds one. A storage
    that refuses leaves it in place, with one line: the search goes on."""
    from pyarrow.fs import FileType

    from raycse.training.checkpoints import LAST_DIR

    if checkpoint is None:
        return
    path = f"{checkpoint.path.rstrip('/')}/{LAST_DIR}"
    try:
        if checkpoint.filesystem.get_file_info(path).type == FileType.Directory:
            checkpoint.filesystem.delete_dir(path)
    except OSError as err:
        log(f"could not delete a finished trial's training state {path}: {err}")
