"""The training loop: one contrastive training of a sentence encoder, read top to bottom.

Knows nothing of Ray or MLflow: progress leaves through callbacks (`on_eval`, `on_step`), so the same loop
runs under `raycse train`, as a search trial in process, or on W data-parallel workers started by Ray Train
(torch.distributed already initialised by the caller). SimCSE's recipe throughout: each unsupervised
sentence is encoded twice in one forward pass of 2N rows (two dropout masks -> z1, z2), AdamW with linear
decay and no warm-up, gradients clipped to norm 1 (the Hugging Face Trainer's default, which every paper's
code trains with), the objective scored every `eval_steps`, the best checkpoint kept. One step, from a tokenised
batch to the optimiser's update, is `StepRunner`'s (step_runner.py).

The output directory:

  best/          the best checkpoint by the objective: a model directory (Hugging Face + sentence-transformers)
  last/          everything needed to continue after the evaluation that wrote it (model, optimiser, LR schedule,
                 RNG states, position in the data, the dev curve so far): `train(..., resume=True)` picks it up and
                 ends where an uninterrupted training with the same seed would have ended
  results.json   written at the end: the figures, the dev curve, the configuration, where the time went

best/ is written whenever the objective improves, last/ at every evaluation or, given a `CheckpointCadence` (a
search trial's), when the cadence says and at the last step. Both are written atomically (build beside, then
rename), so a kill or a full disk at any moment leaves the previous ones whole.
"""
from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from raycse.data.corpus import GlobalBatches, load_examples
from raycse.data.tokens import SharedTokens, data_fingerprint
from raycse.encoder.model import Encoder, encode_fn, pick_device
from raycse.errors import ConfigError
from raycse.evaluation.sts import DevObjective, build_objective, evaluate_encoder
from raycse.files import write_json_atomic
from raycse.losses import build_loss
from raycse.seeds import derived_seed
from raycse.settings.config import TrainConfig
from raycse.training import distributed as dist_utils
from raycse.training.batches import training_loader
from raycse.training.checkpoints import (
    CheckpointCadence,
    Progress,
    Timings,
    load_last,
    save_last,
    writing_checkpoint,
)
from raycse.training.compile_policy import CompileProbe, decide_compile
from raycse.training.step_runner import StepRunner

NONFINITE_CHECK_EVERY = 10  # steps between host syncs of the "loss went non-finite" flag


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the trial ends with status 'diverged'."""

    def __init__(self, step: int):
        super().__init__(f"loss became non-finite by step {step}")
        self.step = step


@dataclass
class EvalReport:
    """What the loop tells its caller after each evaluation of the objective (on every worker)."""

    step: int
    total_steps: int
    objective: float
    best_objective: float
    best_step: int
    dev_scores: dict[str, float]  # the objective's components by name (stsb_dev, sickr_dev, dev_file)
    train_loss: float
    sentences_per_s: float
    loss_stats: dict[str, float]  # the loss's own diagnostics, means since the last evaluation (DCLR's, say)
    timings: Timings
    compile_decision: str
    checkpoint: str | None  # rank 0, when this evaluation wrote last/: the output directory (best/, last/); else None


# ----------------------------------------------------------------------------------------------- setup
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def freeze(encoder: Encoder, device: torch.device) -> Encoder:
    """`encoder`, in place, as a model that never trains: no gradients, eval mode, on `device`, and on CUDA in
    bf16 (fp16 where unsupported), since without optimiser steps it needs no float32 master weights."""
    encoder.requires_grad_(False).eval().to(device)
    if device.type == "cuda":
        encoder.to(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return encoder


def load_complementary(config: TrainConfig, device: torch.device) -> Encoder:
    """DCLR's frozen complementary model (`freeze`): a given checkpoint, else the starting weights."""
    source = config.complementary or config.model
    encoder = Encoder.from_pretrained(source, pooler=config.poolers()[1], trust_remote_code=config.trust_remote_code)
    return freeze(encoder, device)


