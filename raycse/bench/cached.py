"""`raycse bench --cached`: what gradient caching (`mini_batch_size`, grad_cache.py) costs in time and memory.

For each loss, the trainer's own step (`StepRunner.step` on the trainer's DataLoader, as `raycse bench` times it)
in four configurations, B the small batch (`--batch-size`, 64) and L the large one (`--cached-batch-size`, 512):

  uncached B        batch B, torch's dropout: what fits a GPU today
  uncached L        batch L, torch's dropout: what a larger GPU would run
  cached L / B      batch L in chunks of B sentences: the gradients of batch L in the memory of batch B
  keyed L           batch L in one chunk (mini_batch_size = L): the uncached step with keyed dropout masks, the
                    reference a cached run equals; it splits the cached step's extra time into its two causes,
                    keyed dropout (keyed L / uncached L) and the second forward pass (cached L / keyed L)

Each configuration runs in a subprocess of its own, so that peaks do not mix: on a CPU its peak resident set size
(`getrusage` ru_maxrss: libraries, model, optimiser state, activations), with the resident size before the model
was built beside it; on CUDA the peak of allocated CUDA memory (`torch.cuda.max_memory_allocated`). The targets
of issue 25: the cached step at most 1.4 x the uncached step of the same batch, and the peak memory of the cached
step within 1.3 x that of the uncached small batch.
"""
from __future__ import annotations

import copy
import json
import math
import os
import resource
import subprocess
import sys
from dataclasses import asdict, dataclass

from raycse.bench.options import StepOptions, check_loss
from raycse.errors import ConfigError
from raycse.losses import DEFAULT_LOSS
from raycse.settings.checks import INT_LIMIT, check_int

TIME_TARGET = 1.4  # cached L / uncached L
MEMORY_TARGET = 1.3  # cached L / uncached B
CONFIGURATIONS = ("uncached_small", "uncached_large", "cached", "keyed_large")


@dataclass
class CachedBenchOptions(StepOptions):
    losses: tuple[str, ...] = (DEFAULT_LOSS,)
    cached_batch_size: int = 512  # the large batch; batch_size is the small one, and the cached step's chunk
    steps: int = 3
    warmup: int = 1

    def validate(self) -> CachedBenchOptions:
        super().validate()
        for loss in self.losses:
            check_loss(loss)
        check_int("--cached-batch-size", self.cached_batch_size, low=1, high=INT_LIMIT)
        if self.cached_batch_size < self.batch_size:
            raise ConfigError(f"--cached-batch-size: must be at least --batch-size ({self.batch_size}), "
                              f"got {self.cached_batch_size}")
        return self


def parse_losses(text: str) -> tuple[str, ...]:
    """'all' (every loss and preset of the registry) or a comma-separated list."""
    from raycse.losses import LOSS_NAMES

    names = LOSS_NAMES if text == "all" else tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ConfigError("--loss: give a loss, a comma-separated list of losses, or 'all'")
    return names


# ---------------------------------------------------------------------------- one configuration, in a subprocess
def _resident_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def measure(spec: dict) -> dict:
    """One configuration in this process: {"ms_per_step", "peak_mib", "start_mib", ...}. `spec`: the options as a
    dict plus "loss", "batch_size" and "mini_batch_size" (None: uncached)."""
    import torch

    from raycse.bench.synthetic import load_tokenizer, make_encoder, synthetic_data
    from raycse.bench.timing import device_name, synchronize, timed_steps
    from raycse.encoder.model import pick_device
    from raycse.losses import build_loss
    from raycse.settings.config import TrainConfig
    from raycse.training.batches import training_loader
    from raycse.training.step_runner import StepRunner
    from raycse.training.trainer import freeze

    device = pick_device()
    start_mib = _resident_mib()
    tokenizer = load_tokenizer()
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


