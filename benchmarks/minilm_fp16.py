"""Save the packaged all-MiniLM-L6-v2 as an fp16 model directory (~45 MB) to carry to a lent GPU.

The device tool carries at most 64 MiB of ignored files with a working tree; the packaged model's fp32 weights are
87 MiB. Half precision halves them, and raycse loads any checkpoint into float32 master weights
(`Encoder.from_pretrained`), so the only change is fp16's rounding of the weights (10 mantissa bits: a relative
error of at most 2^-11). What that rounding does to STS-B dev is measured, not assumed (benchmarks/gpu-suite.md):

    python benchmarks/minilm_fp16.py                       # writes .gpu/minilm-fp16/ (git-ignored)
    raycse eval --model .gpu/minilm-fp16 --pooler avg --tasks stsb-dev
    raycse eval --model minilm --pooler avg --tasks stsb-dev

The directory holds the weights in fp16 safetensors (same tensor names), the model's own config.json, its
tokenizer files and its sentence-transformers files (modules.json, 1_Pooling/, ...), copied unchanged.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package (which torch imports): take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

WEIGHTS = "model.safetensors"
SKIP = {WEIGHTS, ".gitattributes", "README.md"}  # the weights are rewritten; the rest is not needed to load


def convert(source: Path, target: Path) -> dict:
    """Write `target` from the model directory `source` with its floating-point weights in fp16."""
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for item in source.iterdir():
        if item.name in SKIP:
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, staging / item.name)
    tensors, largest_error = {}, 0.0
    with safe_open(str(source / WEIGHTS), framework="pt") as weights:
        metadata = weights.metadata() or {"format": "pt"}
        for name in weights.keys():
            tensor = weights.get_tensor(name)
            if tensor.is_floating_point():
                half = tensor.to(torch.float16)
                largest_error = max(largest_error, float((half.float() - tensor.float()).abs().max()))
                tensor = half
            tensors[name] = tensor.contiguous()
    save_file(tensors, str(staging / WEIGHTS), metadata=metadata)
    os.chmod(staging / WEIGHTS, 0o644)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    return {"tensors": len(tensors), "bytes": size, "largest_abs_rounding": largest_error}


def main(argv: list[str] | None = None) -> int:
    from raycse.encoder.loading import resolve_model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm", help="the model directory to convert (default: the packaged "
                        "all-MiniLM-L6-v2)")
    parser.add_argument("--output", default=".gpu/minilm-fp16", help="the fp16 directory (default: %(default)s)")
    args = parser.parse_args(argv)
    source = Path(resolve_model_path(args.model))
    if not (source / WEIGHTS).is_file():
        print(f"raycse: error: --model: {source} has no {WEIGHTS}", file=sys.stderr)
        return 2
    info = convert(source, Path(args.output))
    print(f"wrote {args.output}: {info['tensors']} tensors, {info['bytes'] / 2**20:.1f} MiB in all, largest weight "
          f"rounding {info['largest_abs_rounding']:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
