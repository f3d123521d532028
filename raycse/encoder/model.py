"""The sentence encoder: a Hugging Face `AutoModel` plus the poolers that SimCSE defines.

SimCSE (Gao, Yao & Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings", `models.py`,
class `Pooler`) turns a transformer's token states into one sentence vector in one of five ways:

  cls                CLS vector of the last layer through an MLP head Linear(H, H) + tanh (SimCSE's `MLPLayer`,
                     newly initialised and trained with the contrastive loss)
  cls_before_pooler  CLS vector of the last layer, no head
  avg                attention-masked mean of the last layer's token states
  avg_first_last     masked mean of (first transformer layer's output + last layer's output) / 2
  avg_top2           masked mean of (second-to-last layer's output + last layer's output) / 2

Callers may also ask for 'auto': the pooling the model itself declares, else SimCSE's recipe (pooler_choice.py:
`resolve_poolers`, `declared_pooler`). `Encoder.save` writes a directory that `AutoModel.from_pretrained` and
`SentenceTransformer` both load, the latter giving the same embeddings as `Encoder.encode` with the saved pooler.

`Encoder.forward(..., dropout_rows=R)` runs one forward in which only the first R rows get dropout
(row_dropout.py), so that ImSimCSE's two dropout views and its dropout-off view are one pass. Where a model's
files are, whether they load (each failure one `ConfigError` line naming the file) and loading them is
loading.py.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from raycse.encoder.eval_batches import evaluation_batches
from raycse.encoder.keyed_dropout import row_keys
from raycse.encoder.loading import check_model_files, load_backbone, resolve_model_path, where_from
from raycse.encoder.pooler_choice import (
    POOLER_FILE,
    checked_pooler,
    declared_pooler,
    resolve_poolers,  # noqa: F401 - raycse.api imports it from here
)
from raycse.encoder.poolers import AUTO_POOLER
from raycse.encoder.row_dropout import install_row_dropout
from raycse.encoder.sentence_transformers_files import write_sentence_transformers_files
from raycse.errors import ConfigError, first_line
from raycse.files import replace_directory

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Padded tokens per evaluation batch (`Encoder.encode`'s tokens_per_batch): batches are cut by tokens, so a batch of
# short sentences holds many and one of long sentences few, and memory is bounded whatever the lengths. On one CPU
# thread 1,024 encoded STS-B dev as fast as 32 sentences a batch did (11.4 s, the same figure); on CUDA larger
# batches mean fewer launches, and 16,384 tokens of BERT-base take well under a GB of activations.
EVAL_BATCH_TOKENS = {"cpu": 1024, "cuda": 16384}

# Which entries of `hidden_states` (index 0 = embedding layer, -1 = last layer) the two layer-averaging
# poolers average. Index 1 is the first transformer layer's output: SimCSE first used index 0 (the embeddings)
# and corrected it to 1 in its released code; the papers' "first-last avg." figures use 1.
AVERAGED_LAYERS = {"avg_first_last": (1, -1), "avg_top2": (-2, -1)}

# The file that `Encoder.save` adds beside POOLER_FILE: the 'cls' pooler's MLP head.
MLP_HEAD_FILE = "raycse_mlp_head.safetensors"


def pick_device() -> torch.device:
    """This worker's GPU (LOCAL_RANK picks it among several), else the CPU."""
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def eval_batch_tokens(device: torch.device) -> int:
    """Padded tokens per evaluation batch on ``device`` (`EVAL_BATCH_TOKENS`; the CPU's figure elsewhere)."""
    return EVAL_BATCH_TOKENS.get(device.type, EVAL_BATCH_TOKENS["cpu"])


def encode_fn(encoder: Encoder, pooler: str) -> Callable[[list[str]], Tensor]:
    """The `Encode` function that evaluation takes: `encoder` with `pooler`, batches cut by tokens for its device."""
    def encode(sentences: list[str]) -> Tensor:
        return encoder.encode(sentences, pooler=pooler, tokens_per_batch=eval_batch_tokens(encoder.device))

    return encode