def training_batches(config: TrainConfig, examples: list | None, shared_tokens: SharedTokens | None, rank: int,
                     world_size: int) -> tuple[GlobalBatches, SharedTokens | None]:
    """This worker's share of every global batch, and the shared token ids the loader pads them from (None when
    they were made from other data than this configuration's: then the loader tokenises the examples)."""
    if shared_tokens is not None and shared_tokens.fingerprint == data_fingerprint(config):
        examples = range(len(shared_tokens))  # the loader pads the shared ids of these indices (no list: 1M ints)
    else:
        shared_tokens = None
        examples = examples if examples is not None else load_examples(config)
    return GlobalBatches(examples, config.batch_size, config.seed, rank, world_size), shared_tokens


def count_steps(config: TrainConfig, batches_per_epoch: int) -> int:
    """Every epoch's batches, capped by max_steps."""
    total_steps = batches_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    return total_steps


def start_compiling(config: TrainConfig, runner: StepRunner, total_steps: int, compile_seconds: float | None,
                    progress: Progress) -> CompileProbe:
    """Compile `runner` now if the decision is made (compile "always" or "never", or kept by a resumed training);
    the probe returned decides compile="auto" after the first steps (`CompileProbe`)."""
    device = runner.device
    if progress.compiled is None and config.compile != "auto":
        progress.compiled, progress.compile_decision = decide_compile(config.compile, device, total_steps, None, None)
    if progress.compiled:
        runner.compile()
    return CompileProbe(config.compile, device, total_steps, progress.step, compile_seconds, progress)


# -------------------------------------------------------- the loop's clock, loss meter and evaluations
class StepClock:
    """Where a training's wall clock goes, added up in `timings`: the steps (train_s), the extra time of a step that
    records a CUDA graph (compile_s), evaluations and checkpoints. CUDA runs asynchronously, so every boundary
    between two of these waits for the device first."""

    def __init__(self, timings: Timings, device: torch.device):
        self.timings, self.device = timings, device
        self.window_start = time.perf_counter()

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    @contextlib.contextmanager
    def step(self, step: int, compiling: bool):
        """One training step; a step that compiles counts an ordinary step's time as training, the rest as
        compiling."""
        if not compiling:
            yield
            return
        now = self._now()
        self.timings.train_s += now - self.window_start
        yield
        elapsed = self._now() - now
        typical = self.timings.train_s / max(step - 1, 1)
        self.timings.compile_s += max(0.0, elapsed - typical)
        self.timings.train_s += min(elapsed, typical)
        self.window_start = time.perf_counter()

    @contextlib.contextmanager
    def paused(self):
        """Time out of training (an evaluation): the steps so far are counted, the clock restarts after."""
        self.timings.train_s += self._now() - self.window_start
        yield
        self.window_start = time.perf_counter()

    @contextlib.contextmanager
    def spent_on(self, what: str):
        """Add the block's seconds to `timings.<what>_s` (eval, checkpoint)."""
        started = self._now()
        yield
        setattr(self.timings, f"{what}_s", getattr(self.timings, f"{what}_s") + time.perf_counter() - started)


class LossMeter:
    """The loss and the loss's own statistics summed on the device since the last evaluation (no host sync per
    step), and whether the loss has gone non-finite since the training began."""

    def __init__(self, device: torch.device):
        self.nonfinite = torch.zeros((), dtype=torch.float32, device=device)
        self.loss_sum = torch.zeros((), dtype=torch.float32, device=device)
        self.stats_sum: dict[str, torch.Tensor] = {}
        self.steps = 0

    def add(self, loss: torch.Tensor, stats: dict[str, torch.Tensor]) -> None:
        self.nonfinite = torch.maximum(self.nonfinite, (~torch.isfinite(loss)).float())
        self.loss_sum += torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0)
        for name, value in stats.items():
            self.stats_sum[name] = self.stats_sum.get(name, 0.0) + value
        self.steps += 1

    def diverged(self) -> bool:
        """Whether any worker's loss went non-finite (a host sync: called every few steps only)."""
        return dist_utils.any_flag(self.nonfinite)

    def means(self) -> tuple[float, dict[str, float]]:
        """(mean loss, mean statistics) since the last call, which starts the next window."""
        loss = float(self.loss_sum.item()) / self.steps
        stats = {k: float(v.item()) / self.steps for k, v in self.stats_sum.items()}
        self.loss_sum.zero_()
        self.stats_sum, self.steps = {}, 0
        return loss, stats


