"""The files that make `SentenceTransformer(directory)` load a raycse checkpoint with the pooling it was trained for.

Written by hand in the classic format (module types `sentence_transformers.models.*`, `pooling_mode_*` keys),
which every sentence-transformers release from 2.x to 6.x loads. No Normalize module: cosine similarity ignores
the scale, and raw vectors are what `Encoder.encode` returns.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn


def write_sentence_transformers_files(directory: Path, pooler: str, hidden_size: int, max_seq_length: int,
                                      num_layers: int, averaged_layers: tuple[int, int] | None,
                                      mlp_head: nn.Linear | None) -> None:
    """modules.json and the module folders that make SentenceTransformer(directory) reproduce `pooler`.

    cls / cls_before_pooler -> Pooling(cls) [+ Dense(H, H, tanh) holding the MLP head `mlp_head` for 'cls'];
    avg -> Pooling(mean); avg_first_last / avg_top2 (`averaged_layers`: the two `hidden_states` indices averaged)
    -> WeightedLayerPooling with weight 1 on the two averaged layers and 0 elsewhere, then Pooling(mean): exactly
    SimCSE's mean of the two layers.
    """
    transformer_config: dict = {"max_seq_length": max_seq_length, "do_lower_case": False}
    modules = [("", "sentence_transformers.models.Transformer")]

    if averaged_layers is not None:
        # The Transformer module hands all layers on only when the model config asks for hidden states;
        # set it for sentence-transformers alone so plain AutoModel loading stays unchanged.
        transformer_config["config_args"] = {"output_hidden_states": True}
        layer_indices = [index % (num_layers + 1) for index in averaged_layers]  # into hidden_states
        layer_start = min(layer_indices)
        layer_weights = torch.zeros(num_layers + 1 - layer_start)
        for index in layer_indices:
            layer_weights[index - layer_start] += 1.0
        folder = _module_folder(directory, len(modules), "WeightedLayerPooling")
        _write_json(folder / "config.json", {
            "word_embedding_dimension": hidden_size, "layer_start": layer_start, "num_hidden_layers": num_layers,
        })
        save_file({"layer_weights": layer_weights}, folder / "model.safetensors")
        modules.append((folder.name, "sentence_transformers.models.WeightedLayerPooling"))

    folder = _module_folder(directory, len(modules), "Pooling")
    _write_json(folder / "config.json", {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": pooler in ("cls", "cls_before_pooler"),
        "pooling_mode_mean_tokens": pooler not in ("cls", "cls_before_pooler"),
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    })
    modules.append((folder.name, "sentence_transformers.models.Pooling"))

    if pooler == "cls":
        folder = _module_folder(directory, len(modules), "Dense")
        _write_json(folder / "config.json", {
            "in_features": hidden_size, "out_features": hidden_size, "bias": True,
            "activation_function": "torch.nn.modules.activation.Tanh",
        })
        save_file({"linear.weight": mlp_head.weight.detach().contiguous().cpu(),
                   "linear.bias": mlp_head.bias.detach().contiguous().cpu()}, folder / "model.safetensors")
        modules.append((folder.name, "sentence_transformers.models.Dense"))

    _write_json(directory / "sentence_bert_config.json", transformer_config)
    _write_json(directory / "config_sentence_transformers.json", {"similarity_fn_name": "cosine"})
    _write_json(directory / "modules.json", [
        {"idx": idx, "name": str(idx), "path": module_path, "type": module_type}
        for idx, (module_path, module_type) in enumerate(modules)
    ])


def _module_folder(directory: Path, index: int, kind: str) -> Path:
    folder = directory / f"{index}_{kind}"
    folder.mkdir()
    return folder


def _write_json(path: Path, payload) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n")
