"""Assemble the train part of a `benchmarks/peers.py --quick` record from its work folder and its printed lines, for
a run stopped before its search part (the driver writes its record only at its end). Every figure comes from the
run: each side's run file (written by the side's own process) and the wall clock the driver printed for it; the
untouched model's figure is the one measured on this machine by raycse's scorer the same day (evalprof.out)."""

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path("/work/main")
spec = importlib.util.spec_from_file_location("peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)
work, stdout, out, untouched = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
line = re.compile(
    r"  train (\w+) +seed (\d+): ([\d.]+) s \(start-up ([\d.]+), steps ([\d.]+), evaluations ([\d.]+), "
    r"checkpoints ([\d.]+)\), objective ([\d.]+)"
)
runs = []
for m in line.finditer(stdout.read_text()):
    side, seed, wall = m.group(1), int(m.group(2)), float(m.group(3))
    run = json.loads((work / "train" / f"{side}-{seed}" / f"{side}-run.json").read_text())
    run.update(wall_s=wall, wall_s_source="the driver's printed wall clock (0.1 s)")
    run["startup_s"] = wall - run["steps_s"] - run["eval_s"] - run["checkpoint_s"]
    run["cpu_s"] = run.get("child_cpu_s")
    runs.append(run)
batch = peers.SIZES["quick"]["batch_size"]


def figures(rs):
    f = {
        k: sum(r[k] for r in rs) / len(rs)
        for k in ("wall_s", "startup_s", "steps_s", "eval_s", "checkpoint_s", "peak_rss_mb")
    }
    f["sentences_per_s"] = sum(r["steps"] * batch for r in rs) / sum(r["steps_s"] for r in rs)
    f["steps"] = sorted({r["steps"] for r in rs})
    f["evaluations"] = sorted({r["evaluations"] for r in rs})
    f["objective"] = peers.interval([r["objective"] for r in rs])
    f["n_runs"] = len(rs)
    return f


sides = {s: figures([r for r in runs if r["side"] == s]) for s in peers.SIDES if any(r["side"] == s for r in runs)}
a, b = sides["raycse"], sides["recipe"]
paired = [
    (x, y) for x in runs if x["side"] == "raycse" for y in runs if y["side"] == "recipe" and y["seed"] == x["seed"]
]
record = {
    "question": "is a raycse trial and a raycse search faster than what a researcher runs instead?",
    "command": "python benchmarks/peers.py --quick (train part; stopped before its search part)",
    "assembled_by": "assemble_train.py (this folder) from the run's work folder and printed lines",
    "device": "cpu (2 cores), shared with other jobs (load.txt)",
    "setting": {k: v for k, v in peers.SIZES["quick"].items()},
    "untouched_objective": untouched,
    "train": {
        "runs": runs,
        "sides": sides,
        "ratios": {
            "wall": b["wall_s"] / a["wall_s"],
            "steps": b["steps_s"] / a["steps_s"],
            "evaluations": b["eval_s"] / a["eval_s"],
            "startup": b["startup_s"] / a["startup_s"],
            "checkpoints": b["checkpoint_s"] / a["checkpoint_s"],
            "sentences_per_s": a["sentences_per_s"] / b["sentences_per_s"],
            "peak_rss": b["peak_rss_mb"] / a["peak_rss_mb"],
        },
        "objective_difference_raycse_minus_recipe": peers.interval([x["objective"] - y["objective"] for x, y in paired])
        if paired
        else None,
        "same_steps_and_evaluations": a["steps"] == b["steps"] and a["evaluations"] == b["evaluations"],
        "gain_over_untouched": {s: sides[s]["objective"]["mean"] - untouched for s in sides},
    },
}
out.write_text(json.dumps(record, indent=1) + "\n")
print(
    json.dumps(
        {k: record["train"][k] for k in ("ratios", "objective_difference_raycse_minus_recipe", "gain_over_untouched")},
        indent=1,
    )
)
for s in sides:
    print(s, {k: v for k, v in sides[s].items()})
