"""The untouched model's figures (its objective with each evaluation pooler, its seven STS test tasks), kept on disk
per fingerprint of everything they depend on, so that a second search from the same model and data does not score
them again.

The fingerprint covers the model's files (their names and bytes), the objective (a named one, or the bytes of a
development file and its columns), the poolers, whether remote code is trusted, the STS files read (the bundled ones
or $RAYCSE_STS_DATA's), the device kind, the torch and transformers versions, and FORMAT (raised whenever scoring
changes what it computes). A model that is not a local directory (a hub id) has no fingerprint and is scored every
time.

Where: $RAYCSE_CACHE_DIR if set, else $XDG_CACHE_HOME/raycse, else ~/.cache/raycse; `raycse cache clear` empties it.

Shipped figures: the package also carries the figures of the bundled all-MiniLM-L6-v2 for the shipped space files'
CPU budgets (SHIPPED_DIR, written by scripts/untouched_figures.py: the same scoring, one thread, on a CPU, with the
pinned torch and transformers), under the same fingerprints. A first search on a fresh machine with that model, those
STS files and those versions reads them instead of spending minutes of its CPU on them; any other model, data,
pooler, version or device has another fingerprint and is scored.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from raycse.evaluation.tasks import sts_data_dir
from raycse.files import cache_dir, write_json_atomic

FORMAT = 2  # 2: evaluation batches cut by padded tokens, which round the vectors differently
_SUBDIR = "untouched"
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped_untouched"  # package data: {key}.json, as `store` writes


def _hash_tree(digest, root: Path) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)


def fingerprint(model: str, objective: str, objective_columns: str | None, poolers: list[str],
                test_pooler: str | None, trust_remote_code: bool, device: str) -> str | None:
    """The key of the untouched model's figures, or None when the model is not a local directory."""
    import torch
    import transformers

    from raycse.encoder.loading import resolve_model_path

    model_dir = Path(resolve_model_path(model))
    if not model_dir.is_dir():
        return None
    digest = hashlib.sha256()
    digest.update(json.dumps([FORMAT, poolers, test_pooler, trust_remote_code, device, objective_columns,
                              torch.__version__, transformers.__version__]).encode())
    _hash_tree(digest, model_dir)
    objective_file = Path(objective)
    if objective_file.is_file():  # a development file: its bytes, not its name
        digest.update(b"dev-file\0" + objective_file.read_bytes())
    else:
        digest.update(b"named\0" + objective.encode())
    _hash_tree(digest, sts_data_dir())
    return digest.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / _SUBDIR / f"{key}.json"


def recall(key: str) -> dict | None:
    """The figures kept under `key`, or None (none kept, or a file that cannot be read: scored again)."""
    try:
        return json.loads(_path(key).read_text())["scores"]
    except (OSError, ValueError, KeyError):
        return None


def shipped(key: str) -> dict | None:
    """The figures the package ships under `key` (scripts/untouched_figures.py), or None."""
    try:
        return json.loads((SHIPPED_DIR / f"{key}.json").read_text())["scores"]
    except (OSError, ValueError, KeyError):
        return None


def store(key: str, scores: dict) -> Path:
    """Keep `scores` under `key` (a whole file or none); returns where."""
    path = _path(key)
    write_json_atomic(path, {"format": FORMAT, "scores": scores})
    return path


def clear() -> int:
    """Remove every cached figure; returns how many files were removed."""
    folder = cache_dir() / _SUBDIR
    removed = 0
    for path in folder.glob("*.json") if folder.is_dir() else ():
        path.unlink(missing_ok=True)
        removed += 1
    return removed
