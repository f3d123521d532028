"""The GPU suite's `paper-full` part: one trial of the papers' full length, timed term by term, beside the dry run's
forecast of each and against `raycse bench`'s step.

    python benchmarks/paper_full.py OUTDIR --deadline S                 # on the GPU: BERT-base's shape, 15,625 steps
    python benchmarks/paper_full.py OUTDIR --deadline S --rehearse DIR  # on a CPU: DIR/tiny-bert, one epoch of 64
    python benchmarks/paper_full.py OUTDIR --plan                       # the forecast, nothing run

What runs: the paper part's search (benchmarks/paper_part.py: `raycse search --budget paper --no-confirm` over
focal.yaml's paper budget on the stand-ins, BERT-base's shape with random weights and `corpus: synthetic-wiki1m`)
with one trial, one a GPU, of the budget's own length: max_steps 15,625, one epoch of the million sentences at batch
64, STS-B dev every 125 steps. No trial of that length had run anywhere: every GPU figure before came from trials
of 2,000 steps or fewer, and what compiling, checkpoints, start-up and the data take of a whole trial was
extrapolated.

Recorded (OUTDIR/paper-full.json, the paper part's record with the trial's own seconds): the trial's wall clock, from
its worker's start to its last report, against 15,625 x the step of `raycse bench` for the same shape, batch and
precision (the suite's step-bert-base-64 row, compiled as the trial was); its shares: start-up, compile, training,
evaluations and checkpoints (the trial's own timings), and the data: the driver's tokenising of the corpus and the
training beyond the bench's steps (the loader, the host, the synchronisation at each evaluation); the disk peak; the
dry run's forecast beside each (`raycse.plan` of the same space file). Goal: the wall clock at most GOAL x 15,625 x
the bench's step.
"""
from __future__ import annotations

import importlib.util
import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package: take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

GOAL = 1.10  # the trial's wall clock over 15,625 x raycse bench's step, at most


