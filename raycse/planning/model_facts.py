"""What a plan knows of its model without loading it: its shape (the name in raycse.settings.gpu_share.SHAPES of the
same width and depth, which the recorded steps are filed under) and its weights' bytes in float32 (what a checkpoint
holds: the disk a search takes).

Read the cheapest way that is exact, so that a dry run answers in seconds: a local model's config.json (its shape)
and its safetensors files' headers (every weight's shape, nothing loaded); the paper budgets' hub model, whose files a
plan never downloads, counted from its shape by BERT's layout (`bert_weights`). Only a model with neither (weights in
another format, remote code) is counted as before, by building it on torch's meta device, nothing allocated (two
seconds of transformers' model code to import).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

from raycse.errors import ConfigError
from raycse.settings.gpu_share import HUB_SHAPES, SHAPES, shape_of

# Hub ids of a shape `raycse bench` builds (raycse/bench/synthetic.py) with bert-base-uncased's vocabulary: the same
# weights, so that the disk of the paper budgets (`--budget paper`) is planned without the hub.
BERT_UNCASED_VOCAB = 30_522
BERT_POSITIONS, BERT_TOKEN_TYPES = 512, 2  # bert-base-uncased's position and token-type embeddings
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}  # a checkpoint's weights; integer buffers (position ids) are not


def bert_weights(hidden: int, layers: int, intermediate: int, vocab: int, positions: int = BERT_POSITIONS,
                 token_types: int = BERT_TOKEN_TYPES) -> int:
    """The parameters of a BertModel (its pooler included) of these sizes: the embeddings and their LayerNorm, each
    layer's attention (query, key, value, output) and feed-forward with their two LayerNorms, the pooler.

    Example:
        >>> bert_weights(768, 12, 3072, 30_522)  # bert-base-uncased
        109482240
    """
    embeddings = (vocab + positions + token_types) * hidden + 2 * hidden
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate + hidden + 4 * hidden
    return embeddings + layers * layer + hidden * hidden + hidden


def safetensors_weights(folder: Path) -> int | None:
    """The floating-point weights that a folder's safetensors files hold, read from their headers alone; None
    without any."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(length))
        for name, tensor in header.items():
            if name != "__metadata__" and tensor["dtype"] in FLOAT_DTYPES:
                count = 1
                for size in tensor["shape"]:
                    count *= size
                total += count
    return total


def model_facts(model: str, trust_remote_code: bool = False) -> tuple[int | None, str | None]:
    """(the model's weights in float32 bytes; its shape), each None where it cannot be known without the hub (a hub
    name other than the paper budgets', offline) or has no such shape (the module's ways, cheapest first)."""
    from raycse.encoder.model_path import resolve_model_path

    try:
        if model in HUB_SHAPES:  # the paper budgets' model, counted without the hub: its shape is `raycse bench`'s
            dims = SHAPES[HUB_SHAPES[model]]
            return 4 * bert_weights(dims["hidden_size"], dims["num_hidden_layers"], dims["intermediate_size"],
                                    BERT_UNCASED_VOCAB), HUB_SHAPES[model]
        folder = Path(resolve_model_path(model))
        if folder.is_dir() and (folder / "config.json").is_file():
            config = json.loads((folder / "config.json").read_text())
            weights = safetensors_weights(folder)
            if weights is not None:
                return 4 * weights, shape_of(config.get("hidden_size"), config.get("num_hidden_layers"))
        return _built_on_meta(model, trust_remote_code)
    except (OSError, ValueError, KeyError, struct.error, ConfigError):
        return None, None


def _built_on_meta(model: str, trust_remote_code: bool) -> tuple[int | None, str | None]:
    import torch
    from transformers import AutoConfig, AutoModel

    from raycse.encoder.model_path import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(model), trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        backbone = AutoModel.from_config(config, trust_remote_code=trust_remote_code)
    shape = shape_of(getattr(config, "hidden_size", None), getattr(config, "num_hidden_layers", None))
    return 4 * sum(parameter.numel() for parameter in backbone.parameters()), shape
