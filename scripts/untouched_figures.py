"""The untouched model's figures the package ships (raycse/evaluation/shipped_untouched/), written or checked.

    python scripts/untouched_figures.py            # score what is missing, remove what no space file needs
    python scripts/untouched_figures.py --check    # exit 1, scoring nothing, if a space file's record is missing

A search scores the model it starts from (its objective with each evaluation pooler, and its seven STS test tasks)
before it can judge anything against it: on the 2-core CPU of the quick start, minutes of CPU beside the first
trials. For the bundled all-MiniLM-L6-v2 those figures depend only on the model's files, the objective, the poolers,
the STS files, the device kind and the torch and transformers versions, which is what the fingerprint
(raycse.evaluation.untouched_cache.fingerprint) covers. So the package carries them for each packaged space file's
CPU budget: scored here as a search scores them (raycse.driver.tune.scoring.score_untouched, one torch thread, as
the search's one-CPU scoring task runs), on this CPU, with the versions requirements/constraints.txt pins. Any
other model, file, version or device has another fingerprint, finds no record, and is scored as before.

Run it after a change to the bundled model or STS files, the pinned torch or transformers, a space file's poolers or
objective, or the scoring (untouched_cache.FORMAT); tests/test_untouched_cache.py fails until it has been run.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raycse.driver.layout import space_to_run  # noqa: E402
from raycse.driver.stages.baseline import untouched_key, untouched_scoring  # noqa: E402
from raycse.driver.state import SearchOptions  # noqa: E402
from raycse.evaluation import untouched_cache  # noqa: E402
from raycse.settings.space import load_space  # noqa: E402
from raycse.settings.space_files import packaged_spaces  # noqa: E402

CPU_CLUSTER = {"CPU": 2}  # the quick start's machine: no GPU, so `auto` budgets pick the CPU budget


def wanted() -> dict[str, dict]:
    """Each packaged space file's CPU-budget fingerprint: {key: {"plan": plan, "spaces": [names]}}."""
    options = SearchOptions(tracking_uri="sqlite:///unused.db", storage_path="unused")
    keys: dict[str, dict] = {}
    for path in packaged_spaces().values():
        plan = space_to_run(load_space(path), options, "cpu", cluster=CPU_CLUSTER)
        key = untouched_key(plan)
        if key is not None:
            keys.setdefault(key, {"plan": plan, "spaces": []})["spaces"].append(path.stem)
    return keys


def score(plan) -> tuple[dict, float]:
    import torch

    from raycse.driver.tune.scoring import score_untouched

    torch.set_num_threads(1)
    _, poolers, test_pooler = untouched_scoring(plan)
    started = time.perf_counter()
    scores = score_untouched(plan.base, poolers, test_pooler)
    return scores, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="score nothing; exit 1 if a record is missing")
    args = parser.parse_args(argv)
    keys = wanted()
    missing = [key for key in keys if untouched_cache.shipped(key) is None]
    if args.check:
        for key in missing:
            print(f"no shipped untouched figures for {', '.join(keys[key]['spaces'])} ({key[:12]}): run "
                  "python scripts/untouched_figures.py")
        return 1 if missing else 0
    import torch
    import transformers

    untouched_cache.SHIPPED_DIR.mkdir(exist_ok=True)
    for key in missing:
        scores, seconds = score(keys[key]["plan"])
        record = {"format": untouched_cache.FORMAT, "scores": scores,
                  "scored": {"spaces": keys[key]["spaces"], "date": date.today().isoformat(), "device": "cpu",
                             "threads": 1, "machine": platform.processor() or platform.machine(),
                             "torch": torch.__version__, "transformers": transformers.__version__,
                             "seconds": round(seconds, 1)}}
        (untouched_cache.SHIPPED_DIR / f"{key}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"{', '.join(keys[key]['spaces'])}: scored in {seconds:.0f} s")
    for stale in untouched_cache.SHIPPED_DIR.glob("*.json"):
        if stale.stem not in keys:
            stale.unlink()
            print(f"removed {stale.name}: no packaged space file has its fingerprint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
