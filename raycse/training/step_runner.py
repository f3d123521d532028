"""One training step: `StepRunner` turns a tokenised batch into the embeddings a loss needs, back-propagates and
steps the optimiser; and what a step is made of: the autocast dtype (`autocast_dtype`), the dropout-off pass
(`dropout_disabled`), the learning-rate schedule (`linear_decay`) and the gradient sum across workers
(`sum_gradients_across_workers`, no DDP).

The loop around it is trainer.py; the benchmarks (raycse/bench/) time this step on its own.
"""
from __future__ import annotations

import contextlib

import torch

from raycse.encoder.model import Encoder
from raycse.errors import ConfigError
from raycse.losses import ContrastiveLoss, Embeddings
from raycse.settings.config import TrainConfig
from raycse.training import distributed as dist_utils
from raycse.training import grad_cache
from raycse.training.batches import BatchTokenizer, TokenizedBatch
from raycse.training.compile_policy import compiled

FUSED_ADAMW_DEVICES = ("cuda", "cpu")  # where torch's fused AdamW runs (and raycse trains)


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
        # Fused on the CPU as on CUDA: one kernel over all parameters instead of a loop of per-tensor ops, 6-8% of a
        # MiniLM step on 2 CPU cores (benchmarks/peer-comparison.md); sentence-transformers' trainer fuses too.
        self.optimizer = torch.optim.AdamW(self.parameters, lr=config.lr, weight_decay=config.weight_decay,
                                           fused=device.type in FUSED_ADAMW_DEVICES)
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
