"""`raycse bench --concurrent N`: N trials sharing one machine, each a Ray task with 1/N of it (`run_concurrent`).

A trial runs `raycse bench`'s own step (`raycse.bench.step`: a random encoder, the trainer's StepRunner and
DataLoader on synthetic batches). `benchmarks/concurrent.py` runs this for N = 1, 2, 4, 8 in one Ray session.
"""
from __future__ import annotations

import datetime as _dt
import math
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raycse.bench.step import BenchOptions


def _barrier_class():
    import ray

    @ray.remote(num_cpus=0)
    class Barrier:
        """Trials arrive after their warm-up; all start timing once the last has arrived."""

        def __init__(self, parties: int):
            self.parties, self.arrived = parties, 0

        def arrive(self) -> None:
            self.arrived += 1

        def open(self) -> bool:
            return self.arrived >= self.parties

    return Barrier


def concurrent_trial(options: dict, threads: int, barrier) -> dict:
    """One trial of `run_concurrent`, inside a Ray task: the StepRunner loop on its share of the device."""
    import ray
    import torch

    from raycse.bench.step import BATCH_POOL, BenchOptions, build_runner, step_inputs
    from raycse.bench.synthetic import bench_tokenizer, synthetic_data
    from raycse.bench.timing import device_name, synchronize
    from raycse.encoder.model import pick_device

    torch.set_num_threads(max(1, threads))
    opts = BenchOptions(**options)
    device = pick_device()
    tokenizer = bench_tokenizer()
    runner, loss_fn = build_runner(opts, tokenizer, device)
    data = synthetic_data(tokenizer, opts.batch_size, opts.seq_len, loss_fn.needs_hard_neg,
                          min(BATCH_POOL, opts.warmup + opts.steps), opts.seed)
    _loader, inputs = step_inputs(opts, data, runner, device)
    for _ in range(opts.warmup):
        runner.step(next(inputs))
    synchronize(device)
    ray.get(barrier.arrive.remote())
    while not ray.get(barrier.open.remote()):
        time.sleep(0.01)
    started_wall, started = time.time(), time.perf_counter()
    for _ in range(opts.steps):
        runner.step(next(inputs))
    synchronize(device)
    elapsed = time.perf_counter() - started
    cuda = device.type == "cuda"
    return {"ms_per_step": 1000.0 * elapsed / opts.steps, "sentences_per_s": opts.batch_size * opts.steps / elapsed,
            "start": started_wall, "end": started_wall + elapsed, "device": device_name(device),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "peak_gib": torch.cuda.max_memory_reserved(device) / 2**30 if cuda else None,
            "device_gib": torch.cuda.get_device_properties(device).total_memory / 2**30 if cuda else None}


