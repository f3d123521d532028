"""How many trials share one GPU: the training steps recorded with 1, 2, 4 and 8 trials on a GPU, and the rule that
turns them into `resources.gpus_per_worker: auto`.

A GPU runs a small model's step with idle gaps (kernel launches, the data loader, the host's Python), which other
trials fill: k trials on one GPU each step slower, but together the GPU does more steps a second, until it is full.
`trials_per_gpu` keeps adding trials while that total still rises:

  steps a second with k trials   r(k) = k / (a trial's step with k trials on the GPU)
  k is doubled while             r(2k) >= (1 + THROUGHPUT_GAIN) r(k),
                                 2k trials fit the recorded GPU's memory (MEMORY_SHARE of it, at the recorded
                                 memory a trial), and 2k trials have CPUs enough beside the GPU

and only on measured points: a share nobody measured is never chosen. BERT-base at batch 64 (the papers' setting)
doubles from 1 to 2 trials (r 64.4 -> 87.8, +36%) and stops there (93.4 at 4, +6%); its searches took 196, 150 and
217 s at 1, 2 and 4 trials a GPU. A model, batch or length with no record gets one trial a GPU. A file's number
(`gpus_per_worker: 0.25`) is never replaced.

The records: those shipped here (`GPU_STEPS`, measured on an H100), and before them the user's own, measured on
their GPU by `raycse bench --share` (a short measurement: 1, 2, 4, ... trials until the rule stops) and kept in the
raycse cache folder (`share_records`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"  # the `resources.gpus_per_worker` value that `trials_per_gpu` resolves

# Doubling the trials on a GPU must raise its steps a second by this much to be worth a trial's memory, its share of
# the host's CPUs and a less informed scheduler (ASHA compares trials that ran beside more others).
THROUGHPUT_GAIN = 0.10
MEMORY_SHARE = 0.9  # of the GPU's memory the trials may take: the rest for the CUDA context's growth and fragments

H100_STEPS = "benchmarks/results/step-speed/2026-11-22-h100/"
H100_PAPER = "benchmarks/results/paper-scale/2026-11-26-h100/"  # BERT-base at the papers' settings (random weights)
H100_WARM_SEARCH_GPU = "benchmarks/results/warm-workers/2026-11-26-h100/gpu_util.csv"  # four MiniLM trials: 12,780 MiB
H100_GIB = 79.6  # an NVIDIA H100 80GB HBM3 (81,559 MiB), where every step below was recorded

# The encoder shapes that `raycse bench` builds and that records name: a model's config.json matches one by its
# width and depth.
SHAPES: dict[str, dict[str, int]] = {
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "bert-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
    "minilm": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536},
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
}
# Hub models whose shape is known without their files (a plan is made before anything is downloaded).
HUB_SHAPES = {"bert-base-uncased": "bert-base", "google-bert/bert-base-uncased": "bert-base"}


@dataclass(frozen=True)
class GpuStep:
    """A recorded training step on a GPU: ms a step with k trials sharing the GPU where measured; elsewhere the
    larger of the step alone and k times the device's own ms a step (k trials take turns on one device).
    `trial_gib`: one trial's GPU memory (None: not recorded); `device`, `device_gib`: the GPU and its memory."""

    shape: str
    batch_size: int
    seq_len: int
    shared_ms: dict[int, float]
    device_ms: float | None
    compiled: bool
    record: str
    trial_gib: float | None = None
    device: str = "an H100"
    device_gib: float = H100_GIB

    def ms(self, sharing: int) -> float:
        if sharing in self.shared_ms:
            return self.shared_ms[sharing]
        if self.device_ms is not None:
            return max(self.shared_ms[1], sharing * self.device_ms)
        below = max(k for k in self.shared_ms if k < sharing)  # the measured sharing just below, in proportion
        return self.shared_ms[below] * sharing / below

    def steps_per_s(self, sharing: int) -> float:
        """The GPU's training steps a second, all `sharing` trials together (a measured sharing only)."""
        return sharing * 1000.0 / self.shared_ms[sharing]


GPU_STEPS = (
    # eager, as a search's short trials run (compile: auto): 1, 2, 4 and 8 trials sharing the GPU, each trial's mean;
    # a trial's memory: the focal search's peak with four trials, a quarter each
    GpuStep("minilm", 64, 32, {1: 26.80, 2: 26.35, 4: 30.46, 8: 46.94}, None, False, H100_STEPS + "concurrent.json",
            trial_gib=12_780 / 4 / 1024),
    # compiled, bf16, inside a search's trials after their first evaluation (the GPU suite's paper part): 1, 2 and 4
    # trials sharing the GPU; beyond, k times the device's own ms a step (`raycse bench`'s profile, the same day)
    # a trial's memory: the largest peak of one trial in the paper part's searches (paper.json)
    GpuStep("bert-base", 64, 32, {1: 15.53, 2: 22.79, 4: 42.84}, 11.98, True, H100_PAPER + "steady-steps.json",
            trial_gib=5_498 / 1024),
    GpuStep("bert-base", 512, 32, {1: 59.29}, 59.68, True, H100_STEPS + "bert-base-512.json"),
)


