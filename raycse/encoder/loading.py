"""Loading a model's files: where they are (`resolve_model_path`), whether they load (`check_loadable`), and the
tokenizer and backbone themselves (`load_backbone`, with a per-process cache).

`check_loadable` is the pre-flight of a model before a run starts: every way a model directory can fail to
load (no config.json, a corrupt one, truncated weights, a missing shard, a tokenizer without a vocabulary)
becomes one `ConfigError` line naming the directory and the file at fault, where the libraries' own errors
name no file. `Encoder.from_pretrained` runs the same checks on a local directory before loading it.
"""
from __future__ import annotations

import copy
import json
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import transformers
from safetensors import safe_open
from transformers import AutoModel, AutoTokenizer

from raycse.encoder.model_path import (  # noqa: F401 - where the callers of this module find them
    PACKAGED_MODEL_ALIAS,
    PACKAGED_MODEL_NAME,
    model_name,
    resolve_model_path,
)
from raycse.errors import ConfigError, first_line

if TYPE_CHECKING:  # transformers' model code (about 2 CPU-s to import): loaded by the first model, not the driver
    from transformers import PreTrainedModel

# The weights files transformers looks for, in its order of preference (safetensors before pickle).
WEIGHTS_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
# Tokenizer files that are JSON: a corrupt one is named before the tokenizer library fails on it anonymously.
_TOKENIZER_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                         "vocab.json")
_TOKENIZER_FILES = (*_TOKENIZER_JSON_FILES, "vocab.txt", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                    "tokenizer.model")


def check_loadable(name_or_path: str | os.PathLike, trust_remote_code: bool = False) -> None:
    """Fail fast, before a run starts, with a one-line ConfigError naming the path and the file at fault.

    A local directory: config.json present, valid JSON, of a model_type transformers knows; a weights file (or
    every shard of a sharded index) whose header reads: safetensors' `safe_open` parses the header and refuses
    a file its tensors' byte ranges do not exactly cover (truncated, garbage, extra bytes), and a .bin is
    opened with `torch.load(mmap=True, weights_only=True)`, which maps it without reading the tensors; the
    tokenizer loads and has a vocabulary file. The weights are never read in full (a checksum-free format cannot
    tell bytes flipped inside a tensor from real weights; such a file loads). A hub id: its config and
    tokenizer are fetched (from the local cache when offline); failing that, the error says so.
    """
    path = resolve_model_path(name_or_path)
    if Path(path).is_dir():
        check_model_files(Path(path), trust_remote_code)
    else:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        except Exception as err:  # noqa: BLE001 - whatever the hub client raises is one line for the user
            raise ConfigError(f"cannot load model {where_from(path)}: {first_line(err)}") from None
        if not is_text_encoder(config):
            raise ConfigError(f"cannot load model {where_from(path)}: {not_a_text_encoder(config)}")
    load_tokenizer(path, trust_remote_code)


def is_text_encoder(config) -> bool:
    """Whether a model's config is one raycse can pool sentences from: it reads tokens (it has a vocabulary) and
    its forward pass needs nothing but them (not an encoder-decoder, which also wants the decoder's input)."""
    return getattr(config, "vocab_size", None) is not None and not getattr(config, "is_encoder_decoder", False)


def not_a_text_encoder(config) -> str:
    kind = getattr(config, "model_type", None) or type(config).__name__
    why = "an encoder-decoder" if getattr(config, "is_encoder_decoder", False) else "it has no vocabulary"
    return f"model_type {kind!r} is not a text encoder ({why}): raycse embeds sentences with a text encoder"