def _run_child(spec: dict) -> dict:
    process = subprocess.run([sys.executable, "-m", __name__, json.dumps(spec)], capture_output=True,
                             text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if process.returncode != 0:
        tail = process.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"the {spec['loss']} configuration batch {spec['batch_size']} mini "
                           f"{spec['mini_batch_size']} failed: {tail[0]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------- the bench
def run_cached_bench(options: CachedBenchOptions, progress=None) -> dict:
    """Every loss in every configuration, one subprocess each; the figures as a JSON-ready dict."""
    options.validate()
    small, large = options.batch_size, options.cached_batch_size
    batches = {"uncached_small": (small, None), "uncached_large": (large, None), "cached": (large, small),
               "keyed_large": (large, large)}
    base = {k: v for k, v in asdict(options).items() if k not in ("losses", "batch_size", "cached_batch_size")}
    rows = []
    for loss in options.losses:
        row = {"loss": loss}
        for name in CONFIGURATIONS:
            batch_size, mini = batches[name]
            row[name] = _run_child({**base, "loss": loss, "batch_size": batch_size, "mini_batch_size": mini})
            if progress is not None:
                progress(f"{loss} {name}: {row[name]['ms_per_step']:.0f} ms/step")
        cuda = "peak_cuda_mib" in row["cached"]
        memory = "peak_cuda_mib" if cuda else "peak_mib"
        row["time_ratio"] = row["cached"]["ms_per_step"] / row["uncached_large"]["ms_per_step"]
        row["memory_ratio"] = row["cached"][memory] / row["uncached_small"][memory]
        row["time_ok"] = row["time_ratio"] <= TIME_TARGET
        row["memory_ok"] = row["memory_ratio"] <= MEMORY_TARGET
        rows.append(row)
    first = rows[0]["cached"]
    return {"shape": options.shape, "seq_len": options.seq_len, "batch_size": small, "cached_batch_size": large,
            "steps": options.steps, "warmup": options.warmup, "device": first["device"],
            "compiled": first["compiled"], "memory": "peak allocated CUDA memory" if "peak_cuda_mib" in first
            else "peak resident set size of the process", "rows": rows,
            "targets": {"time": TIME_TARGET, "memory": MEMORY_TARGET}}


def format_cached(result: dict) -> str:
    from raycse.bench.synthetic import SHAPES

    layers = SHAPES[result["shape"]]
    small, large = result["batch_size"], result["cached_batch_size"]
    cuda = result["memory"].startswith("peak allocated")
    lines = [f"raycse bench --cached: {result['shape']} ({layers['num_hidden_layers']}x{layers['hidden_size']}), "
             f"seq {result['seq_len']}, {result['steps']} timed steps after {result['warmup']}, "
             f"{'compiled' if result['compiled'] else 'eager'}",
             f"device: {result['device']}   memory: {result['memory']}"
             + ("" if cuda else " (in brackets: above the process's size before the model was built)"),
             f"{'loss':<14} {'configuration':<22} {'ms/step':>10} {'peak MiB':>18}"]
    names = {"uncached_small": f"uncached {small}", "uncached_large": f"uncached {large}",
             "cached": f"cached {large} / mini {small}", "keyed_large": f"keyed {large} (1 chunk)"}
    for row in result["rows"]:
        for index, name in enumerate(CONFIGURATIONS):
            figures = row[name]
            if cuda:
                memory = f"{figures['peak_cuda_mib']:>18.0f}"
            else:
                memory = f"{figures['peak_mib']:>8.0f} ({figures['peak_mib'] - figures['start_mib']:>6.0f})"
                memory = f"{memory:>18}"
            lines.append(f"{row['loss'] if index == 0 else '':<14} {names[name]:<22} "
                         f"{figures['ms_per_step']:>10.1f} {memory}")
        lines.append(f"{'':<14} cached / uncached {large}: {row['time_ratio']:.2f}x time "
                     f"({'meets' if row['time_ok'] else 'misses'} <= {TIME_TARGET}x); "
                     f"cached / uncached {small}: {row['memory_ratio']:.2f}x memory "
                     f"({'meets' if row['memory_ok'] else 'misses'} <= {MEMORY_TARGET}x)")
    return "\n".join(lines)


if __name__ == "__main__":  # one configuration: `python -m raycse.bench.cached '<json spec>'`, JSON on stdout
    print(json.dumps(measure(json.loads(sys.argv[1]))))