def shape_of(hidden_size: int | None, num_hidden_layers: int | None) -> str | None:
    """The name in `SHAPES` of this width and depth, or None."""
    return next((name for name, dims in SHAPES.items()
                 if (dims["hidden_size"], dims["num_hidden_layers"]) == (hidden_size, num_hidden_layers)), None)


def recorded_step(shape: str | None, batch_size: int, seq_len: int,
                  records: tuple[GpuStep, ...] | None = None) -> GpuStep | None:
    """The recorded GPU step of this shape, batch and sequence length, or None: the first of `records` that fits
    (default: the user's own, `share_records`, then the shipped `GPU_STEPS`), so that the share `auto` chooses and
    the step the dry run prices come from one record."""
    records = (*share_records(), *GPU_STEPS) if records is None else records
    return next((r for r in records if (r.shape, r.batch_size, r.seq_len) == (shape, batch_size, seq_len)), None)


# ------------------------------------------------------------------------------------------ the user's own records
SHARE_DIR = "gpu-share"  # under the raycse cache folder (raycse.files.cache_dir)


def share_folder() -> Path:
    from raycse.files import cache_dir

    return cache_dir() / SHARE_DIR


def share_record_path(shape: str, batch_size: int, seq_len: int, compiled: bool) -> Path:
    """Where `raycse bench --share` keeps its measurement of this shape, batch, length and compilation."""
    return share_folder() / f"{shape}-batch{batch_size}-len{seq_len}-{'compiled' if compiled else 'eager'}.json"


def share_records() -> tuple[GpuStep, ...]:
    """The user's own records (`raycse bench --share`), newest first; a file that cannot be read is left out."""
    records = []
    for path in sorted(share_folder().glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            raw = json.loads(path.read_text())
            records.append(GpuStep(
                str(raw["shape"]), int(raw["batch_size"]), int(raw["seq_len"]),
                {int(k): float(ms) for k, ms in raw["shared_ms"].items()}, None, bool(raw["compile"]), str(path),
                trial_gib=raw.get("trial_gib"), device=str(raw["device"]),
                device_gib=float(raw.get("device_gib") or H100_GIB)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return tuple(records)


@dataclass(frozen=True)
class ShareChoice:
    """How many trials share a GPU, and why, in words for the search's log."""

    trials: int
    why: str

    @property
    def gpus_per_worker(self) -> float:
        return 1.0 / self.trials


def trials_per_gpu(shape: str | None, batch_size: int, seq_len: int, most: int | None = None,
                   records: tuple[GpuStep, ...] | None = None) -> ShareChoice:
    """The trials a GPU for a one-worker trial of this shape, batch and length (the rule in the module's docstring).

    Args:
        shape: the model's name in `SHAPES` (None: unknown).
        batch_size, seq_len: the trials' batch and `max_len`.
        most: the most trials the host's CPUs can feed beside one GPU (None: no limit known).
        records: the recorded steps to choose from (default: the user's own, then `GPU_STEPS`).

    Returns:
        A `ShareChoice`; one trial a GPU where nothing is recorded.

    Example:
        >>> trials_per_gpu("bert-base", 64, 32).trials
        2
    """
    record = recorded_step(shape, batch_size, seq_len, records)
    if record is None:
        return ShareChoice(1, f"one trial a GPU: no step recorded for a {shape or 'model of unknown'}-shaped model at "
                              f"batch {batch_size}, length {seq_len} with trials sharing a GPU (`raycse bench --share "
                              "--shape SHAPE --batch-size N` measures one; or state resources.gpus_per_worker)")
    trials, reasons = 1, []
    for more in sorted(k for k in record.shared_ms if k > 1):
        gain = record.steps_per_s(more) / record.steps_per_s(trials)
        rate = f"{record.steps_per_s(trials):.1f} -> {record.steps_per_s(more):.1f} steps/s from {trials} to {more}"
        if gain < 1 + THROUGHPUT_GAIN:
            reasons.append(f"{rate} (+{100 * (gain - 1):.0f}%, under +{100 * THROUGHPUT_GAIN:.0f}%)")
            break
        if record.trial_gib is not None and more * record.trial_gib > MEMORY_SHARE * record.device_gib:
            reasons.append(f"{more} trials of {record.trial_gib:.1f} GiB would not fit {MEMORY_SHARE:.0%} of the GPU")
            break
        if most is not None and more > most:
            reasons.append(f"{rate}, but the CPUs beside a GPU feed {most} trial(s)")
            break
        trials = more
        reasons.append(f"{rate} (+{100 * (gain - 1):.0f}%)")
    return ShareChoice(trials, f"{trials} trial(s) a GPU: {'; '.join(reasons) or 'one measured'} "
                               f"(a {shape}-shaped model at batch {batch_size}, recorded on {record.device}: "
                               f"{record.record})")