def check_model_files(directory: Path, trust_remote_code: bool = False) -> None:
    """The cheap checks of a local model directory (`check_loadable` less loading the tokenizer)."""
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"cannot load model from '{directory}': no config.json: not a Hugging Face model directory")
    config = _read_json(directory, "config.json")
    if not isinstance(config, dict):
        _fail(directory, "config.json", "not a JSON object")
    model_type = config.get("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type and model_type not in CONFIG_MAPPING and not (trust_remote_code and "auto_map" in config):
        _fail(directory, "config.json",
              f"model_type {model_type!r} is not one transformers {transformers.__version__} knows")
    from transformers import AutoConfig

    try:
        loaded = AutoConfig.from_pretrained(str(directory), trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001 - e.g. no model_type, and a directory name that tells none
        _fail(directory, "config.json", first_line(err))
    if not is_text_encoder(loaded):
        _fail(directory, "config.json", not_a_text_encoder(loaded))
    _check_weights(directory)
    for name in _TOKENIZER_JSON_FILES:
        if (directory / name).is_file():
            _read_json(directory, name)


def _check_weights(directory: Path) -> None:
    present = next((name for name in WEIGHTS_FILES if (directory / name).is_file()), None)
    if present is None:
        raise ConfigError(f"cannot load model from '{directory}': no weights file "
                          f"({', '.join(WEIGHTS_FILES[:-1])} or {WEIGHTS_FILES[-1]})")
    if not present.endswith(".index.json"):
        _check_weights_file(directory, present)
        return
    index = _read_json(directory, present)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        _fail(directory, present, "no weight_map listing the shards")
    for shard in sorted(set(weight_map.values())):
        if not (directory / shard).is_file():
            _fail(directory, shard, f"missing (a shard listed in {present})")
        _check_weights_file(directory, shard)


def _check_weights_file(directory: Path, name: str) -> None:
    file = directory / name
    try:
        if name.endswith(".safetensors"):
            with safe_open(str(file), framework="pt") as weights:
                weights.keys()
        elif zipfile.is_zipfile(file):
            torch.load(file, map_location="cpu", mmap=True, weights_only=True)
        else:  # the pre-1.6 pickle format cannot be memory-mapped; such files are old and small
            torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - SafetensorError, UnpicklingError, RuntimeError, OSError...
        # torch's messages run on with advice for pickles; their first sentence says what is wrong
        reason = first_line(err).split(". ", 1)[0]
        _fail(directory, name, f"corrupt or truncated weights ({type(err).__name__}: {reason})")


def load_tokenizer(path: str, trust_remote_code: bool):
    """AutoTokenizer, its failures as one ConfigError line; for a local directory, also the vocabulary check.

    The check matters: transformers 5 builds an empty-vocabulary tokenizer (5 special tokens, every word
    [UNK]) from a directory that has a tokenizer class but no vocabulary file, and raises nothing.
    """
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (MemoryError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as err:
        if not Path(path).is_dir():
            raise ConfigError(f"cannot load model {where_from(path)}: tokenizer: {first_line(err)}") from err
        present = [name for name in _TOKENIZER_FILES if (Path(path) / name).is_file()]
        files = ", ".join(present) if present else "no tokenizer files"
        _fail(Path(path), f"tokenizer ({files})", first_line(err))
    if Path(path).is_dir():
        _check_tokenizer_vocabulary(tokenizer, Path(path))
    return tokenizer


def _check_tokenizer_vocabulary(tokenizer, directory: Path) -> None:
    """The tokenizer class's vocabulary files: tokenizer.json, or all of its slow files (vocab.txt, ...)."""
    names = dict(getattr(type(tokenizer), "vocab_files_names", None) or {})
    if not names:
        return
    tokenizer_file = names.pop("tokenizer_file", None)
    if tokenizer_file and (directory / tokenizer_file).is_file():
        return
    if names and all((directory / name).is_file() for name in names.values()):
        return
    needed = " or ".join(filter(None, [tokenizer_file, " + ".join(names.values())]))
    raise ConfigError(f"cannot load model from '{directory}': no tokenizer vocabulary ({needed}); "
                      f"{type(tokenizer).__name__} would have none")


def _read_json(directory: Path, name: str):
    try:
        return json.loads((directory / name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        _fail(directory, name, f"not valid JSON ({first_line(err)})")


def _fail(directory: Path, file: str, problem: str):
    raise ConfigError(f"cannot load model from '{directory}': {file}: {problem}")


def where_from(path: str) -> str:
    """Where a model was loaded from, for an error message: a directory, or a hub id (offline, perhaps)."""
    return f"from '{path}'" if Path(path).is_dir() else f"'{path}' from the Hugging Face hub (offline?)"


# Per process: what loading a local model directory gave, so that the trials a reused Tune worker runs one after
# another read each once (the size bounds the memory).
_LOADED_CACHE: dict[tuple, tuple] = {}
LOADED_CACHE_SIZE = 2  # the model trained, and DCLR's complementary one


def load_backbone(path: str, trust_remote_code: bool, attn_implementation: str | None):
    """(tokenizer, a fresh backbone) of a model: a copy of this process's earlier load of the same files when there
    is one (a local directory, unchanged since: its files' sizes and times are part of the key), else loaded."""
    key = None
    if Path(path).is_dir():
        stamps = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(Path(path).iterdir())
                       if f.is_file())
        key = (str(Path(path).resolve()), stamps, trust_remote_code, attn_implementation)
        if key in _LOADED_CACHE:
            tokenizer, backbone = _LOADED_CACHE[key]
            return tokenizer, copy.deepcopy(backbone)
    tokenizer = load_tokenizer(path, trust_remote_code)
    try:
        backbone = _load_backbone(path, trust_remote_code, attn_implementation)
    except (MemoryError, torch.cuda.OutOfMemoryError):
        raise  # not a fault of the model's files
    except Exception as err:
        raise ConfigError(f"cannot load model {where_from(path)}: {first_line(err)}") from err
    if key is not None:
        if len(_LOADED_CACHE) >= LOADED_CACHE_SIZE:
            del _LOADED_CACHE[next(iter(_LOADED_CACHE))]
        _LOADED_CACHE[key] = (tokenizer, copy.deepcopy(backbone))
    return tokenizer, backbone


def _load_backbone(path: str, trust_remote_code: bool, attn_implementation: str | None) -> PreTrainedModel:
    try:
        return AutoModel.from_pretrained(
            path, trust_remote_code=trust_remote_code, attn_implementation=attn_implementation
        )
    except ValueError:
        if attn_implementation in (None, "eager"):
            raise
        # Architectures without an SDPA kernel refuse it with a ValueError; plain attention gives the same
        # numbers, only slower. Any other ValueError comes back from this second attempt.
        return AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, attn_implementation="eager")
