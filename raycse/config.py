"""Plain dataclasses for one training, validated once, at the edge.

The command line and the search-space files both end up here: `TrainConfig.validate()` is the single place
that checks what a user can get wrong about a training, and it raises `ConfigError` naming the field. Each
field's metadata carries its help text, so `raycse train`'s flags are generated from this class (cli.py)
and a new setting is one new field. Loss hyperparameters (tau, m, lambda, ...) are validated by the loss
registry, which owns their ranges and generates their flags.

The number checks at the bottom are the package's only ones: space files, the benchmark and the command line
call them too.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.data import BUNDLED_CORPUS, BUNDLED_NLI
from raycse.errors import ConfigError
from raycse.model import AUTO_POOLER, POOLERS, resolve_poolers

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
COMPILE_POLICIES = ("auto", "always", "never")


def setting(default: Any = None, help: str = "", *, searchable: bool = False, choices: tuple | None = None,
            factory: Any = None, flag: bool = True) -> Any:
    """A TrainConfig field with what the command line and the space files need to know about it.

    searchable: a space file may search it like a loss hyperparameter (lr, batch_size, pooler, ...).
    flag: `raycse train` gets a --flag for it (hparams and output_dir are handled on their own).
    """
    metadata = {"help": help, "searchable": searchable, "choices": choices, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Everything one training needs. Defaults are SimCSE's unsupervised recipe on the packaged MiniLM."""

    model: str = setting("minilm", "'minilm' (the packaged all-MiniLM-L6-v2), a local model directory or a hub id")
    loss: str = setting("simcse", "the loss (see `raycse train --help` for the list)")
    reg: str | None = setting(None, "add a regulariser with weight --lambda: dcl | barlow")
    hparams: dict[str, float] = setting(help="loss hyperparameters under the papers' names", factory=dict, flag=False)
    pooler: str = setting("auto", "training pooler; auto: the model's own sentence-transformers pooling if it "
                          "declares one, else SimCSE's CLS + MLP head", searchable=True,
                          choices=(AUTO_POOLER, *POOLERS))
    eval_pooler: str | None = setting(None, "evaluation pooler (default: follows --pooler; SimCSE's "
                                      "cls_before_pooler for unsupervised cls training)",
                                      choices=POOLERS)
    batch_size: int = setting(64, "sentences (or triplets) per step and worker; W workers act as one batch of "
                              "W x batch_size", searchable=True)
    mini_batch_size: int | None = setting(None, "gradient caching (GradCache): encode each batch in chunks of this "
                                          "many sentences (or triplets) per worker, so that a batch far larger than "
                                          "fits in memory trains with the same gradients as if it fitted. Dropout "
                                          "masks are then keyed by sentence, not drawn from torch's RNG, so a run "
                                          "with it differs from one without it as two seeds do; the uncached "
                                          "reference run is the same command with --mini-batch-size equal to "
                                          "--batch-size (default: off, torch's dropout)", searchable=True)
    lr: float = setting(3e-5, "peak learning rate of AdamW (linear decay, no warm-up)", searchable=True)
    weight_decay: float = setting(0.0, "AdamW weight decay", searchable=True)
    max_grad_norm: float = setting(1.0, "clip the gradient to this global norm, as the papers' Hugging Face "
                                   "Trainer does (0 turns clipping off)", searchable=True)
    epochs: int = setting(1, "passes over the training data")
    max_steps: int | None = setting(None, "stop after this many steps (when fewer than the epochs give)")
    eval_steps: int = setting(125, "score the objective every this many steps (and at the last step)")
    max_len: int = setting(32, "truncate training sentences to this many tokens", searchable=True)
    objective: str = setting("stsb_dev", "what selects the best checkpoint and drives the search: stsb_dev "
                             "(STS-B dev Spearman), sts_dev_avg (mean of STS-B dev and SICK-R dev, as DCLR "
                             "selects), or a TSV/CSV file of sentence pairs with gold scores")
    objective_columns: str | None = setting(None, "for an objective file: its two sentence columns and score "
                                            "column, comma-separated (default: sentence1,sentence2,score)")
    corpus: str = setting(BUNDLED_CORPUS, "unsupervised sentences: a text file (one a line), an http(s) URL or "
                          "hf:NAME[:SPLIT[:COLUMN]] (default: the bundled Wikipedia sample)")
    sup_data: str | None = setting(None, "supervised triplets: an NLI csv with sent0, sent1, hard_neg (SimCSE's "
                                   f"format), or '{BUNDLED_NLI}' (a small demonstration set built from SICK)")
    replace_bad_bytes: bool = setting(False, "decode non-UTF-8 corpus bytes as U+FFFD instead of stopping")
    max_sentences: int | None = setting(None, "use only the first N sentences (or triplets) of the data")
    seed: int = setting(42, "fixes initialisation, data order, dropout masks and noise negatives")
    workers: int = setting(1, "data-parallel workers (Ray Train); negatives are gathered across them")
    gpus_per_worker: float = setting(0.0, "GPUs per worker (fractions share a GPU)")
    complementary: str | None = setting(None, "DCLR's frozen complementary model (the paper: a trained SimCSE "
                                        "model; default: a frozen copy of the start weights)")
    precision: str = setting("auto", "auto: bf16 autocast on CUDA (fp16 where unsupported), fp32 on CPU",
                             choices=PRECISIONS)
    compile: str = setting("auto", "torch.compile with CUDA graphs (CUDA only): auto compiles when the "
                           "training's steps repay the compile time", choices=COMPILE_POLICIES)
    test_eval: bool = setting(True, "score the best checkpoint on the seven STS test tasks at the end")
    trust_remote_code: bool = setting(False, "let transformers run code shipped with the model")
    output_dir: str | None = setting(None, "where best/, last/ and results.json go", flag=False)

    @property
    def supervised(self) -> bool:
        return self.sup_data is not None

    def poolers(self) -> tuple[str, str]:
        """(training pooler, evaluation pooler): 'auto' resolved from the model's own files (model.py)."""
        return resolve_poolers(self.model, self.pooler, self.eval_pooler, supervised=self.supervised)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown training setting {unknown[0]!r} (known: {', '.join(sorted(known))})",
                              key=unknown[0])
        return cls(**values)

    def validate(self) -> TrainConfig:
        """Check every field once; return self so calls chain. Builds the loss to validate its hyperparameters."""
        from raycse.evaluation import build_objective
        from raycse.losses import build_loss
        from raycse.model_loading import resolve_model_path

        for name in ("batch_size", "epochs", "eval_steps", "max_len", "workers"):
            check_int(name, getattr(self, name), low=1)
        for name in ("max_steps", "max_sentences", "mini_batch_size"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low=1)
        if self.mini_batch_size is not None and self.mini_batch_size > self.batch_size:
            raise ConfigError.at("mini_batch_size", f"must be at most batch_size ({self.batch_size}), got "
                                                    f"{self.mini_batch_size}: it is how many of a batch's sentences "
                                                    f"are encoded at once")
        check_int("seed", self.seed)
        check_number("lr", self.lr, low=0.0, strict=True)
        for name in ("weight_decay", "max_grad_norm", "gpus_per_worker"):
            check_number(name, getattr(self, name), low=0.0)
        for f in dataclasses.fields(self):
            choices, value = f.metadata.get("choices"), getattr(self, f.name)
            if choices and value is not None and value not in choices:
                raise ConfigError.at(f.name, f"{value!r} is not one of {', '.join(choices)}")
        try:
            resolve_model_path(self.model)  # a missing local directory fails now; hub ids are checked on load
        except ConfigError as err:
            raise ConfigError.at("model", str(err)) from None
        loss = build_loss(self.loss, self.reg, **self.hparams)  # raises ConfigError naming the hyperparameter
        if loss.needs_hard_neg and self.sup_data is None:
            raise ConfigError.at("sup_data", f"loss {self.loss!r} is supervised: give an NLI csv with sent0, sent1, "
                                             f"hard_neg, or '{BUNDLED_NLI}'")
        if self.sup_data not in (None, BUNDLED_NLI) and not Path(self.sup_data).expanduser().is_file():
            raise ConfigError.at("sup_data", f"file {self.sup_data!r} does not exist")
        if self.complementary is not None and "://" not in self.complementary \
                and not Path(self.complementary).expanduser().exists():
            raise ConfigError.at("complementary", f"path {self.complementary!r} does not exist")
        if self.corpus != BUNDLED_CORPUS and "://" not in self.corpus and not self.corpus.startswith("hf:"):
            if not Path(self.corpus).expanduser().is_file():
                raise ConfigError.at("corpus", f"file {self.corpus!r} does not exist")
        try:
            build_objective(self.objective, self.objective_columns)
        except ConfigError as err:
            message = str(err)
            key = "objective_columns" if message.startswith("objective_columns") else "objective"
            raise ConfigError(message if message.startswith(key) else f"{key}: {message}", key=key) from None
        return self


def searchable_settings() -> tuple[str, ...]:
    """The training settings a space file may search beside the loss hyperparameters."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("searchable"))


# ------------------------------------------------------------------------------------------- number checks
def check_int(name: str, value: Any, low: int | None = None) -> int:
    """An int (never a bool) >= low, or a ConfigError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (low is not None and value < low):
        bound = f" >= {low}" if low is not None else ""
        raise ConfigError.at(name, f"must be an integer{bound}, got {value!r}")
    return int(value)


def check_number(name: str, value: Any, low: float | None = None, strict: bool = False,
                 high: float | None = None) -> float:
    """A finite real number (never a bool) above `low` (strictly if `strict`) and at most `high`."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = [f"{'>' if strict else '>='} {low:g}" if low is not None else "",
                  f"<= {high:g}" if high is not None else ""]
        bound = " and ".join(b for b in bounds if b)
        raise ConfigError.at(name, f"must be a finite number{' ' + bound if bound else ''}, got {value!r}")
    return float(value)
