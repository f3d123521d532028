"""The training loop: one contrastive training of a sentence encoder, read top to bottom.

Knows nothing of Ray or MLflow: progress leaves through callbacks (`on_eval`, `on_step`), so the same loop
runs under `raycse train`, as a search trial in process, or on W data-parallel workers started by Ray Train
(torch.distributed already initialised by the caller). SimCSE's recipe throughout: each unsupervised
sentence is encoded twice in one forward pass of 2N rows (two dropout masks -> z1, z2), AdamW with linear
decay and no warm-up, STS-B dev Spearman every `eval_steps`, the best checkpoint kept.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from raycse import distributed as dist_utils
from raycse.config import TrainConfig
from raycse.data import GlobalBatches, read_corpus, read_nli_triplets
from raycse.errors import ConfigError
from raycse.evaluation import StsbDevEvaluator, evaluate_encoder
from raycse.losses import ContrastiveLoss, Embeddings, build_loss
from raycse.model import Encoder

NONFINITE_CHECK_EVERY = 10  # steps between host syncs of the "loss went non-finite" flag
EVAL_BATCH_SIZE = 128


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the trial ends with status 'diverged'."""

    def __init__(self, step: int):
        super().__init__(f"loss became non-finite by step {step}")
        self.step = step


@dataclass
class EvalReport:
    """What the loop tells its caller after each STS-B dev evaluation (on every worker)."""

    step: int
    total_steps: int
    stsb_dev: float
    best_stsb_dev: float
    best_step: int
    train_loss: float
    sentences_per_s: float
    checkpoint: str | None  # the best checkpoint's directory when this evaluation improved it (rank 0), else None


