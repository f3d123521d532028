"""What every step benchmark is told: the shape of the step it times, checked once. `raycse bench` (step.py) and
`raycse bench --cached` (cached.py) extend it with their own fields."""
from __future__ import annotations

from dataclasses import dataclass

from raycse.bench.synthetic import MAX_POSITIONS, SHAPES
from raycse.errors import ConfigError
from raycse.settings.checks import INT_LIMIT, check_int

BENCH_PRECISIONS = ("auto", "fp32", "bf16")


@dataclass
class StepOptions:
    shape: str = "minilm"  # a random-weight BERT shape of bench/synthetic.py
    batch_size: int = 64  # corpus rows (sentences, or NLI triplets) per step
    steps: int = 20  # timed steps
    warmup: int = 5  # untimed steps first
    seq_len: int = 32  # tokens per sentence, [CLS] and [SEP] included
    compile: bool = True  # torch.compile with CUDA graphs, as the trainer does (CUDA only)
    precision: str = "auto"
    seed: int = 0

    def validate(self):
        if self.shape not in SHAPES:
            raise ConfigError(f"--shape: unknown shape {self.shape!r} (choose from {', '.join(SHAPES)})")
        for flag, value, low in (("--batch-size", self.batch_size, 1), ("--steps", self.steps, 1),
                                 ("--warmup", self.warmup, 0), ("--seq-len", self.seq_len, 3)):
            check_int(flag, value, low=low, high=INT_LIMIT)
        if self.seq_len > MAX_POSITIONS:
            raise ConfigError(f"--seq-len: at most {MAX_POSITIONS} (the position embeddings), got {self.seq_len}")
        if self.precision not in BENCH_PRECISIONS:
            raise ConfigError(f"--precision: {self.precision!r} is not one of {', '.join(BENCH_PRECISIONS)}")
        return self


def check_loss(name: str) -> None:
    """A ConfigError naming --loss when `name` is no loss or preset of the registry."""
    from raycse.losses import build_loss

    try:
        build_loss(name)
    except ConfigError as err:
        raise ConfigError(f"--loss: {err}") from None
