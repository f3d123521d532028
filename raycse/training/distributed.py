"""Global in-batch negatives across data-parallel workers (SimCSE's recipe).

Each worker embeds its own slice of the global batch. `gather_with_grad` all-gathers the slices so that
every loss sees all W*b rows as negatives, and puts the worker's own slice back as the original,
differentiable tensor: gradients flow to the local encoder through the local rows only. Every worker then
computes the same global loss and back-propagates it through its own rows; the trainer sums (not averages)
the parameter gradients over the W workers (`step_runner.sum_gradients_across_workers`, no DDP), which gives
exactly the gradient of the single-worker W*b batch. That needs identical weights on every worker: the
trainer builds the model under the same seed everywhere.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def gather_with_grad(local: torch.Tensor | None) -> torch.Tensor | None:
    """Concatenate every worker's rows in rank order; the local slice keeps its autograd history."""
    if local is None or not is_distributed():
        return local
    slices = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(slices, local.detach().contiguous())
    slices[dist.get_rank()] = local
    return torch.cat(slices, dim=0)


def broadcast_float(value: float, device: torch.device) -> float:
    """Rank 0's value on every worker (the dev figure, so all workers keep the same best step)."""
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(tensor, src=0)
    return float(tensor.item())


def any_flag(flag: torch.Tensor) -> bool:
    """True on every worker if the flag is set on any (a non-finite loss must stop all workers together)."""
    if is_distributed():
        flag = flag.clone()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def gather_objects(obj) -> list:
    """Every worker's `obj`, in rank order, on every worker (picklable objects: RNG states, say)."""
    if not is_distributed():
        return [obj]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered
