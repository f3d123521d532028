"""`raycse bench --cached`: what gradient caching (`mini_batch_size`, grad_cache.py) costs in time and memory.

For each loss, the trainer's own step (`StepRunner.step` on the trainer's DataLoader, as `raycse bench` times it)
in four configurations, B the small batch (`--batch-size`, 64) and L the large one (`--cached-batch-size`, 512):

  uncached B        batch B, torch's dropout: what fits a GPU today
  uncached L        batch L, torch's dropout: what a larger GPU would run
  cached L / B      batch L in chunks of B sentences: the gradients of batch L in the memory of batch B
  keyed L           batch L in one chunk (mini_batch_size = L): the uncached step with keyed dropout masks, the
                    reference a cached run equals; it splits the cached step's extra time into its two causes,
                    keyed dropout (keyed L / uncached L) and the second forward pass (cached L / keyed L)

Each configuration runs in a process of its own, so that peaks do not mix: on a CPU its peak resident set size
(`getrusage` ru_maxrss: libraries, model, optimiser state, activations), with the resident size before the model
was built beside it; on CUDA the peak of allocated CUDA memory (`torch.cuda.max_memory_allocated`). Those processes
are forked from one that imported torch, transformers and the trainer once (raycse.bench.cached_configuration). The
targets of issue 25: the cached step at most 1.4 x the uncached step of the same batch, and the peak memory of the
cached step within 1.3 x that of the uncached small batch.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
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


# ------------------------------------------------------------------------------ one configuration, one process
@contextlib.contextmanager
def _configuration_processes() -> Iterator[Callable[[dict], dict]]:
    """Each configuration measured in a process of its own, forked by one that imported torch, transformers and the
    trainer once (`python -m raycse.bench.cached_configuration`, its `fork_each_configuration`), which ends with
    this context. Yields `measured(spec)`, which raises a RuntimeError naming the configuration that failed (and,
    if the forking process itself ended, the last line it wrote)."""
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen([sys.executable, "-m", f"{__package__}.cached_configuration"], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                  env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})

        def measured(spec: dict) -> dict:
            try:
                server.stdin.write(json.dumps(spec) + "\n")
                server.stdin.flush()
                line = server.stdout.readline()
            except OSError:  # it ended
                line = ""
            if not line:
                server.wait()
                log.seek(0)
                said = [text for text in log.read().splitlines() if text.strip()][-1:] or ["(nothing)"]
                line = json.dumps({"error": f"the process forking the configurations ended: {said[0]}"})
            answer = json.loads(line)
            if "error" in answer:
                raise RuntimeError(f"the {spec['loss']} configuration batch {spec['batch_size']} mini "
                                   f"{spec['mini_batch_size']} failed: {answer['error']}")
            return answer["figures"]

        try:
            yield measured
        finally:
            with contextlib.suppress(OSError):  # it ended already
                server.stdin.close()
            server.wait()


def _loss_row(loss: str, base: dict, batches: dict, measured: Callable[[dict], dict], progress) -> dict:
    """One loss in every configuration, with the cached step's time and memory against the targets."""
    row: dict = {"loss": loss}
    for name in CONFIGURATIONS:
        batch_size, mini = batches[name]
        row[name] = measured({**base, "loss": loss, "batch_size": batch_size, "mini_batch_size": mini})
        if progress is not None:
            progress(f"{loss} {name}: {row[name]['ms_per_step']:.0f} ms/step")
    memory = "peak_cuda_mib" if "peak_cuda_mib" in row["cached"] else "peak_mib"
    row["time_ratio"] = row["cached"]["ms_per_step"] / row["uncached_large"]["ms_per_step"]
    row["memory_ratio"] = row["cached"][memory] / row["uncached_small"][memory]
    row["time_ok"] = row["time_ratio"] <= TIME_TARGET
    row["memory_ok"] = row["memory_ratio"] <= MEMORY_TARGET
    return row


def run_cached_bench(options: CachedBenchOptions, progress=None) -> dict:
    """Every loss in every configuration, one process each; the figures as a JSON-ready dict."""
    options.validate()
    small, large = options.batch_size, options.cached_batch_size
    batches = {"uncached_small": (small, None), "uncached_large": (large, None), "cached": (large, small),
               "keyed_large": (large, large)}
    base = {k: v for k, v in asdict(options).items() if k not in ("losses", "batch_size", "cached_batch_size")}
    with _configuration_processes() as measured:
        rows = [_loss_row(loss, base, batches, measured, progress) for loss in options.losses]
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
