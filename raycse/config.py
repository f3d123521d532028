"""Plain dataclasses for one training, validated once, at the edge.

The command line and the search-space files both end up here: `TrainConfig.validate()` is the single place
that checks what a user can get wrong about a training, and it raises `ConfigError` naming the field.
Loss hyperparameters (tau, m, lambda, ...) are validated by the loss registry, which owns their ranges.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError

BUNDLED_CORPUS = "wiki-sample"  # the 11,914 Wikipedia sentences that ship inside the package
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass
class TrainConfig:
    """Everything one training needs. Defaults are SimCSE's unsupervised recipe on the packaged MiniLM."""

    model: str = "minilm"
    loss: str = "simcse"
    reg: str | None = None                     # "dcl" | "barlow": added to the base loss with weight lambda
    hparams: dict[str, float] = field(default_factory=dict)  # tau, m, lambda, ... under the papers' names
    pooler: str = "cls"                        # training pooler (SimCSE: CLS through an MLP head)
    eval_pooler: str | None = None             # None: cls_before_pooler for unsupervised 'cls' (mlp_only_train)
    batch_size: int = 64                       # per worker; W workers behave like one batch of W * batch_size
    lr: float = 3e-5
    weight_decay: float = 0.0
    epochs: int = 1
    max_steps: int | None = None               # stop after this many steps (overrides epochs when smaller)
    eval_steps: int = 125
    max_len: int = 32
    corpus: str = BUNDLED_CORPUS               # text file, http(s) URL or hf:NAME[:split[:column]]
    sup_data: str | None = None                # SimCSE's NLI csv (sent0, sent1, hard_neg) for supervised losses
    replace_bad_bytes: bool = False            # decode non-UTF-8 corpus bytes as U+FFFD instead of failing
    max_sentences: int | None = None           # use only the first N sentences / triplets of the data
    seed: int = 42
    workers: int = 1
    gpus_per_worker: float = 0.0
    complementary: str | None = None           # DCLR's frozen complementary encoder (default: the start weights)
    precision: str = "auto"                    # auto: bf16 on CUDA (fp16 where unsupported), fp32 on CPU
    compile: bool = True                       # torch.compile with CUDA graphs (CUDA only; ignored on CPU)
    test_eval: bool = True                     # score the best checkpoint on the seven STS test tasks at the end
    trust_remote_code: bool = False
    output_dir: str | None = None

    @property
    def resolved_eval_pooler(self) -> str:
        if self.eval_pooler:
            return self.eval_pooler
        unsupervised = self.sup_data is None
        return "cls_before_pooler" if (self.pooler == "cls" and unsupervised) else self.pooler

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown training setting {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(**values)

    def validate(self) -> "TrainConfig":
        """Check every field once; return self so calls chain. Builds the loss to validate its hyperparameters."""
        from raycse.losses import build_loss
        from raycse.model import POOLERS, resolve_model_path

        _positive_int("batch_size", self.batch_size)
        _positive_int("epochs", self.epochs)
        _positive_int("eval_steps", self.eval_steps)
        _positive_int("max_len", self.max_len)
        _positive_int("workers", self.workers)
        if self.max_steps is not None:
            _positive_int("max_steps", self.max_steps)
        if self.max_sentences is not None:
            _positive_int("max_sentences", self.max_sentences)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"seed: must be an integer, got {self.seed!r}")
        _finite("lr", self.lr, low=0.0, low_inclusive=False)
        _finite("weight_decay", self.weight_decay, low=0.0)
        _finite("gpus_per_worker", self.gpus_per_worker, low=0.0)
        for name in ("pooler", "eval_pooler"):
            value = getattr(self, name)
            if value is not None and value not in POOLERS:
                raise ConfigError(f"{name}: unknown pooler {value!r} (choose from {', '.join(POOLERS)})")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        try:
            resolve_model_path(self.model)  # a missing local directory fails now; hub ids are checked on load
        except ConfigError as err:
            raise ConfigError(f"model: {err}") from None
        loss = build_loss(self.loss, self.reg, **self.hparams)  # raises ConfigError naming the hyperparameter
        if loss.needs_hard_neg and self.sup_data is None:
            raise ConfigError(f"loss {self.loss!r} is supervised: give --sup-data (an NLI csv with sent0, sent1, hard_neg)")
        for name in ("sup_data", "complementary"):
            value = getattr(self, name)
            if value is not None and not Path(value).expanduser().exists():
                raise ConfigError(f"{name}: path {value!r} does not exist")
        if self.corpus != BUNDLED_CORPUS and "://" not in self.corpus and not self.corpus.startswith("hf:"):
            corpus = Path(self.corpus).expanduser()
            if not corpus.is_file():
                raise ConfigError(f"corpus: file {self.corpus!r} does not exist")
        return self


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name}: must be an integer >= 1, got {value!r}")


def _finite(name: str, value: Any, low: float, low_inclusive: bool = True) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = value >= low if low_inclusive else value > low
    if not ok:
        bound = f">= {low}" if low_inclusive else f"> {low}"
        raise ConfigError(f"{name}: must be a finite number {bound}, got {value!r}")
