"""A trial's checkpoint time at the papers' settings with the stand-ins: last/ at the cadence a search trial uses, and
at every evaluation (the rule before it), on this machine.

    python benchmarks/checkpoint_cadence.py --shape minilm --steps 48 --eval-steps 4 \
        --output benchmarks/results/paper-scale/2026-11-26-cpu2-checkpoint-cadence/minilm.json

A search trial's checkpoint path, without Ray: the trainer (raycse.training.trainer.train) writes best/ whenever the
objective improves and last/ when due; every evaluation that wrote last/ hands the folder over, and the handing
copies it into a storage folder with the copy Tune makes of a reported checkpoint (pyarrow's, as
ray.train._internal.storage does), one kept (Tune's num_to_keep=1); its seconds count as the trial counts Tune's.
Two arms train the same model on the same data with the same seed:

  every      last/ written and handed over at every evaluation (a trial with one slot before the cadence)
  cadence    `CheckpointCadence`: at the first evaluation, then once 20 times the checkpoint seconds spent since the
             last write have passed, and at the last step (raycse/training/checkpoints.py)

The model is BERT's shape with random weights (raycse.bench.synthetic, what `raycse bench` times), saved once; batch
64, max length 32, the synthetic wiki1m corpus (raycse/data/synthetic_corpus.py); the objective the first
--dev-pairs pairs of STS-B dev (a CPU evaluates the whole of it far slower, next to its steps, than a GPU does), an
evaluation every --eval-steps steps. Per arm: the training's wall clock, its checkpoint seconds (the trainer's
writes and the copies) and their share, the evaluations that wrote last/, and the sizes of best/ and last/.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package (which numpy, asyncio and so Ray import): take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def dev_file(folder: Path, pairs: int) -> str:
    """The first `pairs` pairs of STS-B dev as an objective file (0: STS-B dev itself)."""
    if not pairs:
        return "stsb_dev"
    from raycse.evaluation.tasks import load_sts_task

    dev = load_sts_task("STSBenchmark-dev")["all"]
    rows = ["sentence1\tsentence2\tscore"] + [f"{a}\t{b}\t{s}" for a, b, s in
                                              zip(dev.sentences1[:pairs], dev.sentences2[:pairs], dev.scores[:pairs])]
    path = folder / "dev.tsv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def stand_in(folder: Path, shape: str) -> str:
    """BERT's `shape` with random weights and the packaged tokenizer, saved as a model directory."""
    from raycse.bench.synthetic import bench_tokenizer, make_encoder

    tokenizer = bench_tokenizer()
    encoder = make_encoder(shape, tokenizer, "eager", seed=0, pooler="cls")
    encoder.backbone.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return str(folder / "model")


def run_arm(arm: str, model: str, objective: str, args, folder: Path) -> dict:
    """One training, its checkpoints handed to a storage folder as a trial's are handed to Tune."""
    import pyarrow.fs
    from ray.train._internal.storage import _pyarrow_fs_copy_files

    from raycse.settings.config import TrainConfig
    from raycse.training.checkpoints import CheckpointCadence
    from raycse.training.trainer import train

    output, storage = folder / arm / "trial", folder / arm / "storage"
    storage.mkdir(parents=True)
    config = TrainConfig(model=model, loss="simcse", batch_size=64, max_len=32, max_steps=args.steps,
                         eval_steps=args.eval_steps, corpus="synthetic-wiki1m", max_sentences=64 * args.steps,
                         objective=objective, seed=42, test_eval=False, compile="never",
                         output_dir=str(output)).validate()
    cadence = CheckpointCadence() if arm == "cadence" else None
    local = pyarrow.fs.LocalFileSystem()
    handed: list[int] = []
    copies = 0.0

    def on_eval(report) -> None:
        nonlocal copies
        if report.checkpoint is None:
            return
        started = time.perf_counter()
        target = storage / f"checkpoint_{len(handed):06d}"
        _pyarrow_fs_copy_files(report.checkpoint, str(target), source_filesystem=local,
                               destination_filesystem=local)
        for previous in storage.glob("checkpoint_*"):  # one kept, the newest
            if previous != target:
                shutil.rmtree(previous)
        seconds = time.perf_counter() - started
        copies += seconds
        if cadence is not None:
            cadence.spent(seconds)
        handed.append(report.step)

    results = train(config, on_eval=on_eval, cadence=cadence)
    (kept,) = storage.glob("checkpoint_*")
    checkpoint_s = results["timings"]["checkpoint_s"] + copies
    figures = {"arm": arm, "wall_s": results["wall_seconds"], "checkpoint_s": checkpoint_s,
               "written_s": results["timings"]["checkpoint_s"], "copied_s": copies,
               "share": checkpoint_s / results["wall_seconds"], "evaluations": len(results["dev_curve"]),
               "last_written_at": handed, "best_bytes": folder_bytes(kept / "best"),
               "last_bytes": folder_bytes(kept / "last"), "train_s": results["timings"]["train_s"],
               "eval_s": results["timings"]["eval_s"], "best_step": results["best_step"],
               "dev_curve": [round(point["objective"], 4) for point in results["dev_curve"]]}
    shutil.rmtree(folder / arm)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="minilm", help="tiny | minilm | bert-base (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--eval-steps", type=int, default=4)
    parser.add_argument("--dev-pairs", type=int, default=64, help="0: the whole of STS-B dev (default: %(default)s)")
    parser.add_argument("--arms", default="every,cadence")
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="raycse-cadence-") as tmp:
        folder = Path(tmp)
        model, objective = stand_in(folder, args.shape), dev_file(folder, args.dev_pairs)
        arms = [run_arm(arm, model, objective, args, folder) for arm in args.arms.split(",")]
    record = {"command": "python " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
              "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}), shared with other jobs",
              "settings": {"shape": args.shape, "batch_size": 64, "max_len": 32, "steps": args.steps,
                           "eval_steps": args.eval_steps, "dev_pairs": args.dev_pairs, "corpus": "synthetic-wiki1m"},
              "arms": arms}
    for arm in arms:
        print(f"{args.shape:>9} {arm['arm']:>8}: checkpoints {arm['checkpoint_s']:7.2f} s of {arm['wall_s']:7.2f} s "
              f"({arm['share']:6.1%}); last/ written at {len(arm['last_written_at'])} of {arm['evaluations']} "
              f"evaluations {arm['last_written_at']}; best/ {arm['best_bytes'] / 1e6:.0f} MB, last/ "
              f"{arm['last_bytes'] / 1e6:.0f} MB", flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