@dataclass
class Evaluation:
    """Scoring the objective, keeping the checkpoints and telling the caller (`on_eval`), at every `eval_steps` and
    at the last step."""

    objective: DevObjective | None  # on rank 0, None on the other workers (rank 0's figure is broadcast)
    encoder: Encoder
    eval_pooler: str
    runner: StepRunner
    progress: Progress
    clock: StepClock
    output_dir: Path
    rank: int
    sentences_per_step: int  # the global batch
    on_eval: Callable[[EvalReport], None] | None
    cadence: CheckpointCadence | None = None  # when last/ is written (None: at every evaluation)

    def __call__(self, step: int, total_steps: int, meter: LossMeter) -> EvalReport:
        device, progress = self.runner.device, self.progress
        with self.clock.spent_on("eval"):
            scores = self.objective(encode_fn(self.encoder, self.eval_pooler)) if self.objective else {"objective": 0.0}
            value = dist_utils.broadcast_float(scores["objective"], device)
        improved = DevObjective.better(value, progress.best_objective) or progress.best_step == 0  # the first saves
        if improved:
            progress.best_objective, progress.best_step = value, step
        dev_scores = {k: v for k, v in scores.items() if k != "objective"}
        train_loss, loss_stats = meter.means()
        progress.step = step
        progress.dev_curve.append({"step": step, "objective": value, **dev_scores, "train_loss": train_loss})
        with self.clock.spent_on("checkpoint"):
            wrote_last = self.write_checkpoints(improved, last_step=step == total_steps)
        timings = progress.timings
        report = EvalReport(
            step=step, total_steps=total_steps, objective=value, best_objective=progress.best_objective,
            best_step=progress.best_step, dev_scores=dev_scores, train_loss=train_loss,
            sentences_per_s=self.sentences_per_step * step / max(timings.train_s, 1e-9), loss_stats=loss_stats,
            timings=Timings(**asdict(timings)), compile_decision=progress.compile_decision,
            checkpoint=str(self.output_dir) if self.rank == 0 and wrote_last else None)
        if self.on_eval is not None:
            self.on_eval(report)
        return report

    def write_checkpoints(self, improved: bool, last_step: bool) -> bool:
        """best/ if the objective improved; last/ at every evaluation, or when the cadence says and at the last step.
        Returns whether last/ was written: rank 0 decides for every worker (writing last/ is a collective)."""
        started = time.perf_counter()
        with writing_checkpoint(self.output_dir / "best"):
            if improved and self.rank == 0:
                self.encoder.save(self.output_dir / "best", pooler=self.eval_pooler)
        cadence = self.cadence
        if cadence is not None:
            cadence.spent(time.perf_counter() - started)
            if not dist_utils.broadcast_float(float(last_step or cadence.due()), self.runner.device):
                return False
            cadence.writing_last()
        started = time.perf_counter()
        save_last(self.output_dir, self.runner, self.progress, self.rank)
        if cadence is not None:
            cadence.spent(time.perf_counter() - started)
        return True


