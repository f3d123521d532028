"""One configuration of `raycse bench --cached` (raycse.bench.cached), measured in a process of its own; run as a
module (`python -m raycse.bench.cached_configuration`), the process each configuration's process is forked from.

That process imports what a measurement needs (torch, transformers, the trainer: this module's imports) once, and
never touches CUDA, so that each fork makes its own CUDA context and its own peaks. A new Python process for each
configuration imported them again, 5-6 CPU-seconds each, four a loss.
"""
from __future__ import annotations

import copy
import json
import math
import os
import resource
import sys

import torch

from raycse.bench.synthetic import bench_tokenizer, make_encoder, synthetic_data
from raycse.bench.timing import device_name, synchronize, timed_steps
from raycse.encoder.model import pick_device
from raycse.errors import first_line
from raycse.losses import build_loss
from raycse.settings.config import TrainConfig
from raycse.training.batches import training_loader
from raycse.training.step_runner import StepRunner
from raycse.training.trainer import freeze


def _resident_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def measure_configuration(spec: dict) -> dict:
    """One configuration in this process: {"ms_per_step", "peak_mib", "start_mib", ...}. `spec`: the options as a
    dict plus "loss", "batch_size" and "mini_batch_size" (None: uncached)."""
    device = pick_device()
    start_mib = _resident_mib()
    tokenizer = bench_tokenizer()
    config = TrainConfig(model="random", loss=spec["loss"], batch_size=spec["batch_size"],
                         mini_batch_size=spec["mini_batch_size"], max_len=spec["seq_len"], pooler="cls",
                         precision=spec["precision"], compile="always" if spec["compile"] else "never",
                         seed=spec["seed"])
    loss_fn = build_loss(spec["loss"])
    encoder = make_encoder(spec["shape"], tokenizer, "sdpa", spec["seed"], pooler="cls").to(device).train()
    complementary = freeze(copy.deepcopy(encoder), device) if loss_fn.needs_complementary else None
    total = spec["warmup"] + spec["steps"]
    runner = StepRunner(encoder, loss_fn, config, device, total, complementary)
    if spec["compile"] and device.type == "cuda":
        runner.compile()
    data = synthetic_data(tokenizer, spec["batch_size"], spec["seq_len"], loss_fn.needs_hard_neg, min(4, total),
                          spec["seed"])
    loader = training_loader(data, math.ceil(total / len(data)), total, runner.tokenize, device, spec["seed"])
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(spec["seed"])
    elapsed = timed_steps(runner.step, iter(loader), spec["warmup"], spec["steps"], device)
    result = {"ms_per_step": 1000.0 * elapsed / spec["steps"], "device": device_name(device),
              "compiled": runner.compiled, "start_mib": start_mib,
              "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # Linux: KiB
    if device.type == "cuda":
        result["peak_cuda_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        result["peak_cuda_reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
    return result


def fork_each_configuration() -> None:
    """For each configuration (a JSON line on standard input) fork a process that measures it, and answer with one
    JSON line on standard output, {"figures": ...} or {"error": ...}; return when the input ends."""
    for line in sys.stdin:
        spec = json.loads(line)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the configuration's process: what libraries print goes to stderr, not among the answers
            try:  # it never returns to this loop: it ends here, whatever happens
                os.close(read_end)
                os.dup2(2, 1)
                try:
                    answer = {"figures": {**measure_configuration(spec), "process_id": os.getpid()}}
                except Exception as err:  # noqa: BLE001 (the answer names it, whatever it was)
                    answer = {"error": first_line(err)}
                os.write(write_end, json.dumps(answer).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            text = pipe.read()
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(text or json.dumps({"error": f"its process ended with status {status}"}), flush=True)


if __name__ == "__main__":
    fork_each_configuration()
