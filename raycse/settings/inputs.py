"""What a training's settings point at: checked cheaply on every validation, opened once before anything starts.

Two kinds of rule, each attached to the TrainConfig field it belongs to (config.py's `setting(check=..., read=...)`):

  check_*  the value's shape, with at most a `stat`: a model or a file that should exist does, a corpus source is
           one raycse can read. Cheap enough to run on every corner of a search space.
  open_*   the file read far enough to know the run can use it: a model directory's files load (config, weights'
           headers, tokenizer), the objective file parses into usable pairs, the training data decodes and holds
           at least one step's batch, and the run is long enough for an evaluation. Run once, at the edge
           (`TrainConfig.open_inputs`), before Ray starts or an MLflow run, a store or a directory is created.

An `open_*` rule receives the whole configuration (what "one batch" is depends on batch_size and workers) and a
cache shared by the configurations of one search, so that each file is read once however many trials name it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from raycse.data import BUNDLED_CORPUS, BUNDLED_NLI, SYNTHETIC_WIKI1M
from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_path_text

DEV_FILE_SUFFIXES = (".tsv", ".txt", ".csv")


# ------------------------------------------------------------------------------------------------ checks
def check_model(name: str, value: str) -> None:
    """'minilm', an existing local directory, or a hub id ('name' or 'owner/name')."""
    from raycse.encoder.model_path import resolve_model_path  # no torch: validation stays quick

    check_path_text(name, value)
    resolve_model_path(value)


def check_corpus(name: str, value: str) -> None:
    """The bundled sample (or its million-sentence stand-in), an http(s) URL, hf:NAME[:SPLIT[:COLUMN]], or a file
    that exists."""
    if value in (BUNDLED_CORPUS, SYNTHETIC_WIKI1M) or value.startswith(("http://", "https://")):
        return
    if value.startswith("hf:"):
        if not value[3:].split(":")[0].strip():
            raise ConfigError(f"{shown(value)} names no dataset (hf:NAME[:SPLIT[:COLUMN]])")
        return
    _check_file(name, value)


def check_nli(name: str, value: str) -> None:
    """'sick-train', an http(s) URL (SimCSE's nli_for_simcse.csv where it is published), or an NLI csv file that
    exists."""
    if value != BUNDLED_NLI and not value.startswith(("http://", "https://")):
        _check_file(name, value)


def check_objective(name: str, value: str) -> None:
    """A named objective, or a development file (.tsv, .txt or .csv) that exists."""
    from raycse.evaluation.sts import OBJECTIVES

    if value in OBJECTIVES:
        return
    check_path_text(name, value)
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(f"{shown(value)} is neither {', '.join(OBJECTIVES)} nor an existing file")
    if path.suffix.lower() not in DEV_FILE_SUFFIXES:
        raise ConfigError(f"{shown(value)}: unknown extension {shown(path.suffix)} (a development file is "
                          f"{', '.join(DEV_FILE_SUFFIXES)})")


def check_dev_columns(name: str, value: str) -> None:
    from raycse.evaluation.sts import dev_columns

    dev_columns(value)


def check_complementary(name: str, value: str) -> None:
    check_model(name, value)


def check_output_dir(name: str, value: str) -> None:
    check_path_text(name, value)


def _check_file(name: str, value: str) -> None:
    check_path_text(name, value)
    path = Path(value).expanduser()
    if path.is_dir():
        raise ConfigError(f"{shown(value)} is a directory, not a file")
    if not path.is_file():
        raise ConfigError(f"file {shown(value)} does not exist")


# ------------------------------------------------------------------------------------------------ local paths
# A setting's `local` rule: whether its value names a local file or folder (not a name, a URL or a hub id). Such a
# value is made absolute at the edge (TrainConfig.with_absolute_paths): Ray Train's workers run in a working
# directory of their own, where a relative path names nothing.
def local_model(value: str) -> bool:
    """A model setting that names a local directory (not the packaged alias, not a hub id)."""
    from raycse.encoder.loading import PACKAGED_MODEL_ALIAS

    return value != PACKAGED_MODEL_ALIAS and Path(value).expanduser().is_dir()


def local_file(value: str) -> bool:
    """A data or objective setting that names a local file (not a bundled set, a named objective, a URL or hf:)."""
    from raycse.evaluation.sts import OBJECTIVES

    named = (BUNDLED_CORPUS, SYNTHETIC_WIKI1M, BUNDLED_NLI, *OBJECTIVES)
    return (value not in named and not value.startswith(("http://", "https://", "hf:"))
            and Path(value).expanduser().is_file())


def always_local(value: str) -> bool:
    """A folder the run writes (its output directory): a local path whether it exists yet or not."""
    return True


# ------------------------------------------------------------------------------------------------ opening
def open_model(config, name: str, cache: dict) -> None:
    """The model's files load: config.json, the weights' headers, the tokenizer and its vocabulary."""
    from raycse.encoder.loading import check_loadable

    key = ("model", getattr(config, name), config.trust_remote_code)
    if key not in cache:
        check_loadable(getattr(config, name), config.trust_remote_code)
        cache[key] = True


def open_objective(config, name: str, cache: dict) -> None:
    """The objective's pairs are read and usable (a development file: columns, scores, at least 2 pairs)."""
    from raycse.evaluation.sts import build_objective

    key = ("objective", config.objective, config.objective_columns)
    if key not in cache:
        build_objective(config.objective, config.objective_columns)
        cache[key] = True


def open_training_data(config, name: str, cache: dict) -> list | None:
    """The training data the configuration uses (the corpus, or the NLI triplets when it is supervised), decoded,
    with at least one step's batch of usable rows; and a run long enough to be evaluated before its end.

    Returns the examples read, so that `raycse train` trains on what was checked rather than reading it again.
    """
    from raycse.data.corpus import load_examples

    if (name == "sup_data") != config.supervised:
        return None  # the other field names the data this run uses
    key = ("data", config.sup_data if config.supervised else config.corpus, config.max_sentences,
           config.replace_bad_bytes)
    if key not in cache:
        cache[key] = load_examples(config)
    examples: list = cache[key]
    rows = config.batch_size * config.workers
    what = "triplets" if config.supervised else "sentences"
    if len(examples) < rows:
        cut = f" (the first max_sentences={config.max_sentences})" if config.max_sentences == len(examples) else ""
        raise ConfigError(f"{shown(getattr(config, name))} has {len(examples)} examples (usable {what}){cut}, fewer "
                          f"than one batch (batch_size {config.batch_size} x {config.workers} worker(s) = {rows})")
    steps = len(examples) // rows * config.epochs
    if config.max_steps is not None:
        steps = min(steps, config.max_steps)
    if config.eval_steps > steps:
        raise ConfigError.at("eval_steps", f"{config.eval_steps} is beyond the run's {steps} step(s) ({len(examples)} "
                                           f"{what}, batch {rows}, {config.epochs} epoch(s)): the objective would "
                                           "be scored once, at the end, so nothing selects a checkpoint")
    return examples


def open_all(config, fields, cache: dict | None = None) -> Any:
    """Run the `read` rule of every field that has one and a value; returns the training examples read.

    A rule's ConfigError names its field (`corpus: ...`) unless it already names one (`eval_steps: ...`)."""
    cache = {} if cache is None else cache
    examples = None
    for field in fields:
        opener, value = field.metadata.get("read"), getattr(config, field.name)
        if opener is None or value is None:
            continue
        try:
            found = opener(config, field.name, cache)
        except ConfigError as err:
            if err.key is not None:
                raise
            raise ConfigError.at(field.name, str(err)) from None
        if found is not None:
            examples = found
    return examples
