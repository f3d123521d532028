"""How the step benchmarks time a step: synchronised with the device around the timed region only (CUDA queues its
work), under torch.profiler for `raycse bench --profile`, and the loader's tokenising of one batch alone; and the
device's name and the freeing of its memory between two measurements.
"""
from __future__ import annotations

import contextlib
import gc
import os
import platform
import time


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"CPU {model} ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_device_memory(device) -> None:
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def timed_steps(step, inputs, warmup: int, steps: int, device) -> float:
    """Seconds for `steps` calls of `step` on the next items of the iterator `inputs`, after `warmup` untimed ones;
    taking the next item is timed too, as it is part of a training step. The device is synchronised around the
    timed region only, so the steps queue work exactly as in training. Returns the elapsed seconds."""
    import torch

    for _ in range(warmup):
        step(next(inputs))
    synchronize(device)
    started = time.perf_counter()
    losses = [step(next(inputs)) for _ in range(steps)]
    synchronize(device)
    elapsed = time.perf_counter() - started
    if not bool(torch.isfinite(torch.stack([loss.float() for loss in losses])).all()):
        raise RuntimeError("the loss became non-finite during the benchmark")
    return elapsed


def profile_steps(step, inputs, steps: int, device, path: str) -> dict:
    """Run `steps` more steps under torch.profiler; write its operator table to `path`, return the summary.

    `device_busy_fraction` is the time kernels ran (summed over kernels) over the wall time of the steps: near 1
    the step is bound by the GPU's work; well below 1 the GPU waits on the host (Python, launches, the loader).
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            step(next(inputs))
        synchronize(device)
        wall = time.perf_counter() - started
    events = prof.key_averages()
    # Device-side rows only (kernels, copies, memsets): the operator rows that launched them repeat their time.
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) if cuda else 0.0
    summary = {
        "profiled_steps": steps,
        "ms_per_step_profiled": 1000.0 * wall / steps,
        "device_ms_per_step": kernel_us / 1000.0 / steps if cuda else None,
        "device_busy_fraction": kernel_us / 1e6 / wall if cuda else None,
        "table": path,
    }
    sort_by = "self_device_time_total" if cuda else "self_cpu_time_total"
    header = (f"{steps} steps under torch.profiler: {summary['ms_per_step_profiled']:.2f} ms/step wall"
              + (f", kernels {summary['device_ms_per_step']:.2f} ms/step "
                 f"(device busy {100 * summary['device_busy_fraction']:.0f}%)" if cuda else "") + "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header)
        f.write(events.table(sort_by=sort_by, row_limit=60, max_name_column_width=90))
        f.write("\n")
    return summary


def host_tokenize_ms(tokenize, batches) -> float:
    """Milliseconds the trainer's loader spends tokenising one batch (`StepRunner.tokenize`, median of the pool's
    batches): host work that a loader worker hides behind the device's step on CUDA, and that the timed step
    includes on CPU (no loader worker there)."""
    times = []
    for batch in batches:
        started = time.perf_counter()
        tokenize(batch)
        times.append(1000.0 * (time.perf_counter() - started))
    return sorted(times)[len(times) // 2]
