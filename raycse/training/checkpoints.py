"""A training's checkpoints: `best/` (the best model by the objective) and `last/` (everything needed to continue).

`last/` holds the model, optimiser, LR schedule and grad-scaler states of the step runner, the `Progress` (step,
best so far, dev curve, timings, the compile decision) and every rank's RNG states, so that a resumed training ends
where an uninterrupted one with the same seed ends. Both are written atomically (built beside, then renamed); an
OSError while writing (a full disk) becomes one `CheckpointWriteError` line, the previous checkpoint intact.

best/ is written whenever the objective improves (it is the answer's model). last/ is 3-4 times the weights (Adam
keeps two moments per weight), and writing it at every evaluation can take a large share of a trial's time (at the
papers' scale, BERT-base's 1.3 GB every 125 steps); `CheckpointCadence` spaces its writes so that checkpoints take
at most CHECKPOINT_SHARE of a training's time, at the price of more steps to train again after a kill.
"""
from __future__ import annotations

import contextlib
import math
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from raycse.errors import ConfigError, first_line
from raycse.files import replace_directory
from raycse.settings.config import TrainConfig
from raycse.training import distributed as dist_utils

LAST_DIR = "last"  # the folder of everything needed to continue (beside best/)
BEST_DIR = "best"  # the best model by the objective
TRAINING_STATE_FILE = "training_state.pt"
BEST_FILES = "best_files"  # in last/'s training state: best/'s files and their sizes when last/ was written
CHECKPOINT_SHARE = TrainConfig.checkpoint_share  # of a training's time, at most, spent writing checkpoints


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, say); the previous checkpoints are intact."""


class UnreadableCheckpoint(ConfigError):
    """A checkpoint whose files cannot be read back as they were written (a disk or copy fault): last/'s training
    state does not load, or a file of best/ is not the size last/ recorded for it. `file` is the culprit, relative
    to the checkpoint (`last/training_state.pt`, `best/model.safetensors`); `reason` what is wrong with it."""

    def __init__(self, checkpoint: Path, file: str, reason: str):
        super().__init__(f"cannot resume from {checkpoint / file}: {reason}")
        self.checkpoint, self.file, self.reason = checkpoint, file, reason

    def __reduce__(self):  # pickled whole across Ray's processes (a Ray Train worker's error)
        return type(self), (self.checkpoint, self.file, self.reason)


@dataclass
class Timings:
    """Seconds spent, cumulative over the training, by what they were spent on (rank 0's clock).

    startup: model and data loading up to the first step; compile: the extra time of the steps that compiled
    (torch.compile, CUDA graph capture); train: the steps otherwise; eval: the objective's evaluations;
    checkpoint: writing best/ and last/.
    """

    startup_s: float = 0.0
    compile_s: float = 0.0
    train_s: float = 0.0
    eval_s: float = 0.0
    checkpoint_s: float = 0.0


@dataclass
class Progress:
    """Where a training stands after an evaluation: what last/ saves besides the tensors."""

    step: int = 0
    best_objective: float = -math.inf
    best_step: int = 0
    dev_curve: list[dict] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    compiled: bool | None = None  # the compile decision once taken (a resumed training keeps it)
    compile_decision: str = ""


@dataclass
class CheckpointCadence:
    """When a training writes last/: at its first evaluation, then once the time since the last write began is at
    least 1 / CHECKPOINT_SHARE (20) times the checkpoint seconds spent since then, and at least `least_interval_s`.

    The seconds spent are measured, not assumed: the last/ write itself, whatever its caller adds for it (a search
    trial: Tune's copy of the checkpoint to its storage) and the best/ written since. So from one last/ write to the
    next, checkpoints take at most 5% of the time, on any model, disk or storage; when best/ alone costs that much
    (improving at every evaluation), last/ waits. The trade: a training killed goes on from its last last/, so it
    trains again up to one interval, about 20 times a write. `least_interval_s` is the search's pacing of
    checkpoints (raycse/driver/tune/pacing.py). The last step's evaluation always writes last/ (the trainer's rule).
    """

    least_interval_s: float = 0.0
    share: float = CHECKPOINT_SHARE  # a space file's train.checkpoint_share (1: at every evaluation)
    clock: Callable[[], float] = time.monotonic
    began: float | None = None  # when the last last/ write began (None: none yet)
    spent_s: float = 0.0  # checkpoint seconds since then

    def due(self) -> bool:
        if self.began is None:
            return True
        elapsed = self.clock() - self.began
        return elapsed >= self.least_interval_s and self.spent_s <= self.share * elapsed

    def writing_last(self) -> None:
        """A last/ write begins now: the next interval is measured from here."""
        self.began, self.spent_s = self.clock(), 0.0

    def spent(self, seconds: float) -> None:
        """Seconds spent on checkpoints (a last/ or best/ write, a copy of them to storage)."""
        self.spent_s += seconds


def _rng_states() -> dict:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _restore_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def writing_checkpoint(path: Path):
    """OSErrors while a checkpoint is written become one CheckpointWriteError naming the checkpoint."""
    @contextlib.contextmanager
    def guard():
        try:
            yield
        except OSError as err:
            if isinstance(err, CheckpointWriteError):
                raise
            reason = err.strerror or str(err)
            raise CheckpointWriteError(err.errno, f"cannot write the checkpoint {path}: {reason}; "
                                                  "the previous checkpoint is intact") from err
    return guard()


def save_last(output_dir: Path, runner, progress: Progress, rank: int) -> None:
    """Write last/ atomically (rank 0): the tensors, the progress, and every rank's RNG states (gathered)."""
    rng_states = dist_utils.gather_objects(_rng_states())  # a collective: every rank takes part
    if rank != 0:
        return
    target = output_dir / LAST_DIR
    with writing_checkpoint(target):
        output_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".last.", suffix=".partial", dir=output_dir))
        try:
            torch.save({
                "model": runner.encoder.state_dict(),
                "optimizer": runner.optimizer.state_dict(),
                "scheduler": runner.scheduler.state_dict(),
                "scaler": runner.scaler.state_dict(),
                "progress": asdict(progress),
                "rng_by_rank": rng_states,
                BEST_FILES: file_sizes(output_dir / BEST_DIR),  # best/ as it is now: what resuming expects of it
            }, staging / TRAINING_STATE_FILE)
            replace_directory(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def file_sizes(folder: Path) -> dict[str, int]:
    """Every file under `folder` (a relative path) with its size in bytes; {} when there is no such folder."""
    if not folder.is_dir():
        return {}
    return {path.relative_to(folder).as_posix(): path.stat().st_size for path in sorted(folder.rglob("*"))
            if path.is_file()}


def load_last(last_dir: Path, runner, rank: int) -> Progress:
    """Put the runner back where last/ left it; returns the progress (RNG states restored last). A checkpoint that
    cannot be read as it was written raises `UnreadableCheckpoint` before the runner is touched."""
    checkpoint, state_file = last_dir.parent, last_dir / TRAINING_STATE_FILE
    if not state_file.is_file():
        raise ConfigError(f"cannot resume: {last_dir} holds no {TRAINING_STATE_FILE}")
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=False)  # RNG states must stay on the CPU
        saved_progress, rng_by_rank = state["progress"], state["rng_by_rank"]
    except Exception as err:  # noqa: BLE001 - a damaged file fails in the zip reader, pickle or a missing key
        file = f"{last_dir.name}/{TRAINING_STATE_FILE}"
        # the reader's first sentence: torch's runs on with advice about corrupted files
        raise UnreadableCheckpoint(checkpoint, file, first_line(err).split(". ")[0].rstrip(".")) from None
    best = file_sizes(checkpoint / BEST_DIR)
    for name, size in state.get(BEST_FILES, {}).items():  # none recorded by a checkpoint older than the record
        if best.get(name) != size:
            found = "missing" if name not in best else f"{best[name]:,} bytes"
            raise UnreadableCheckpoint(checkpoint, f"{BEST_DIR}/{name}", f"{found}, {size:,} were written")
    if len(rng_by_rank) != dist_utils.world_size():
        raise ConfigError(f"cannot resume from {last_dir}: it was written by {len(rng_by_rank)} worker(s), "
                          f"this training has {dist_utils.world_size()}")
    runner.encoder.load_state_dict(state["model"])
    runner.optimizer.load_state_dict(state["optimizer"])
    runner.scheduler.load_state_dict(state["scheduler"])
    runner.scaler.load_state_dict(state["scaler"])
    progress = Progress(**{**saved_progress, "timings": Timings(**saved_progress["timings"])})
    _restore_rng_states(rng_by_rank[rank])
    return progress
