"""Gradient caching (GradCache; Gao, Zhang, Han & Callan 2021): a batch larger than memory, trained exactly.

A contrastive loss couples every row of a batch with every other (each sentence's negatives are the whole
batch), so a large batch cannot be cut into accumulated micro-batches: that would change the loss. GradCache
cuts the encoder's work instead, which is row by row:

  1. encode the batch in chunks of `mini_batch_size` sentences without an autograd graph;
  2. compute the loss on the whole batch (all-gathered across workers as always) and its gradient with respect
     to the embeddings alone: a few (N, H) tensors, the cache;
  3. encode each chunk again, now with its graph, and back-propagate the chunk's rows of the cache through it;
     the chunk's graph is freed before the next one is built.

Memory is then one chunk's activations plus the batch's embeddings, whatever the batch; the price is one more
forward pass of the batch. The loss is computed once, on the whole batch, so every loss and regulariser of the
registry works unchanged, as does whatever acts on embeddings only: DCLR's noise negatives (drawn from the
global RNG, which nothing here draws from) and its frozen complementary encoder (run in step 1, chunked, no
gradient).

Exactness: step 3 must rebuild the embeddings of step 1, so every row needs the same dropout masks in either
pass and in whichever chunk it falls; and for the cached gradients to equal those of one forward of the whole
batch, the same masks as there too. torch's dropout draws each site's mask for the rows of one forward at once,
so it cannot; keyed dropout (keyed_dropout.py) makes a mask a function of the step's key, the site and the row's
global id. Global ids, for a batch of N sentences per worker and T = N x workers in all, sentence i of rank r
being g = r N + i:

    unsupervised, one forward of 2N rows         view v of sentence g: v T + g                (v = 0, 1)
    ImSimCSE's one forward of 3N rows            the same, and a third view 2T + g without dropout
    supervised, 3N rows sent0, sent1, hard_neg   column c of triplet g: c T + g               (c = 0, 1, 2)

so W workers of N sentences get the masks of one worker of W N, and a chunk of rows the masks of those rows in
the whole batch. The step's key is `keyed_dropout.step_key(seed, step)`: the same on every worker, and
recomputed from the step count by a resumed training. With one chunk (mini_batch_size = batch_size) the step is
the plain one, one forward with its graph, the loss, backward, but with keyed masks: the reference that a cached
run equals (tests/test_grad_cache.py: every loss, to 1e-5 relative in float32, with dropout on).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from raycse.encoder.keyed_dropout import step_key
from raycse.losses import Embeddings
from raycse.training import distributed as dist_utils

if TYPE_CHECKING:
    from raycse.encoder.model import Encoder
    from raycse.losses import ContrastiveLoss
    from raycse.settings.config import TrainConfig
    from raycse.training.batches import TokenizedBatch


class StepRunnerLike(Protocol):
    """What gradient caching uses of `step_runner.StepRunner`, which imports this module (so this one cannot
    import it)."""

    config: TrainConfig
    device: torch.device
    encoder: Encoder
    forward: Any  # the encoder, or its compiled form
    complementary: Any  # DCLR's frozen encoder, or None
    loss: Any  # the loss, or its compiled form
    loss_fn: ContrastiveLoss
    compiled: bool
    parameters: list[torch.nn.Parameter]
    scaler: torch.amp.GradScaler
    scheduler: torch.optim.lr_scheduler.LRScheduler

    def to_device(self, tokens: dict[str, Tensor]) -> dict[str, Tensor]: ...

    def autocast(self) -> contextlib.AbstractContextManager: ...

VIEWS = ("z1", "z2", "z3", "z0")  # the Embeddings fields a chunk's forward passes give (complementary aside)


@dataclass
class Chunk:
    """The forward passes of sentences [start, stop) of this worker's batch."""

    start: int
    stop: int
    tokens: dict[str, Tensor]  # the rows of the one forward with dropout (2m, or 3m), views one after another
    row_ids: Tensor  # (rows,) each row's global id (module docstring)
    dropout_rows: int | None  # ImSimCSE's one forward: only the first 2m rows get dropout
    first_tokens: dict[str, Tensor] | None  # the m sentences alone: the dropout-off pass, the complementary encoder

    @property
    def size(self) -> int:
        return self.stop - self.start


def plan_chunks(batch: TokenizedBatch, rows: dict[str, Tensor], first_rows: dict[str, Tensor] | None,
                mini_batch_size: int, one_forward_z0: bool, device: torch.device) -> list[Chunk]:
    """This worker's batch (`rows`, `first_rows` already on the device) as chunks of `mini_batch_size` sentences;
    every chunk keeps the batch's padded length, so a row is the same tensor in a chunk as in the batch."""
    n, rank, world_size = batch.n, dist_utils.rank(), dist_utils.world_size()
    total = n * world_size
    chunks = []
    for start in range(0, n, mini_batch_size):
        stop = min(start + mini_batch_size, n)
        m = stop - start
        if batch.supervised:  # (sent0s, sent1s, hard_negs): the chunk's rows of each column
            tokens = {k: torch.cat([v[c * n + start:c * n + stop] for c in range(3)]) for k, v in rows.items()}
            views = 3
        else:  # each sentence twice (ImSimCSE: three times, the third without dropout)
            views = 3 if one_forward_z0 else 2
            tokens = {k: torch.cat([v[start:stop]] * views) for k, v in rows.items()}
        sentences = torch.arange(rank * n + start, rank * n + stop, device=device)
        row_ids = torch.cat([sentences + view * total for view in range(views)])
        first_tokens = None if first_rows is None else {k: v[start:stop] for k, v in first_rows.items()}
        chunks.append(Chunk(start, stop, tokens, row_ids, 2 * m if one_forward_z0 else None, first_tokens))
    return chunks