class Encoder(nn.Module):
    """A transformer backbone, its tokenizer and SimCSE's poolers; `encode` gives float32 sentence vectors."""

    def __init__(self, backbone: PreTrainedModel, tokenizer, pooler: str = "cls"):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooler = checked_pooler(pooler)
        hidden_size = backbone.config.hidden_size
        # SimCSE's MLPLayer. SimCSE creates it inside the pretrained model, so the model's own weight
        # initialisation (normal with std = initializer_range, zero bias) applies to it; we do the same.
        self.mlp = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        nn.init.normal_(self.mlp[0].weight, std=getattr(backbone.config, "initializer_range", 0.02))
        nn.init.zeros_(self.mlp[0].bias)
        # True when the head was read from a saved checkpoint rather than freshly initialised.
        self.mlp_from_checkpoint = False
        # Why `forward(dropout_rows=...)` cannot work on this backbone, or None when it can (`install_row_dropout`).
        self._row_dropout, self._row_dropout_problem = install_row_dropout(backbone)

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

    @property
    def supports_dropout_rows(self) -> bool:
        """Whether `forward(dropout_rows=...)` works on this backbone; when not, run the passes separately."""
        return self._row_dropout_problem is None

    @property
    def row_dropout_problem(self) -> str | None:
        """Why this backbone's dropout cannot be restricted to rows or keyed (`install_row_dropout`), or None."""
        return self._row_dropout_problem

    # ------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        pooler: str | None = None,
        trust_remote_code: bool = False,
        attn_implementation: str | None = "sdpa",
    ) -> Encoder:
        """Load a backbone and tokenizer ('minilm', a local directory or a hub id).

        `pooler=None` or 'auto' means the pooler the directory declares (`declared_pooler`: the one recorded by
        `Encoder.save`, else the sentence-transformers pooling), else 'cls'. A saved MLP head is loaded when
        present; otherwise the head is newly initialised, as in SimCSE. Any loading failure is a one-line
        ConfigError naming the path and, for a local directory, the file at fault (see `check_loadable`).
        """
        path = resolve_model_path(name_or_path)
        local = Path(path).is_dir()
        if local:
            # Cheap checks first (headers, JSON, file presence): the library's own errors name no file.
            check_model_files(Path(path), trust_remote_code)
        if pooler is None or pooler == AUTO_POOLER:
            pooler = declared_pooler(path) or "cls"
        pooler = checked_pooler(pooler, also=(AUTO_POOLER,))
        tokenizer, backbone = load_backbone(path, trust_remote_code, attn_implementation)
        # Keep float32 master weights whatever dtype the checkpoint was stored in; bf16 only through autocast.
        encoder = cls(backbone.float(), tokenizer, pooler)
        mlp_head_file = Path(path) / MLP_HEAD_FILE
        if mlp_head_file.is_file():
            try:
                encoder.mlp.load_state_dict(load_file(mlp_head_file))
            except Exception as err:
                raise ConfigError(f"cannot load model {where_from(path)}: {MLP_HEAD_FILE}: {first_line(err)}") from err
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
        dropout_rows: int | None = None,
        dropout_key: Tensor | None = None,
        row_ids: Tensor | None = None,
    ) -> Tensor:
        """Sentence vectors (B, H) from one of SimCSE's poolers (default: `self.pooler`).

        dropout_rows=None: dropout follows `self.training`, as in any nn.Module. dropout_rows=R (train mode):
        rows [0, R) get dropout exactly as a train-mode forward of those rows alone would (in eager mode even
        the same masks for the same RNG state), and rows [R, B) get none: they equal an eval-mode forward of
        those rows, with gradients through both parts. In eval mode no row gets dropout whatever R is.

        Why: ImSimCSE's off-dropout needs the N sentences twice with dropout and once without. As one forward
        of 3N rows with R = 2N, that is one compiled graph instead of two passes (2N rows in train mode, N in
        eval mode), each its own graph and its own walk through the weights (benchmarks/step-speed.md times both).

        R is a Python int (under torch.compile a guarded constant, or a SymInt once it varies), never read
        from a tensor. Raises ValueError when the backbone cannot restrict its dropout to rows
        (`supports_dropout_rows`) or R is outside [0, B].

        dropout_key (a 0-d int64 tensor) and row_ids ((B,) int64, each row's global id): keyed dropout
        (keyed_dropout.py) instead of torch's, so that a row's masks depend on the key and its id only, not on
        the rows beside it or the RNG; gradient caching needs that (grad_cache.py). Combines with dropout_rows.
        """
        pooler = checked_pooler(pooler or self.pooler)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:  # models such as RoBERTa take none
            inputs["token_type_ids"] = token_type_ids
        # Only the layer-averaging poolers need every layer's states; the others save the memory.
        options = {"output_hidden_states": pooler in AVERAGED_LAYERS, "return_dict": True}
        if dropout_rows is None and dropout_key is None:
            output = self.backbone(**inputs, **options)
        else:
            if self._row_dropout_problem is not None:
                raise ValueError(f"{'dropout_rows' if dropout_key is None else 'dropout_key'}: "
                                 f"{self._row_dropout_problem}")
            if dropout_rows is not None and not 0 <= dropout_rows <= input_ids.shape[0]:
                raise ValueError(f"dropout_rows={dropout_rows} is outside [0, {input_ids.shape[0]}], the batch's rows")
            if dropout_key is not None and (row_ids is None or row_ids.shape != input_ids.shape[:1]):
                raise ValueError("dropout_key needs row_ids, one global id per row of the batch")
            state = self._row_dropout
            state.rows = dropout_rows
            state.keys = None if dropout_key is None else row_keys(dropout_key, row_ids)
            state.site = 0
            try:
                output = self.backbone(**inputs, **options)
            finally:
                state.rows, state.keys, state.site = None, None, 0
        return self._pool(output, pooler, attention_mask)

    def _pool(self, output, pooler: str, attention_mask: Tensor) -> Tensor:
        """The sentence vectors `pooler` makes of the backbone's output (the five: the module docstring)."""
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
        tokens_per_batch: int | None = None,
    ) -> Tensor:
        """Float32 CPU tensor (len(sentences), H) of sentence vectors, in input order.

        Sentences are batched longest first so each batch pads to similar lengths (and an out-of-memory batch
        shows up at once): ``batch_size`` sentences a batch, or, given ``tokens_per_batch``, as many as fit that
        many padded tokens (what evaluation uses: `eval_batch_tokens`). The model runs in eval mode (no dropout)
        and is put back in its previous mode after.
        The batches are kept per process (eval_batches.py): a training evaluates the same STS-B dev sentences
        again and again, and on a GPU tokenising them costs more than encoding them. On CUDA the
        vectors stay on the device until the last batch, then come back in one copy.

        The model runs in float32 with autocast off, also inside a caller's autocast region: SentEval, whose
        protocol the papers' STS figures follow, encodes in float32, and bf16 token states (8 bits of mantissa)
        would make the scores differ from that protocol by an amount nothing bounds. An evaluation encodes a
        few thousand sentences without gradients, a small share of a trial, so the exact path costs little.
        """
        pooler = checked_pooler(pooler or self.pooler)
        device = self.device
        order, batches = evaluation_batches(self.tokenizer, sentences, max_len or self.max_seq_length, batch_size,
                                            tokens_per_batch, pin=device.type == "cuda")
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad(), torch.autocast(device.type, enabled=False):
                vectors = [self(**{name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()},
                                pooler=pooler).float() for batch in batches]
        finally:
            self.train(was_training)
        embeddings = torch.empty(len(sentences), self.hidden_size, dtype=torch.float32)
        if vectors:
            embeddings[order] = torch.cat(vectors).cpu()
        return embeddings

    # ------------------------------------------------------------------------------------------ saving
    def save(self, path: str | Path, pooler: str) -> None:
        """Write a model directory atomically: Hugging Face files, sentence-transformers files, the pooler.

        The directory is built next to the target and renamed into place, so a reader (or a crash) never sees
        half a checkpoint. See `write_sentence_transformers_files` for what SentenceTransformer gets.
        """
        pooler = checked_pooler(pooler)
        target = Path(path)
        if target.exists() and not target.is_dir():
            raise ConfigError(f"cannot save the model to '{target}': it exists and is not a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
        try:
            self.backbone.save_pretrained(staging)  # safetensors weights + config.json
            self.tokenizer.save_pretrained(staging)
            _write_json(staging / POOLER_FILE, {"pooler": pooler})
            if pooler == "cls":
                save_file({name: t.detach().contiguous().cpu() for name, t in self.mlp.state_dict().items()},
                          staging / MLP_HEAD_FILE)
            write_sentence_transformers_files(
                staging, pooler, hidden_size=self.hidden_size, max_seq_length=self.max_seq_length,
                num_layers=self.backbone.config.num_hidden_layers, averaged_layers=AVERAGED_LAYERS.get(pooler),
                mlp_head=self.mlp[0])
            replace_directory(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def masked_mean(token_states: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean over the real tokens of each sentence: padding positions count for nothing."""
    mask = attention_mask.unsqueeze(-1).to(token_states.dtype)
    return (token_states * mask).sum(dim=1) / mask.sum(dim=1)


def tokenize(tokenizer, sentences: list[str], max_len: int, pad_to_multiple_of: int | None = None) -> dict[str, Tensor]:
    """Token ids padded to the longest sentence of the batch (dynamic padding; then up to a multiple of
    `pad_to_multiple_of` if given), truncated to max_len.

    A plain function of the tokenizer, so the training loader can tokenise without holding the Encoder.
    """
    return dict(tokenizer(sentences, padding=True, truncation=True, max_length=max_len,
                          pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt"))


def _write_json(path: Path, payload) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n")
