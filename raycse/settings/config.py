"""Plain dataclasses for one training, validated once, at the edge.

The command line, the Python API and the search-space files all end up here. Each TrainConfig field is declared
with `setting(...)`, whose metadata says everything about it: its help text (`raycse train`'s flags are generated
from it), whether a space may search it, and its rules: its type (the annotation), its range (`low`, `high`,
`strict`), its `choices`, a `check` of its value (a file that must exist) and a `read` rule that opens what it
names far enough to know the run can use it (raycse/settings/inputs.py). So a new setting is one new field, and its
rules sit beside it rather than in the code that first uses the value.

`TrainConfig.validate()` applies every field's rules and the rules between fields (a loss that needs NLI data, a
batch too small for the loss to have a negative, evaluations beyond the run); it reads nothing and is cheap
enough for every corner of a search space. `TrainConfig.open_inputs()` then opens what the settings name, once,
before anything starts. Loss hyperparameters (tau, m, lambda, ...) are validated by the loss registry, which owns
their ranges and generates their flags.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raycse.data import BUNDLED_CORPUS, BUNDLED_NLI
from raycse.encoder.poolers import AUTO_POOLER, POOLERS
from raycse.errors import ConfigError, shown
from raycse.losses import DEFAULT_LOSS
from raycse.settings import inputs
from raycse.settings.checks import (
    INT_LIMIT,
    SEED_LIMIT,
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_str,
)

__all__ = ["TrainConfig", "check_int", "check_number", "searchable_settings", "setting"]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
COMPILE_POLICIES = ("auto", "always", "never")


def setting(default: Any = None, help: str = "", *, searchable: bool = False, choices: tuple | None = None,
            factory: Any = None, flag: bool = True, low: float | None = None, high: float | None = None,
            strict: bool = False, check: Any = None, read: Any = None, local: Any = None) -> Any:
    """A TrainConfig field with what the command line, the space files and validation need to know about it.

    searchable: a space file may search it like a loss hyperparameter (lr, batch_size, pooler, ...).
    flag: `raycse train` gets a --flag for it (hparams and output_dir are handled on their own).
    low, high, strict: the range of a number (an integer's `high` defaults to what every library takes whole).
    check: `check(name, value)` raises ConfigError when the value cannot be right (cheap: at most a stat).
    read: `read(config, name, cache)` opens what the value names far enough to know the run can use it.
    local: `local(value)` says whether the value names a local file or folder (made absolute at the edge:
        `TrainConfig.with_absolute_paths`).
    """
    metadata = {"help": help, "searchable": searchable, "choices": choices, "flag": flag, "low": low, "high": high,
                "strict": strict, "check": check, "read": read, "local": local}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Everything one training needs. Defaults are SimCSE's unsupervised recipe on the packaged MiniLM."""

    model: str = setting("minilm", "'minilm' (the packaged all-MiniLM-L6-v2), a local model directory or a hub id",
                         check=inputs.check_model, read=inputs.open_model, local=inputs.local_model)
    loss: str = setting(DEFAULT_LOSS, "the loss (see `raycse train --help` for the list)")
    reg: str | None = setting(None, "add a regulariser with weight --lambda: dcl | barlow")
    hparams: dict[str, float] = setting(help="loss hyperparameters under the papers' names", factory=dict, flag=False)
    pooler: str = setting("auto", "training pooler; auto: the model's own sentence-transformers pooling if it "
                          "declares one, else SimCSE's CLS + MLP head", searchable=True,
                          choices=(AUTO_POOLER, *POOLERS))
    eval_pooler: str | None = setting(None, "evaluation pooler (default: follows --pooler; SimCSE's "
                                      "cls_before_pooler for unsupervised cls training)",
                                      choices=POOLERS)
    batch_size: int = setting(64, "sentences (or triplets) per step and worker; W workers act as one batch of "
                              "W x batch_size", searchable=True, low=1)
    mini_batch_size: int | None = setting(None, "gradient caching (GradCache): encode each batch in chunks of this "
                                          "many sentences (or triplets) per worker, so that a batch far larger than "
                                          "fits in memory trains with the same gradients as if it fitted. Dropout "
                                          "masks are then keyed by sentence, not drawn from torch's RNG, so a run "
                                          "with it differs from one without it as two seeds do; the uncached "
                                          "reference run is the same command with --mini-batch-size equal to "
                                          "--batch-size (default: off, torch's dropout)", searchable=True, low=1)
    lr: float = setting(3e-5, "peak learning rate of AdamW (linear decay, no warm-up)", searchable=True, low=0.0,
                        strict=True)
    weight_decay: float = setting(0.0, "AdamW weight decay", searchable=True, low=0.0)
    max_grad_norm: float = setting(1.0, "clip the gradient to this global norm, as the papers' Hugging Face "
                                   "Trainer does (0 turns clipping off)", searchable=True, low=0.0)
    epochs: int = setting(1, "passes over the training data", low=1)
    max_steps: int | None = setting(None, "stop after this many steps (when fewer than the epochs give)", low=1)
    eval_steps: int = setting(125, "score the objective every this many steps (and at the last step)", low=1)
    # 3 tokens: [CLS], one of the sentence's and [SEP]; fewer leave every sentence the same input
    max_len: int = setting(32, "truncate training sentences to this many tokens", searchable=True, low=3)
    objective: str = setting("stsb_dev", "what selects the best checkpoint and drives the search: stsb_dev "
                             "(STS-B dev Spearman), sts_dev_avg (mean of STS-B dev and SICK-R dev, as DCLR "
                             "selects), or a TSV/CSV file of sentence pairs with gold scores",
                             check=inputs.check_objective, read=inputs.open_objective, local=inputs.local_file)
    objective_columns: str | None = setting(None, "for an objective file: its two sentence columns and score "
                                            "column, comma-separated (default: sentence1,sentence2,score)",
                                            check=inputs.check_dev_columns)
    corpus: str = setting(BUNDLED_CORPUS, "unsupervised sentences: a text file (one a line), an http(s) URL or "
                          "hf:NAME[:SPLIT[:COLUMN]] (default: the bundled Wikipedia sample; synthetic-wiki1m: a "
                          "million sentences recombined from it, for timing the papers' scale offline)",
                          check=inputs.check_corpus, read=inputs.open_training_data, local=inputs.local_file)
    sup_data: str | None = setting(None, "supervised triplets: an NLI csv with sent0, sent1, hard_neg (SimCSE's "
                                   f"format; a file or an http(s) URL), or '{BUNDLED_NLI}' (a small demonstration "
                                   "set built from SICK)",
                                   check=inputs.check_nli, read=inputs.open_training_data, local=inputs.local_file)
    replace_bad_bytes: bool = setting(False, "decode non-UTF-8 corpus bytes as U+FFFD instead of stopping")
    max_sentences: int | None = setting(None, "use only the first N sentences (or triplets) of the data", low=1)
    seed: int = setting(42, "fixes initialisation, data order, dropout masks and noise negatives", low=0,
                        high=SEED_LIMIT)
    workers: int = setting(1, "data-parallel workers (Ray Train); negatives are gathered across them", low=1)
    gpus_per_worker: float = setting(0.0, "GPUs per worker (fractions share a GPU)", low=0.0)
    complementary: str | None = setting(None, "DCLR's frozen complementary model (the paper: a trained SimCSE "
                                        "model; default: a frozen copy of the start weights)",
                                        check=inputs.check_complementary, read=inputs.open_model,
                                        local=inputs.local_model)
    precision: str = setting("auto", "auto: bf16 autocast on CUDA (fp16 where unsupported), fp32 on CPU",
                             choices=PRECISIONS)
    compile: str = setting("auto", "torch.compile with CUDA graphs (CUDA only): auto compiles when the "
                           "training's steps repay the compile time", choices=COMPILE_POLICIES)
    test_eval: bool = setting(True, "score the best checkpoint on the seven STS test tasks at the end")
    checkpoint_share: float = setting(0.05, "a search trial writes last/ (what it goes on from after a kill: the "
                                      "weights and the optimiser's state) at its first evaluation, its last step, and "
                                      "whenever checkpoints have taken at most this share of the time since the last "
                                      "write; 1: at every evaluation", low=0.0, high=1.0, strict=True, flag=False)
    trust_remote_code: bool = setting(False, "let transformers run code shipped with the model")
    output_dir: str | None = setting(None, "where best/, last/ and results.json go", flag=False,
                                     check=inputs.check_output_dir, local=inputs.always_local)

    @property
    def supervised(self) -> bool:
        return self.sup_data is not None

    def poolers(self) -> tuple[str, str]:
        """(training pooler, evaluation pooler): 'auto' resolved from the model's own files (pooler_choice.py)."""
        from raycse.encoder.pooler_choice import resolve_poolers

        return resolve_poolers(self.model, self.pooler, self.eval_pooler, supervised=self.supervised)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_absolute_paths(self) -> TrainConfig:
        """The same settings with every local file and folder they name given by its absolute path (each field's
        `local` rule says which values are paths): a process that runs in another working directory (a Ray Train
        worker) reads and writes what this one would.

        Returns:
            a new TrainConfig (this one is left as it is).

        Example:
            >>> import os
            >>> TrainConfig(output_dir="runs/a").with_absolute_paths().output_dir == os.path.abspath("runs/a")
            True
        """
        import os

        changes = {}
        for f in dataclasses.fields(self):
            local, value = f.metadata.get("local"), getattr(self, f.name)
            if local is not None and isinstance(value, str) and local(value):
                changes[f.name] = os.path.abspath(os.path.expanduser(value))
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> TrainConfig:
        return cls(**cls.check_values(values, where))

    @classmethod
    def check_values(cls, values: dict[str, Any], where: str = "config") -> dict[str, Any]:
        """Settings given by name (a space file's `train:`): each a known field, of its type and range."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(map(str, values)) - set(known))
        if unknown:
            raise ConfigError(f"{where}: unknown training setting {shown(unknown[0])} (known: "
                              f"{', '.join(sorted(known))})")
        for name, value in values.items():
            try:
                check_setting(known[name], value)
            except ConfigError as err:
                raise ConfigError(f"{where}: {err}") from None
        return values

    def validate(self) -> TrainConfig:
        """Apply every field's rules, then the rules between fields; return self so calls chain. Reads nothing
        (the loss is built to validate its hyperparameters): `open_inputs` reads."""
        from raycse.losses import build_loss

        # the files first: of several mistakes, the one error names the one a user fixes first (a missing corpus
        # before an evaluation interval that the corrected run may make right)
        fields = sorted(dataclasses.fields(self), key=lambda f: f.metadata.get("check") is None)
        for f in fields:
            check_setting(f, getattr(self, f.name))
        if self.mini_batch_size is not None and self.mini_batch_size > self.batch_size:
            raise ConfigError.at("mini_batch_size", f"must be at most batch_size ({self.batch_size}), got "
                                                    f"{self.mini_batch_size}: it is how many of a batch's sentences "
                                                    f"are encoded at once")
        loss = build_loss(self.loss, self.reg, **self.hparams)  # raises ConfigError naming the hyperparameter
        if loss.needs_hard_neg and self.sup_data is None:
            raise ConfigError.at("sup_data", f"loss {self.loss!r} is supervised: give an NLI csv with sent0, sent1, "
                                             f"hard_neg, or '{BUNDLED_NLI}'")
        if self.objective_columns is not None and self.objective in _named_objectives():
            raise ConfigError.at("objective_columns", f"{shown(self.objective_columns)} only applies to a "
                                                      f"development file, not to {self.objective}")
        rows, (needed, why) = self.batch_size * self.workers, loss.rows_needed(self.supervised)
        if rows < needed:
            raise ConfigError.at("batch_size", f"{self.batch_size} x {self.workers} worker(s) gives loss "
                                               f"{loss.name!r} {rows} row(s) a step and it needs at least {needed}: "
                                               f"{why}, so it could not learn")
        if self.max_steps is not None and self.eval_steps > self.max_steps:
            raise ConfigError.at("eval_steps", f"{self.eval_steps} is beyond the run's {self.max_steps} step(s) "
                                               "(max_steps): the objective would be scored once, at the end, so "
                                               "nothing selects a checkpoint")
        return self

    def open_inputs(self, cache: dict | None = None) -> list | None:
        """Open what the settings name (each field's `read` rule: the model, the objective, the training data),
        far enough to know the run can use it; returns the training examples read. `cache` shares the files read
        between the configurations of one search."""
        return inputs.open_all(self, dataclasses.fields(self), cache)


def _named_objectives() -> tuple[str, ...]:
    from raycse.evaluation.sts import OBJECTIVES

    return OBJECTIVES


def field_kind(f: dataclasses.Field) -> tuple[type, bool]:
    """(the type a field holds, whether None is allowed), from its annotation ('int | None', 'dict[str, float]')."""
    parts = [part.strip() for part in str(f.type).split("|")]
    base = parts[0].split("[")[0]
    return {"int": int, "float": float, "bool": bool, "dict": dict}.get(base, str), "None" in parts


def check_setting(f: dataclasses.Field, value: Any) -> None:
    """One field's rules: its type, range and choices from the metadata, then its `check`."""
    kind, optional = field_kind(f)
    name, meta = f.name, f.metadata
    if value is None:
        if optional:
            return
        raise ConfigError.at(name, f"must be given ({kind.__name__}), got nothing (null)")
    if kind is int:
        check_int(name, value, low=meta.get("low"), high=INT_LIMIT if meta.get("high") is None else meta["high"])
    elif kind is float:
        check_number(name, value, low=meta.get("low"), strict=meta.get("strict", False), high=meta.get("high"))
    elif kind is bool:
        check_bool(name, value)
    elif kind is dict:
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise ConfigError.at(name, f"must be a mapping of names to numbers, got {shown(value)}")
    else:
        check_str(name, value)
    if meta.get("choices"):
        check_choice(name, value, meta["choices"])
    if meta.get("check") is not None:
        try:
            meta["check"](name, value)
        except ConfigError as err:
            if err.key is not None:
                raise
            raise ConfigError(str(err) if str(err).startswith(f"{name}:") else f"{name}: {err}", key=name) from None


def searchable_settings() -> tuple[str, ...]:
    """The training settings a space file may search beside the loss hyperparameters."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("searchable"))
