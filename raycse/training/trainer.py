"""The training loop: one contrastive training of a sentence encoder, read top to bottom.

Knows nothing of Ray or MLflow: progress leaves through callbacks (`on_eval`, `on_step`), so the same loop
runs under `raycse train`, as a search trial in process, or on W data-parallel workers started by Ray Train
(torch.distributed already initialised by the caller). SimCSE's recipe throughout: each unsupervised
sentence is encoded twice in one forward pass of 2N rows (two dropout masks -> z1, z2), AdamW with linear
decay and no warm-up, gradients clipped to norm 1 (the Hugging Face Trainer's default, which every paper's
code trains with), the objective scored every `eval_steps`, the best checkpoint kept.

The output directory:

  best/          the best checkpoint by the objective: a model directory (Hugging Face + sentence-transformers)
  last/          everything needed to continue after the last evaluation (model, optimiser, LR schedule, RNG
                 states, position in the data, the dev curve so far): `train(..., resume=True)` picks it up and
                 ends where an uninterrupted training with the same seed would have ended
  results.json   written at the end: the figures, the dev curve, the configuration, where the time went

Both checkpoints are written atomically at every evaluation (build beside, then rename), so a kill or a full disk
at any moment leaves the previous ones whole.
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
from raycse.losses import ContrastiveLoss, Embeddings, build_loss
from raycse.seeds import derived_seed
from raycse.settings.config import TrainConfig
from raycse.training import distributed as dist_utils
from raycse.training import grad_cache
from raycse.training.batches import BatchTokenizer, TokenizedBatch, training_loader
from raycse.training.checkpoints import Progress, Timings, load_last, save_last, writing_checkpoint
from raycse.training.compile_policy import CompileProbe, compiled, decide_compile

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
    checkpoint: str | None  # rank 0: the output directory, whose best/ and last/ were just written; else None


# ----------------------------------------------------------------------------------------------- setup
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CUDA where supported, else fp16 (with a grad scaler); fp32 on CPU."""
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if precision == "bf16" or (precision == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float16


@contextlib.contextmanager
def dropout_disabled(model: torch.nn.Module):
    """ImSimCSE's off-dropout pass: gradients kept, dropout off.

    For BERT-family encoders eval mode differs from train mode only in dropout (nn.Dropout modules and the
    SDPA attention's dropout_p, which reads `module.training`), so eval mode is exactly "dropout off".
    """
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def linear_decay(optimizer: torch.optim.Optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total_steps))


def sum_gradients_across_workers(parameters: list[torch.nn.Parameter]) -> None:
    """Each worker back-propagates the global loss through its own rows only; the sum is the full gradient.

    One flat all-reduce instead of DDP: the off-dropout pass runs the encoder twice per step, which DDP's
    once-per-parameter gradient hooks do not allow.
    """
    if not dist_utils.is_distributed():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


