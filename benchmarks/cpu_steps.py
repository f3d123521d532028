"""The CPU steps a dry run prices from (raycse/planning/cpu_steps.py: CPU_STEPS): the dry run's own measurement, run
longer, on this machine's CPU with one thread: a random-weight encoder of each shape, its trainer's step at the batch
and length the shipped space files plan, and one evaluation of the whole of STS-B dev (after a first call on a few
sentences, as a training's evaluations after its first; its tokenising included).

    python benchmarks/cpu_steps.py [--output FILE.json]

Each is timed in the process's CPU seconds (one thread: what it takes on a core of its own, which other work on a
shared machine does not inflate, as it inflates wall seconds several times over), its wall seconds and the machine's
load average beside them. Rows: MiniLM at batch 16 (every CPU budget's trial), BERT-base at batch 64 (the paper
budgets); the focal loss, length 32. Two-thread plans are priced from them in proportion.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # benchmarks/concurrent.py

ROWS = (("minilm", 16, 5, 2), ("bert-base", 64, 2, 1))  # (shape, batch, timed steps, warm-up steps)
LOSS, SEQ_LEN, THREADS = "focal", 32, 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread: the tokenizer's too

    import torch

    from raycse.planning.cpu_steps import measure

    rows = []
    for shape, batch, steps, warmup in ROWS:
        print(f"{shape}, batch {batch}, {THREADS} thread, CPU seconds:", flush=True)
        load_before = os.getloadavg()[0]
        wall = time.perf_counter()
        found = measure(shape, LOSS, batch, SEQ_LEN, THREADS, steps=steps, warmup=warmup, rows=None, sentences=None,
                        clock=time.process_time)
        rows.append({"shape": shape, "loss": LOSS, "batch_size": batch, "seq_len": SEQ_LEN, "threads": THREADS,
                     "steps": steps, "warmup": warmup, "clock": "process CPU seconds", "ms_per_step": found.ms,
                     "eval_seconds": found.eval_s, "eval_sentences": found.eval_sentences,
                     "wall_s": time.perf_counter() - wall, "load_average": [load_before, os.getloadavg()[0]]})
        print(f"  {found.ms:.1f} ms a step, {found.eval_s:.2f} s an evaluation", flush=True)
    result = {"command": "python " + " ".join(sys.argv), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores", "torch": torch.__version__, "rows": rows}
    text = json.dumps(result, indent=1)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