# ------------------------------------------------------------------------------------------- train
def train(config: TrainConfig, on_eval: Callable[[EvalReport], None] | None = None,
          on_step: Callable[[int, int], None] | None = None, resume: bool = False, examples: list | None = None,
          compile_seconds: float | None = None, shared_tokens: SharedTokens | None = None,
          cadence: CheckpointCadence | None = None) -> dict:
    """Train, scoring the objective every `eval_steps`; returns (and on rank 0 writes) results.json.

    resume: continue from output_dir/last. examples: the training data already read (else `load_examples`).
    compile_seconds: what compiling cost on this node before, for compile="auto" (`decide_compile`). shared_tokens:
    the data's token ids made once for a whole search. cadence: when last/ is written (None: every evaluation).
    """
    if config.output_dir is None:
        raise ConfigError("output_dir: required")
    started = time.perf_counter()
    rank, world_size = dist_utils.rank(), dist_utils.world_size()
    # The same seed on every worker while the model is built: the freshly initialised MLP head must start
    # identical everywhere (there is no DDP broadcast; summed gradients keep identical weights identical).
    seed_everything(config.seed)
    device, output_dir, (train_pooler, eval_pooler) = pick_device(), Path(config.output_dir), config.poolers()

    loss_fn = build_loss(config.loss, config.reg, **config.hparams)
    encoder = Encoder.from_pretrained(config.model, pooler=train_pooler, trust_remote_code=config.trust_remote_code)
    encoder.to(device).train()
    seed_everything(derived_seed(config.seed, "dropout", rank))  # then distinct dropout masks per worker
    complementary = load_complementary(config, device) if loss_fn.needs_complementary else None
    batches, shared_tokens = training_batches(config, examples, shared_tokens, rank, world_size)
    total_steps = count_steps(config, len(batches))
    runner = StepRunner(encoder, loss_fn, config, device, total_steps, complementary)
    runner.tokenize.shared = shared_tokens
    objective = build_objective(config.objective, config.objective_columns) if rank == 0 else None

    progress = load_last(output_dir / "last", runner, rank) if resume else Progress()
    progress.timings.startup_s += time.perf_counter() - started
    probe = start_compiling(config, runner, total_steps, compile_seconds, progress)
    clock, meter = StepClock(progress.timings, device), LossMeter(device)
    evaluate = Evaluation(objective, encoder, eval_pooler, runner, progress, clock, output_dir, rank,
                          config.batch_size * world_size, on_eval, cadence)

    step = progress.step
    tokenized = iter(training_loader(batches, config.epochs, total_steps, runner.tokenize, device, config.seed,
                                     start=progress.step))
    try:
        for step, batch in enumerate(tokenized, start=progress.step + 1):
            with clock.step(step, compiling=runner.compiles_on(batch)):
                loss = runner.step(batch)
            meter.add(loss, loss_fn.stats())
            if on_step is not None:
                on_step(step, total_steps)
            last = step == total_steps
            evaluating = step % config.eval_steps == 0 or last
            if (step % NONFINITE_CHECK_EVERY == 0 or evaluating) and meter.diverged():
                raise TrainingDiverged(step)
            probe.after_step(step, last, runner)
            if evaluating:
                with clock.paused():
                    evaluate(step, total_steps, meter)
    finally:
        # On a raise (a diverged or a stopped trial) this stops a loader worker now, not when the traceback is freed.
        del tokenized
    return _finish(config, progress, step, device, world_size, rank, (train_pooler, eval_pooler), started)


def _finish(config: TrainConfig, progress: Progress, steps: int, device: torch.device, world_size: int, rank: int,
            poolers: tuple[str, str], started: float) -> dict:
    """results.json: the figures, the dev curve, where the time went; rank 0 scores the best checkpoint on the
    seven test tasks (reloaded from its files, as a user would) and writes the file."""
    timings = progress.timings
    results = {
        "objective": config.objective,
        "best_objective": progress.best_objective,
        "best_step": progress.best_step,
        "steps": steps,
        "dev_curve": progress.dev_curve,
        "sentences_per_s": config.batch_size * world_size * steps / max(timings.train_s, 1e-9),
        "train_seconds": timings.train_s,
        "timings": asdict(timings),
        "compile_decision": progress.compile_decision,
        "poolers": {"train": poolers[0], "eval": poolers[1]},
        "device": str(device),
        "world_size": world_size,
        "config": config.to_dict(),
    }
    if rank == 0:
        output_dir = Path(config.output_dir)
        if config.test_eval:
            clock = time.perf_counter()
            best = Encoder.from_pretrained(str(output_dir / "best"), pooler=poolers[1]).to(device)
            # the seven test tasks, their mean, SICK-R dev, alignment and uniformity, scored on the reloaded files
            results.update(evaluate_encoder(encode_fn(best, poolers[1]), tasks="all"))
            results["test_eval_seconds"] = time.perf_counter() - clock
        results["wall_seconds"] = time.perf_counter() - started
        write_json_atomic(output_dir / "results.json", results)
    return results