# ----------------------------------------------------------------------------------------- one step
class StepRunner:
    """Turns a tokenised batch into the embeddings a loss needs and takes one optimiser step.

    The host's part of a step is the copy of the token tensors to the device (non_blocking: from the loader's
    pinned memory on CUDA); tokenising is the loader's (`self.tokenize`, see `training_loader`). Only the passes
    the loss asks for run: the 2N-row (or 3N supervised) dropout pass always, the dropout-off pass for
    off-dropout, the frozen complementary encoder (no_grad, eval mode, autocast) for DCLR. With `mini_batch_size`
    set, `grad_cache.backward` runs them instead, in chunks.
    """

    def __init__(self, encoder: Encoder, loss_fn: ContrastiveLoss, config: TrainConfig, device: torch.device,
                 total_steps: int, complementary: Encoder | None = None):
        self.encoder, self.loss_fn, self.config, self.device = encoder, loss_fn, config, device
        self.complementary = complementary
        self.amp_dtype = autocast_dtype(config.precision, device)
        self.parameters = [p for p in encoder.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.parameters, lr=config.lr, weight_decay=config.weight_decay,
                                           fused=device.type == "cuda")
        self.scheduler = linear_decay(self.optimizer, total_steps)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.compiled = False
        self.forward = encoder
        self.loss = loss_fn
        self.shapes_seen: set[tuple] = set()
        if config.mini_batch_size is not None and not encoder.supports_dropout_rows:
            raise ConfigError.at("mini_batch_size", f"gradient caching needs keyed dropout, which this model cannot "
                                                    f"have: {encoder.row_dropout_problem}")
        self.tokenize = BatchTokenizer(encoder.tokenizer, config.max_len or encoder.max_seq_length,
                                       first_rows=loss_fn.needs_z0 or loss_fn.needs_complementary,
                                       pad_to_multiple_of=8 if device.type == "cuda" else None)

    def compile(self) -> None:
        """From the next step on, run the compiled encoder (and DCLR's frozen one) and the compiled loss: one fused
        graph for the loss's few small kernels, DCLR's noise ascent included (its gradient is in closed form)."""
        self.compiled = True
        self.forward = compiled(self.encoder)
        if self.complementary is not None:
            self.complementary = compiled(self.complementary)
        self.loss = torch.compile(self.loss_fn)

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def to_device(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in rows.items()}

    def embeddings(self, batch: TokenizedBatch | list) -> Embeddings:
        if not isinstance(batch, TokenizedBatch):  # a raw batch (tests, reference computations): tokenised here
            batch = self.tokenize(batch)
        n, supervised = batch.n, batch.supervised
        # Every copy is queued before any compute, so none of them waits behind a forward pass.
        rows = self.to_device(batch.rows)
        if supervised:  # (sent0s, sent1s, hard_negs): one forward of 3N rows; the N-row passes take the sent0s
            tokens = rows
            first_rows = None if batch.first_rows is None else self.to_device(batch.first_rows)
        else:  # each sentence twice in one forward: independent dropout masks give the positive pair
            tokens = {k: torch.cat([v, v]) for k, v in rows.items()}
            first_rows = rows  # the N-row passes (off-dropout, DCLR) reuse the N rows
        # ImSimCSE's dropout-off pass rides in the same forward (3N rows, dropout on the first 2N only) where the
        # encoder allows it: one compiled graph and one backward instead of two.
        one_forward_z0 = self.loss_fn.needs_z0 and not supervised and self.encoder.supports_dropout_rows
        with self.autocast():
            if one_forward_z0:
                pooled = self.forward(**{k: torch.cat([v, v, v]) for k, v in rows.items()}, dropout_rows=2 * n)
            else:
                pooled = self.forward(**tokens)
            z1, z2 = pooled[:n], pooled[n:2 * n]
            z3 = pooled[2 * n:] if supervised else None
            z0 = complementary = None
            if one_forward_z0:
                z0 = pooled[2 * n:]
            elif self.loss_fn.needs_z0:
                with dropout_disabled(self.encoder):
                    z0 = self.forward(**first_rows)
            if self.loss_fn.needs_complementary:
                with torch.no_grad():
                    complementary = self.complementary(**first_rows)
        gather = dist_utils.gather_with_grad
        return Embeddings(z1=gather(z1), z2=gather(z2), z3=gather(z3), z0=gather(z0),
                          complementary=gather(complementary))

    def backward(self, batch: TokenizedBatch | list) -> torch.Tensor:
        """The loss of one batch, its parameter gradients in `.grad` (summed across workers); no optimiser step.

        With `mini_batch_size` set, by gradient caching (grad_cache.py: chunks, keyed dropout masks)."""
        if self.compiled:  # a new iteration: the CUDA graphs may reuse the previous step's output memory
            torch.compiler.cudagraph_mark_step_begin()
        if self.config.mini_batch_size is None:
            loss = self.loss(self.embeddings(batch))
            self.scaler.scale(loss).backward()
        else:
            loss = grad_cache.backward(self, batch if isinstance(batch, TokenizedBatch) else self.tokenize(batch))
        sum_gradients_across_workers(self.parameters)
        return loss.detach()

    def step(self, batch: TokenizedBatch | list) -> torch.Tensor:
        """One optimiser step; returns the loss as a device tensor (no host sync)."""
        loss = self.backward(batch)
        if self.config.max_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)  # clip the true gradient, not the fp16-scaled one
            torch.nn.utils.clip_grad_norm_(self.parameters, self.config.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def compiles_on(self, batch: TokenizedBatch) -> bool:
        """Whether this batch's shape is new to the compiled encoder: its step records a graph (timed apart)."""
        if not self.compiled:
            return False
        shape = (batch.n, *batch.rows["input_ids"].shape)
        if shape in self.shapes_seen:
            return False
        self.shapes_seen.add(shape)
        return True


# ------------------------------------------------------------------------------------------- train
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
    """Scoring the objective and keeping the checkpoints, at every `eval_steps` and at the last step."""

    objective: DevObjective | None  # on rank 0, None on the other workers (rank 0's figure is broadcast)
    encoder: Encoder
    eval_pooler: str
    runner: StepRunner
    progress: Progress
    clock: StepClock
    output_dir: Path
    rank: int
    sentences_per_step: int  # the global batch

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
            with writing_checkpoint(self.output_dir / "best"):
                if improved and self.rank == 0:
                    self.encoder.save(self.output_dir / "best", pooler=self.eval_pooler)
            save_last(self.output_dir, self.runner, progress, self.rank)
        timings = progress.timings
        return EvalReport(
            step=step, total_steps=total_steps, objective=value, best_objective=progress.best_objective,
            best_step=progress.best_step, dev_scores=dev_scores, train_loss=train_loss,
            sentences_per_s=self.sentences_per_step * step / max(timings.train_s, 1e-9), loss_stats=loss_stats,
            timings=Timings(**asdict(timings)), compile_decision=progress.compile_decision,
            checkpoint=str(self.output_dir) if self.rank == 0 else None)


def train(config: TrainConfig,
          on_eval: Callable[[EvalReport], None] | None = None,
          on_step: Callable[[int, int], None] | None = None,
          resume: bool = False,
          examples: list | None = None,
          compile_seconds: float | None = None,
          shared_tokens: SharedTokens | None = None) -> dict:
    """Train, scoring the objective every `eval_steps`; returns (and on rank 0 writes) results.json.

    resume: continue from output_dir/last. examples: the training data already read (else `load_examples`).
    compile_seconds: what compiling cost on this node before, for compile="auto" (`decide_compile`).
    shared_tokens: the data's token ids made once for a whole search (used when made from this configuration).
    """
    if config.output_dir is None:
        raise ConfigError("output_dir: required")
    started = time.perf_counter()
    rank, world_size = dist_utils.rank(), dist_utils.world_size()
    # The same seed on every worker while the model is built: the freshly initialised MLP head must start
    # identical everywhere (there is no DDP broadcast; summed gradients keep identical weights identical).
    seed_everything(config.seed)
    device = pick_device()
    output_dir = Path(config.output_dir)
    train_pooler, eval_pooler = config.poolers()

    loss_fn = build_loss(config.loss, config.reg, **config.hparams)
    encoder = Encoder.from_pretrained(config.model, pooler=train_pooler, trust_remote_code=config.trust_remote_code)
    encoder.to(device).train()
    seed_everything(derived_seed(config.seed, "dropout", rank))  # then distinct dropout masks per worker
    complementary = load_complementary(config, device) if loss_fn.needs_complementary else None
    if shared_tokens is not None and shared_tokens.fingerprint == data_fingerprint(config):
        examples = list(range(len(shared_tokens)))  # the loader pads the shared ids of these indices
    else:
        shared_tokens = None
        examples = examples if examples is not None else load_examples(config)
    batches = GlobalBatches(examples, config.batch_size, config.seed, rank, world_size)
    total_steps = len(batches) * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    runner = StepRunner(encoder, loss_fn, config, device, total_steps, complementary)
    runner.tokenize.shared = shared_tokens
    objective = build_objective(config.objective, config.objective_columns) if rank == 0 else None

    progress = load_last(output_dir / "last", runner, rank) if resume else Progress()
    progress.timings.startup_s += time.perf_counter() - started
    if progress.compiled is None and config.compile != "auto":
        progress.compiled, progress.compile_decision = decide_compile(config.compile, device, total_steps, None, None)
    if progress.compiled:
        runner.compile()
    probe = CompileProbe(config.compile, device, total_steps, progress.step, compile_seconds, progress)
    clock = StepClock(progress.timings, device)
    meter = LossMeter(device)
    evaluate = Evaluation(objective, encoder, eval_pooler, runner, progress, clock, output_dir, rank,
                          config.batch_size * world_size)

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
                    report = evaluate(step, total_steps, meter)
                    if on_eval is not None:
                        on_eval(report)
    finally:
        # The stream ends after total_steps by itself; when the loop raises (a diverged trial, a stopped search
        # trial), dropping the last reference stops a loader worker now, not whenever the traceback is freed.
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