def _paper_part():
    spec = importlib.util.spec_from_file_location("benchmark_paper_part", Path(_HERE) / "paper_part.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


paper_part = _paper_part()


def budget_steps() -> int:
    """focal.yaml's paper budget's max_steps: one epoch of the million sentences at batch 64 (15,625)."""
    import yaml

    return int(yaml.safe_load(paper_part.SPACE.read_text())["paper_budget"]["train"]["max_steps"])


# The GPU's setting: the paper budget's trial whole, one a GPU, reading the whole corpus (what its epoch trains on).
# The rehearsal's: the suite's 2-layer BERT, one epoch of 64 sentences at batch 8 (8 steps), an evaluation every 2.
FULL = {"shape": "bert-base", "steps": budget_steps(), "sharing": [1], "cpus_per_trial": 2, "first_sentences": None}
REHEARSAL = {"shape": "tiny", "steps": 8, "eval_steps": 2, "batch_size": 8, "sharing": [1], "cpus_per_trial": 1,
             "first_sentences": 64}


# The driver's tokenising of the whole million sentences on the GPU machine (16 cores), as the paper part recorded it
# (its one-trial search read them all): the dry run scales the bundled corpus's instead (105 s).
PAPER_RECORD = Path(_HERE) / "results" / "paper-scale" / "2026-11-26-h100" / "paper.json"
START_MARGIN_S = 30


def recorded_tokenize_s() -> float:
    runs = json.loads(PAPER_RECORD.read_text())["runs"]
    return next(run["measured"]["tokenize_s"] for run in runs if run["measured"].get("sentences") is None)


class FullPart(paper_part.Part):
    """The paper part's machinery with one search of one trial of the budget's length, into OUTDIR/paper-full.json."""

    name, gpu_setting, rehearsal_setting = "paper-full", FULL, REHEARSAL

    def needs(self, predicted: dict) -> float:
        """The forecast with the corpus's tokenising as recorded on the GPU machine, and START_MARGIN_S: the trial
        needs a whole call (the paper part's searches took 0.81-0.97 of their forecast)."""
        return (predicted["wall_s"]["value"] - predicted["tokenize_s"]["value"] + recorded_tokenize_s()
                + START_MARGIN_S)


# ---------------------------------------------------------------------------------------------- the summary line
TERMS = (("startup_s", "start-up"), ("compile_s", "compile"), ("train_s", "training"), ("eval_s", "evaluations"),
         ("checkpoint_s", "checkpoints"))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pair(measured: float | None, forecast: float | None, wall: float | None, forecast_wall: float | None) -> str:
    """'M [F] s (m% [f%])': seconds measured, the forecast in brackets, and each one's share of its trial."""
    def share(value, whole):
        return "-" if value is None or not whole else f"{100 * value / whole:.1f}%"

    return (f"{_seconds(measured)} [{_seconds(forecast)}] s ({share(measured, wall)} "
            f"[{share(forecast, forecast_wall)}])")


def full_line(data: dict, bench: dict | None = None) -> str:
    """The full-length trial's summary: its wall clock against 15,625 x `bench`'s step (raycse bench of the same
    shape, batch and precision; None: not measured yet), each term's seconds and share, the data's, the disk peak,
    each beside the dry run's forecast in brackets."""
    setting = data["setting"]
    head = (f"paper-full ({setting['shape']} shape, random weights, {setting['corpus']}, one trial of "
            f"{setting['steps']:,} steps, 1 a GPU; measured [the dry run's forecast])")
    if not data["runs"]:
        return f"{head}: no trial finished yet"
    run = data["runs"][0]
    m, p = run["measured"], run["predicted"] or {}
    trial, forecast = m.get("trial") or {}, p.get("trial") or {}
    wall, forecast_wall = trial.get("wall_s"), forecast.get("wall_s")
    cells = [f"trial wall {_seconds(wall)} [{_seconds(forecast_wall)}] s"]
    steps = (m.get("steps") or [0])[0]
    if bench and wall:
        ideal = steps * bench["ms_per_step"] / 1000
        cells[0] += (f" against {steps:,} x raycse bench's {bench['ms_per_step']:.2f} ms ({bench.get('device')}) = "
                     f"{ideal:.1f} s: {wall / ideal:.2f}x (at most {GOAL:.2f}x wanted)")
        beyond = (trial.get("train_s") or 0) - ideal
        data_cell = f"; training beyond the bench's steps {beyond:.1f} s ({100 * beyond / wall:.1f}%)"
    else:
        cells[0] += " (no raycse bench row of the same shape and precision yet)"
        data_cell = ""
    cells += [f"{words} {_pair(trial.get(key), forecast.get(key), wall, forecast_wall)}" for key, words in TERMS]
    evals = m.get("evals")
    cells.append(f"{evals} evaluations at {_figure(m, p, 'eval_s', 's', 2)}, steps at "
                 f"{_figure(m, p, 'step_ms', 'ms', 2)}")
    cells.append(f"data: the driver's tokenising {_figure(m, p, 'tokenize_s', 's', 1)}{data_cell}")
    cells.append(f"disk peak {_figure(m, p, 'disk_peak_gb', 'GB', 2)}")
    cells.append(f"the search's wall {_figure(m, p, 'wall_s', 's', 0)}")
    return f"{head}: " + "; ".join(cells)


def _figure(measured: dict, predicted: dict, name: str, unit: str, digits: int) -> str:
    def shown(value):
        return "-" if value is None else f"{value:.{digits}f}"
    return f"{shown(measured.get(name))} [{shown((predicted.get(name) or {}).get('value'))}] {unit}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the suite's OUTDIR")
    parser.add_argument("--deadline", type=float, default=540, help="seconds from now; a trial cut off there runs "
                                                                     "again in the next call (default: 540)")
    parser.add_argument("--plan", action="store_true", help="print the forecast; run nothing")
    parser.add_argument("--rehearse", type=Path, default=None, metavar="DIR",
                        help="the CPU rehearsal's setting, with gpu_suite.py rehearsal's DIR")
    args = parser.parse_args(argv)
    part = FullPart(args.out.resolve(), args.deadline, args.rehearse, weights=not args.plan)
    return part.plan() if args.plan else part.run_all()


if __name__ == "__main__":
    sys.exit(main())