# ----------------------------------------------------------------------------------------------- setup
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


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
    """Turns a batch of text into the embeddings a loss needs and takes one optimiser step.

    Only the passes the loss asks for run: the 2N-row (or 3N supervised) dropout pass always, the dropout-off
    pass for off-dropout, the frozen complementary encoder (no_grad, eval mode, autocast) for DCLR.
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
        self.forward = torch.compile(encoder, dynamic=True) if (config.compile and device.type == "cuda") else encoder

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def tokenize(self, sentences: list[str]) -> dict[str, torch.Tensor]:
        batch = self.encoder.tokenize(sentences, max_len=self.config.max_len)
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def embeddings(self, batch: list) -> Embeddings:
        supervised = isinstance(batch[0], tuple)
        n = len(batch)
        if supervised:  # (sent0, sent1, hard_neg) -> one forward of 3N rows
            columns = list(zip(*batch))
            tokens = self.tokenize([s for column in columns for s in column])
            first_rows = lambda: self.tokenize(list(columns[0]))  # noqa: E731
        else:  # each sentence twice in one forward: independent dropout masks give the positive pair
            # Tokenised once and the rows repeated: the very tensors that tokenising the list twice gives, at half
            # the host cost (tokenising is about a third of a small model's step); the N-row passes reuse them.
            once = self.encoder.tokenize(list(batch), max_len=self.config.max_len)
            tokens = {k: torch.cat([v, v]).to(self.device, non_blocking=True) for k, v in once.items()}
            first_rows = lambda: {k: v[:n] for k, v in tokens.items()}  # noqa: E731
        with self.autocast():
            pooled = self.forward(**tokens)
            z1, z2 = pooled[:n], pooled[n:2 * n]
            z3 = pooled[2 * n:] if supervised else None
            z0 = complementary = None
            if self.loss_fn.needs_z0:
                with dropout_disabled(self.encoder):
                    z0 = self.forward(**first_rows())
            if self.loss_fn.needs_complementary:
                with torch.no_grad():
                    complementary = self.complementary(**first_rows())
        gather = dist_utils.gather_with_grad
        return Embeddings(z1=gather(z1), z2=gather(z2), z3=gather(z3), z0=gather(z0),
                          complementary=gather(complementary))

    def step(self, batch: list) -> torch.Tensor:
        """One optimiser step; returns the loss as a device tensor (no host sync)."""
        loss = self.loss_fn(self.embeddings(batch))
        self.scaler.scale(loss).backward()
        sum_gradients_across_workers(self.parameters)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


# ------------------------------------------------------------------------------------------- train
def load_examples(config: TrainConfig) -> list:
    if config.sup_data is not None:
        return read_nli_triplets(config.sup_data, max_rows=config.max_sentences)
    return read_corpus(config.corpus, max_sentences=config.max_sentences, replace_bad_bytes=config.replace_bad_bytes)


def load_complementary(config: TrainConfig, device: torch.device) -> Encoder:
    """DCLR's frozen complementary model: a given checkpoint, else a frozen copy of the starting weights."""
    source = config.complementary or config.model
    encoder = Encoder.from_pretrained(source, pooler=config.resolved_eval_pooler,
                                      trust_remote_code=config.trust_remote_code)
    encoder.requires_grad_(False).eval().to(device)
    if device.type == "cuda":
        encoder.to(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return encoder


def train(config: TrainConfig,
          on_eval: Callable[[EvalReport], None] | None = None,
          on_step: Callable[[int, int], None] | None = None) -> dict:
    """Train, evaluating on STS-B dev every `eval_steps`; returns (and on rank 0 writes) results.json."""
    if config.output_dir is None:
        raise ConfigError("output_dir: required")
    started = time.perf_counter()
    rank, world_size = dist_utils.rank(), dist_utils.world_size()
    # The same seed on every worker while the model is built: the freshly initialised MLP head must start
    # identical everywhere (there is no DDP broadcast; summed gradients keep identical weights identical).
    seed_everything(config.seed)
    device = pick_device()
    output_dir = Path(config.output_dir)
    best_dir = output_dir / "best"

    loss_fn = build_loss(config.loss, config.reg, **config.hparams)
    encoder = Encoder.from_pretrained(config.model, pooler=config.pooler, trust_remote_code=config.trust_remote_code)
    encoder.to(device).train()
    seed_everything(config.seed + rank)  # then distinct dropout masks per worker, reproducible per seed
    complementary = load_complementary(config, device) if loss_fn.needs_complementary else None
    batches = GlobalBatches(load_examples(config), config.batch_size, config.seed, rank, world_size)
    total_steps = len(batches) * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    runner = StepRunner(encoder, loss_fn, config, device, total_steps, complementary)
    dev_evaluator = StsbDevEvaluator() if rank == 0 else None
    eval_pooler = config.resolved_eval_pooler

    def encode(sentences: list[str]) -> torch.Tensor:
        return encoder.encode(sentences, batch_size=EVAL_BATCH_SIZE, pooler=eval_pooler)

    dev_curve: list[dict] = []
    best_stsb_dev, best_step = -math.inf, 0
    nonfinite = torch.zeros((), dtype=torch.float32, device=device)
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    steps_since_eval, train_seconds, window_start = 0, 0.0, time.perf_counter()
    sentences_per_step = config.batch_size * world_size

    step = 0
    for epoch in range(config.epochs):
        for batch in batches.epoch(epoch):
            step += 1
            loss = runner.step(batch)
            nonfinite = torch.maximum(nonfinite, (~torch.isfinite(loss)).float())
            loss_sum += torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0)
            steps_since_eval += 1
            if on_step is not None:
                on_step(step, total_steps)
            last = step == total_steps
            if (step % NONFINITE_CHECK_EVERY == 0 or step % config.eval_steps == 0 or last) \
                    and dist_utils.any_flag(nonfinite):
                raise TrainingDiverged(step)
            if step % config.eval_steps == 0 or last:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                train_seconds += time.perf_counter() - window_start
                stsb_dev = dev_evaluator(encode) if dev_evaluator is not None else 0.0
                stsb_dev = dist_utils.broadcast_float(stsb_dev, device)
                improved = stsb_dev > best_stsb_dev or best_step == 0  # the first evaluation always saves
                if improved:
                    best_stsb_dev, best_step = stsb_dev, step
                    if rank == 0:
                        encoder.save(best_dir, pooler=eval_pooler)  # atomic: a kill leaves the last complete one
                train_loss = float(loss_sum.item()) / steps_since_eval
                dev_curve.append({"step": step, "stsb_dev": stsb_dev, "train_loss": train_loss})
                report = EvalReport(step, total_steps, stsb_dev, best_stsb_dev, best_step, train_loss,
                                    sentences_per_step * step / max(train_seconds, 1e-9),
                                    str(best_dir) if (improved and rank == 0) else None)
                if on_eval is not None:
                    on_eval(report)
                loss_sum.zero_()
                steps_since_eval = 0
                window_start = time.perf_counter()
            if last:
                break
        if step >= total_steps:
            break

    results = {
        "best_stsb_dev": best_stsb_dev,
        "best_step": best_step,
        "steps": step,
        "dev_curve": dev_curve,
        "sentences_per_s": sentences_per_step * step / max(train_seconds, 1e-9),
        "train_seconds": train_seconds,
        "device": str(device),
        "world_size": world_size,
        "config": config.to_dict(),
    }
    if rank == 0:
        if config.test_eval:
            best = Encoder.from_pretrained(str(best_dir), pooler=eval_pooler).to(device)
            # the seven test tasks, their mean, SICK-R dev, alignment and uniformity, scored on the reloaded files
            results.update(evaluate_encoder(
                lambda s: best.encode(s, batch_size=EVAL_BATCH_SIZE, pooler=eval_pooler), tasks="all"))
        results["wall_seconds"] = time.perf_counter() - started
        write_json_atomic(output_dir / "results.json", results)
    return results


def write_json_atomic(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def remove_partial_output(output_dir: str | Path) -> None:
    """After a failure before the first checkpoint, leave no half-written output directory behind."""
    path = Path(output_dir)
    if path.exists() and not (path / "best").exists():
        shutil.rmtree(path, ignore_errors=True)