def run_concurrent(options: BenchOptions, trials: int) -> dict:
    """Aggregate sentences/s of `trials` concurrent trials on one machine, scheduled by Ray.

    Each trial is a Ray task with `num_gpus = 1/trials` (when the cluster has a GPU) and `num_cpus = CPUs/trials`,
    so all of them fit on one GPU at once, as fractional-GPU search trials do. Each builds its own encoder and
    StepRunner, warms up, waits at a barrier until every trial is warm, then times `steps` steps. The aggregate
    is all trials' sentences over the span from the first start to the last end (the conservative figure);
    `sum_of_trial_sentences_per_s` adds each trial's own rate.
    """
    import ray
    import torch

    from raycse.settings.config import check_int
    from raycse.training.ray_runtime import start_ray

    options.validate()
    check_int("--concurrent", trials, low=1)
    started_ray = start_ray()
    try:
        cluster = ray.cluster_resources()
        gpus, cpus = cluster.get("GPU", 0.0), cluster.get("CPU", 1.0)
        num_gpus = math.floor(10_000 / trials) / 10_000 if gpus > 0 else 0.0
        num_cpus = math.floor(10_000 * cpus / trials) / 10_000
        barrier = _barrier_class().remote(trials)
        task = ray.remote(concurrent_trial).options(num_gpus=num_gpus, num_cpus=num_cpus, max_retries=0)
        payload = asdict(options)
        results = ray.get([task.remote(payload, int(cpus // trials), barrier) for _ in range(trials)])
    finally:
        if started_ray:
            ray.shutdown()
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "concurrent": trials,
        "shape": options.shape,
        "loss": options.loss,
        "batch_size": options.batch_size,
        "seq_len": options.seq_len,
        "steps": options.steps,
        "warmup": options.warmup,
        "precision": options.precision,
        "compile": options.compile,
        "device": results[0]["device"],
        "torch": torch.__version__,
        "num_gpus_per_trial": num_gpus,
        "num_cpus_per_trial": num_cpus,
        "aggregate_sentences_per_s": options.batch_size * options.steps * trials / span,
        "sum_of_trial_sentences_per_s": sum(r["sentences_per_s"] for r in results),
        "trials": [{k: r[k] for k in ("ms_per_step", "sentences_per_s", "gpu_ids", "peak_gib")} for r in results],
        "device_gib": results[0]["device_gib"],
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


SHARE_MOST = 8  # `raycse bench --share`: trials a GPU at most, as the shipped records go


def run_share(options: BenchOptions, most: int = SHARE_MOST, progress=print) -> dict:
    """`raycse bench --share`: 1, 2, 4, ... trials sharing one GPU (each `run_concurrent`), doubled while the GPU's
    steps a second, all trials together, rise as `gpus_per_worker: auto` asks (raycse.settings.gpu_share), up to
    `most`; the record is kept where `auto` reads it (`share_record_path`), so later searches of this shape, batch
    and length share their GPUs as measured here. Refused (ConfigError) on a Ray cluster without a GPU.

    Returns:
        The record: each number of trials' mean ms a step, the peak GPU memory of a trial, the GPU, its path.

    Example:
        >>> record = run_share(BenchOptions(shape="bert-base", batch_size=128, steps=30, warmup=5))  # doctest: +SKIP
    """
    import ray

    from raycse.errors import ConfigError
    from raycse.files import write_json_atomic
    from raycse.settings.gpu_share import MEMORY_SHARE, THROUGHPUT_GAIN, share_record_path
    from raycse.training.ray_runtime import start_ray

    no_gpu = ConfigError("--share: the Ray cluster has no GPU, and it measures trials sharing one")
    if _local_gpus() == 0:
        raise no_gpu  # before a local Ray starts for nothing
    started_ray = start_ray()
    try:
        if not ray.cluster_resources().get("GPU"):
            raise no_gpu
        runs, rates, trials = [], [], 1
        while trials <= most:
            runs.append(run_concurrent(options, trials))
            rates.append(trials * 1000.0 / _mean_ms(runs[-1]))
            progress(f"{trials} trial(s) a GPU: {_mean_ms(runs[-1]):.2f} ms a step each, {rates[-1]:.1f} steps/s "
                     "in all")
            if len(rates) > 1 and rates[-1] < (1 + THROUGHPUT_GAIN) * rates[-2]:
                break  # the steps a second stopped rising: `auto` would choose no more trials than these
            peak, memory = _peak_gib(runs[-1]), runs[-1]["device_gib"]
            if peak is not None and memory and 2 * trials * peak > MEMORY_SHARE * memory:
                break  # twice the trials would not fit the GPU
            trials *= 2
    finally:
        if started_ray:
            ray.shutdown()
    peaks = [peak for peak in map(_peak_gib, runs) if peak is not None]
    record = {"shape": options.shape, "loss": options.loss, "batch_size": options.batch_size,
              "seq_len": options.seq_len, "compile": options.compile, "device": runs[0]["device"],
              "device_gib": runs[0]["device_gib"], "trial_gib": max(peaks) if peaks else None,
              "shared_ms": {str(run["concurrent"]): _mean_ms(run) for run in runs},
              "date": runs[-1]["date"], "runs": runs}
    path = share_record_path(options.shape, options.batch_size, options.seq_len, options.compile)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)
    return {**record, "path": str(path)}


def _local_gpus() -> float | None:
    """The GPUs a local Ray would advertise here (None: a cluster's, or a Ray already started, not known yet)."""
    import os

    import ray
    import torch

    from raycse.driver.preflight import local_ray_resources

    if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return None
    return local_ray_resources(torch.cuda.device_count(), 1)[0]


def _peak_gib(run: dict) -> float | None:
    peaks = [t["peak_gib"] for t in run["trials"] if t["peak_gib"] is not None]
    return max(peaks) if peaks else None


def _mean_ms(run: dict) -> float:
    return sum(t["ms_per_step"] for t in run["trials"]) / len(run["trials"])


def format_share(record: dict) -> str:
    """`raycse bench --share`'s last lines: what `gpus_per_worker: auto` now chooses, and where the record is."""
    from raycse.settings.gpu_share import trials_per_gpu

    choice = trials_per_gpu(record["shape"], record["batch_size"], record["seq_len"])
    return (f"kept in {record['path']}\ngpus_per_worker: auto now gives a {record['shape']}-shaped model at batch "
            f"{record['batch_size']}, length {record['seq_len']}: {choice.why}")


def format_concurrent(r: dict) -> str:
    lines = [f"raycse bench --concurrent {r['concurrent']}: {r['shape']}, loss {r['loss']}, batch {r['batch_size']} "
             f"x seq {r['seq_len']}, {r['steps']} timed steps per trial",
             f"device: {r['device']}   torch {r['torch']}   per trial: num_gpus={r['num_gpus_per_trial']:g}, "
             f"num_cpus={r['num_cpus_per_trial']:g}"]
    for i, t in enumerate(r["trials"]):
        lines.append(f"  trial {i}: {t['ms_per_step']:9.2f} ms/step  {t['sentences_per_s']:10.1f} sentences/s"
                     + (f"  GPU {','.join(t['gpu_ids'])}" if t["gpu_ids"] else ""))
    lines.append(f"aggregate: {r['aggregate_sentences_per_s']:.1f} sentences/s "
                 f"(sum of the trials' own rates {r['sum_of_trial_sentences_per_s']:.1f})")
    if r["num_gpus_per_trial"] == 0:
        lines.append("note: no GPU in the Ray cluster, so the trials only split the CPU cores; "
                     "the GPU-sharing figure needs a GPU")
    return "\n".join(lines)
