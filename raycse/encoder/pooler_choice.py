"""Which pooler a run uses: the pooling a model declares (`declared_pooler`: a raycse checkpoint's pooler file, else
the sentence-transformers Pooling module's mode) and, for 'auto', the model's own pooling else SimCSE's recipe
(`resolve_poolers`); any other name is checked against SimCSE's five (`checked_pooler`).

Reads only a model's small JSON files (locally or from the hub), never its weights.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from raycse.encoder.loading import resolve_model_path
from raycse.encoder.poolers import AUTO_POOLER, POOLERS
from raycse.errors import ConfigError

# The file that `Encoder.save` adds to a Hugging Face model directory so that `from_pretrained` restores the pooler.
POOLER_FILE = "raycse_pooler.json"

# sentence-transformers' pooling modes (its `pooling_mode` values) that one of raycse's poolers computes exactly.
_POOLER_OF_SENTENCE_TRANSFORMERS_MODE = {"mean": "avg", "cls": "cls_before_pooler"}
# The classic boolean keys of a Pooling config.json, in sentence-transformers' order, and the mode each turns on.
_LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def declared_pooler(name_or_path: str | os.PathLike) -> str | None:
    """The pooler that a model declares, as one of `POOLERS`, or None when it declares none raycse has.

    A raycse checkpoint's `raycse_pooler.json` comes first. Otherwise the sentence-transformers files:
    modules.json's Pooling module, read from its folder's config.json (classic `pooling_mode_*_token(s)` flags or
    the newer `pooling_mode`): mean -> 'avg', cls -> 'cls_before_pooler'. Any other mode (max, mean_sqrt_len,
    weightedmean, lasttoken, several at once), a module other than the Transformer before the Pooling (it would
    change the token states raycse pools), or no such files -> None. Modules after the Pooling are ignored:
    Normalize does not change a cosine, and a Dense head after it (LaBSE's, say) is not reproduced; the
    answer is the pooling of the token states.

    A hub id is asked of the hub (`hf_hub_download`); any failure there (offline, no such file) gives None.
    Answers are cached per path; a local directory's answer is recomputed when its pooler files change (a
    checkpoint re-saved in place). A local path that does not exist raises ConfigError (`resolve_model_path`).
    """
    path = resolve_model_path(name_or_path)
    if Path(path).is_dir():
        return _declared_pooler_of_directory(path, _pooler_files_stamp(Path(path)))
    return _declared_pooler_on_hub(path)


def resolve_poolers(model: str, pooler: str, eval_pooler: str | None, supervised: bool) -> tuple[str, str]:
    """(training pooler, evaluation pooler) for a run on `model`.

    pooler 'auto': the model's own pooling (`declared_pooler`) for both when it declares one, since a model
    trained with one pooling (all-MiniLM-L6-v2: mean) scores clearly lower pooled another way. Otherwise SimCSE's
    recipe: train with 'cls' (CLS + MLP head) and evaluate with 'cls_before_pooler' when unsupervised (SimCSE's
    mlp_only_train) or 'cls' when supervised. An explicit pooler: 'cls' evaluates as 'cls_before_pooler' when
    unsupervised, any other evaluates with itself. An explicit eval_pooler (not None, not 'auto') wins.
    Unknown names raise ConfigError.
    """
    if pooler == AUTO_POOLER:
        declared = declared_pooler(model)
        train = declared or "cls"
        evaluation = declared or ("cls" if supervised else "cls_before_pooler")
    else:
        train = checked_pooler(pooler, also=(AUTO_POOLER,))
        evaluation = "cls_before_pooler" if train == "cls" and not supervised else train
    if eval_pooler is not None and eval_pooler != AUTO_POOLER:
        evaluation = checked_pooler(eval_pooler, what="evaluation pooler", also=(AUTO_POOLER,))
    return train, evaluation


def _pooler_files_stamp(directory: Path) -> tuple:
    """What changes when the files `declared_pooler` reads are rewritten (or the directory replaced)."""
    stamp = []
    for path in (directory, directory / POOLER_FILE, directory / "modules.json"):
        try:
            stat = path.stat()
            stamp.append((stat.st_ino, stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


@functools.lru_cache(maxsize=64)
def _declared_pooler_of_directory(directory: str, stamp: tuple) -> str | None:
    del stamp  # only part of the cache key
    return _declared_pooler_from(lambda name: _json_or_none(Path(directory) / name))


@functools.lru_cache(maxsize=64)
def _declared_pooler_on_hub(repo_id: str) -> str | None:
    from huggingface_hub import hf_hub_download

    def read(filename: str):
        try:
            return _json_or_none(Path(hf_hub_download(repo_id, filename)))
        except Exception:  # noqa: BLE001 - offline, no such repository or file, network: nothing declared
            return None

    return _declared_pooler_from(read)


def _declared_pooler_from(read_json) -> str | None:
    """The declared pooler, `read_json(relative file name)` giving a file's parsed JSON or None."""
    saved = read_json(POOLER_FILE)
    if isinstance(saved, dict):
        return saved.get("pooler") if saved.get("pooler") in POOLERS else None
    modules = read_json("modules.json")
    if not isinstance(modules, list):
        return None
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1] if isinstance(module, dict) else ""
        if kind == "Pooling":
            folder = str(module.get("path") or "").strip("/")
            config = read_json(f"{folder}/config.json") if folder else None
            return _pooler_of_pooling_config(config) if isinstance(config, dict) else None
        if kind != "Transformer":
            return None
    return None


def _pooler_of_pooling_config(config: dict) -> str | None:
    mode = config.get("pooling_mode")
    if mode is None:  # the classic flags; with none set, sentence-transformers pools by the mean
        modes = [name for key, name in _LEGACY_POOLING_FLAGS.items() if config.get(key)] or ["mean"]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode) if isinstance(mode, (list, tuple)) else []
    return _POOLER_OF_SENTENCE_TRANSFORMERS_MODE.get(modes[0]) if len(modes) == 1 else None


def _json_or_none(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def checked_pooler(pooler: str, what: str = "pooler", also: tuple[str, ...] = ()) -> str:
    """`pooler` if it is one of POOLERS; else ConfigError listing `also` (names the caller accepted) first."""
    if pooler not in POOLERS:
        raise ConfigError(f"unknown {what} {pooler!r} (choose from {', '.join((*also, *POOLERS))})")
    return pooler
