"""When and how a training compiles: `torch.compile` with CUDA graphs, decided per training.

compile="auto" compiles when the time the remaining steps would save repays the compile time (`decide_compile`),
measured by `CompileProbe` on the training's own first eager steps; "always" and "never" say it outright. CUDA only.
"""
from __future__ import annotations

import time

import torch

from raycse.training import distributed as dist_utils

COMPILE_PROBE_WARMUP = 3  # eager steps not timed first (CUDA and cuBLAS initialisation, the allocator's growth)
COMPILE_PROBE_STEPS = 10  # eager steps then timed before deciding
COMPILED_SPEEDUP = 2.5  # eager / compiled step time assumed for the decision (benchmarks/step-speed.md, BERT-base b64)
DEFAULT_COMPILE_SECONDS = 40.0  # one cold compile when no earlier trial measured it (benchmarks/step-speed.md)


def _cuda_graph_state_for_this_thread() -> None:
    """torch before 2.12 keeps its CUDA-graph trees' state in the thread that imported them and asserts in any other;
    Tune runs each trial in a thread of its own, so a second compiled trial in a reused worker would fail. This
    gives the calling thread that state, as newer torch does by itself."""
    import collections
    import threading

    from torch._inductor import cudagraph_trees as trees

    if hasattr(trees.local, "tree_manager_containers") or torch._C._is_key_in_tls("tree_manager_containers"):
        return
    trees.local.tree_manager_containers = {}
    trees.local.tree_manager_locks = collections.defaultdict(threading.Lock)
    torch._C._stash_obj_in_tls("tree_manager_containers", trees.local.tree_manager_containers)
    torch._C._stash_obj_in_tls("tree_manager_locks", trees.local.tree_manager_locks)


def compiled(encoder: torch.nn.Module):
    """`torch.compile` with CUDA graphs ("reduce-overhead"): at the batch sizes of a search the step is bound by
    launching kernels, not by running them. Shapes: the first is compiled static; a second length makes that
    dimension dynamic (one more compile, no more); a CUDA graph is recorded per distinct shape, which the
    loader's padding to multiples of 8 tokens bounds to max_len / 8 per mode (train, dropout-off)."""
    _cuda_graph_state_for_this_thread()
    return torch.compile(encoder, mode="reduce-overhead")


def decide_compile(policy: str, device: torch.device, remaining_steps: int, eager_step_s: float | None,
                   compile_seconds: float | None) -> tuple[bool, str]:
    """Whether to compile, and why, in one line for the log.

    "auto" compiles when the time the remaining steps would save repays the compile time: the saving is the
    measured eager step time x (1 - 1/COMPILED_SPEEDUP) per step; the cost is what an earlier training on this
    node measured (`compile_seconds`), else DEFAULT_COMPILE_SECONDS. A search's short trials run eager; a
    training of thousands of steps compiles.
    """
    if device.type != "cuda":
        return False, "eager: torch.compile with CUDA graphs is for CUDA only"
    if policy == "always":
        return True, "compiled: compile=always"
    if policy == "never":
        return False, "eager: compile=never"
    cost = compile_seconds if compile_seconds is not None else DEFAULT_COMPILE_SECONDS
    saving = remaining_steps * (eager_step_s or 0.0) * (1.0 - 1.0 / COMPILED_SPEEDUP)
    where = "measured on this node" if compile_seconds is not None else "default estimate"
    verdict = saving > cost
    return verdict, (f"{'compiled' if verdict else 'eager'}: {remaining_steps} steps x "
                     f"{1000 * (eager_step_s or 0.0):.1f} ms eager would save ~{saving:.0f} s compiled "
                     f"({COMPILED_SPEEDUP}x), {'>' if verdict else '<='} ~{cost:.0f} s to compile ({where})")


class CompileProbe:
    """compile="auto": after COMPILE_PROBE_WARMUP eager steps, time COMPILE_PROBE_STEPS more, then decide once
    (`decide_compile`) on rank 0's clock, which every worker follows; the decision is kept in `progress` (a resumed
    training keeps it). An evaluation inside the probe counts as steps: a rare excess."""

    def __init__(self, policy: str, device: torch.device, total_steps: int, start_step: int,
                 compile_seconds: float | None, progress):
        self.policy, self.device, self.total_steps = policy, device, total_steps
        self.start_step, self.compile_seconds, self.progress = start_step, compile_seconds, progress
        self.clock: float | None = None  # set once the warm-up steps are done

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def after_step(self, step: int, last: bool, runner) -> None:
        """Called after every step; compiles `runner` when the decision falls that way."""
        if self.progress.compiled is not None:
            return
        probed = step - self.start_step - COMPILE_PROBE_WARMUP
        if probed == 0 and not last:
            self._sync()
            self.clock = time.perf_counter()
        if probed >= COMPILE_PROBE_STEPS or last:
            self._sync()
            eager_step_s = (time.perf_counter() - self.clock) / probed if self.clock and probed > 0 else None
            decision, reason = decide_compile(self.policy, self.device, self.total_steps - step, eager_step_s,
                                              self.compile_seconds)
            self.progress.compiled = bool(dist_utils.broadcast_float(float(decision), self.device))
            self.progress.compile_decision = reason
            if self.progress.compiled:
                runner.compile()