def encode_chunk(runner: StepRunnerLike, chunk: Chunk, key: Tensor, supervised: bool,
                 one_forward_z0: bool) -> dict[str, Tensor]:
    """The chunk's views by name (z1, z2, and z3 or z0 where the loss has them), as `StepRunner.embeddings` lays
    them out; with or without a graph as the caller's grad mode says."""
    m = chunk.size
    pooled = runner.forward(**chunk.tokens, dropout_rows=chunk.dropout_rows, dropout_key=key, row_ids=chunk.row_ids)
    views = {"z1": pooled[:m], "z2": pooled[m:2 * m]}
    if supervised:
        views["z3"] = pooled[2 * m:]
    if one_forward_z0:
        views["z0"] = pooled[2 * m:]
    elif runner.loss_fn.needs_z0:  # supervised: the sent0s again, dropout off (as in `StepRunner.embeddings`)
        with _eval_mode(runner.encoder):
            views["z0"] = runner.forward(**chunk.first_tokens)
    return views


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module):
    """Dropout off, gradients kept: `step_runner.dropout_disabled`, which this module cannot import."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _gathered(views: dict[str, Tensor], complementary: Tensor | None) -> Embeddings:
    gather = dist_utils.gather_with_grad
    return Embeddings(**{name: gather(tensor) for name, tensor in views.items()}, complementary=gather(complementary))


def _new_graph_step(runner: StepRunnerLike) -> None:
    """Compiled with CUDA graphs: tell the graph trees that the previous chunk's outputs are no longer used."""
    if runner.compiled:
        torch.compiler.cudagraph_mark_step_begin()


def backward(runner: StepRunnerLike, batch: TokenizedBatch) -> Tensor:
    """The loss of `batch` (a 0-d tensor) with its parameter gradients accumulated into `.grad` (this worker's
    rows; the caller sums them across workers), in chunks of `runner.config.mini_batch_size` sentences."""
    device, supervised = runner.device, batch.supervised
    key = torch.tensor(step_key(runner.config.seed, runner.scheduler.last_epoch), dtype=torch.int64, device=device)
    rows = runner.to_device(batch.rows)
    if supervised:
        first_rows = None if batch.first_rows is None else runner.to_device(batch.first_rows)
    else:
        first_rows = rows
    one_forward_z0 = runner.loss_fn.needs_z0 and not supervised
    chunks = plan_chunks(batch, rows, first_rows, runner.config.mini_batch_size, one_forward_z0, device)

    def complementary(chunk: Chunk) -> Tensor | None:
        if not runner.loss_fn.needs_complementary:
            return None
        with torch.no_grad():
            return runner.complementary(**chunk.first_tokens)

    if len(chunks) == 1:  # the plain step, keyed masks: the reference a cached step equals
        with runner.autocast():
            views = encode_chunk(runner, chunks[0], key, supervised, one_forward_z0)
            frozen = complementary(chunks[0])
        loss = runner.loss(_gathered(views, frozen))
        runner.scaler.scale(loss).backward()
        return loss

    # 1. every chunk without a graph. Compiled, a chunk's outputs live in CUDA-graph memory that the next chunk's
    # replay overwrites: they are copied out first.
    parts, frozen = [], []
    with torch.no_grad(), runner.autocast():
        for chunk in chunks:
            _new_graph_step(runner)
            views = encode_chunk(runner, chunk, key, supervised, one_forward_z0)
            parts.append({name: t.clone() if runner.compiled else t for name, t in views.items()})
            comp = complementary(chunk)
            if comp is not None:
                frozen.append(comp.clone() if runner.compiled else comp)
    # 2. the loss on the whole batch, and its gradient with respect to this worker's embeddings
    leaves = {name: torch.cat([part[name] for part in parts]).requires_grad_() for name in parts[0]}
    del parts
    loss = runner.loss(_gathered(leaves, torch.cat(frozen) if frozen else None))
    runner.scaler.scale(loss).backward()
    cache = {name: leaf.grad for name, leaf in leaves.items() if leaf.grad is not None}
    if not cache:
        return loss
    if runner.compiled:  # gradients accumulate in place, never into a graph's output memory (reused by the next)
        for p in runner.parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
    # 3. each chunk again, with its graph, and the cached gradients of its rows through it
    for chunk in chunks:
        _new_graph_step(runner)
        with runner.autocast():
            views = encode_chunk(runner, chunk, key, supervised, one_forward_z0)
        names = [name for name in views if name in cache]
        torch.autograd.backward([views[name] for name in names],
                                [cache[name][chunk.start:chunk.stop] for name in names])
    return loss

