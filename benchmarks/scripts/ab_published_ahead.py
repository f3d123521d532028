"""A/B in alternation of `raycse search` on ahead-search.yaml, the code before and after a change:

    python benchmarks/scripts/ab_published_ahead.py ROUNDS SEED OLD_CHECKOUT NEW_CHECKOUT

ahead-search.yaml is read from its record, benchmarks/results/search-wall-clock/2026-11-27-cpu2-published-ahead/.

The space: a 2-layer random BERT (`python benchmarks/gpu_suite.py rehearsal` writes it), STS-B dev as the objective,
4 search trials (the search's seed SEED), the top 3 on 1 choosing seed, the winner and the published point on 4
judging seeds, each judging run scoring the seven test tasks; 2 slots of one core. A first run (not shown) scores the
untouched model into the cache folder every later run reads, so that none scores it. Each run: a new --state folder.
Prints, per run, the wall clock by stage, the slots' use, the Tune experiments it made and its answer (whether the
winner is the published point, and the judged dev mean and n of each judged configuration): the same answer from
both codes is part of the check.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
RECORD = os.path.join(ROOT, "benchmarks", "results", "search-wall-clock", "2026-11-27-cpu2-published-ahead")


def run(name: str, root: str, space: str, work: str, cache: str, index: int) -> None:
    state = os.path.join(work, f"state-{name}-{index}")
    env = {**os.environ, "PYTHONPATH": root, "RAYCSE_CACHE_DIR": cache}
    clock = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "raycse", "search", "--space", space, "--state", state], env=env,
                          capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - clock
    if done.returncode != 0:
        print(name, index, "failed", done.stderr[-1500:], flush=True)
        return
    [path] = glob.glob(f"{state}/mlflow-artifacts/**/search_summary.json", recursive=True)
    summary = json.loads(open(path).read())
    t = summary["timings"]
    experiments = sorted(os.path.basename(p) for p in glob.glob(f"{state}/ray_results/*"))
    configs = summary["decision"]["configs"]
    judged = {("published" if c["is_published"] else "winner" if c["is_winner"] else c["config_key"]):
              (round(c["judge"]["dev"]["mean"], 4), c["judge"]["n"]) for c in configs if c.get("judge")}
    same = any(c["is_published"] and c["is_winner"] for c in configs)
    print(name, index, f"{wall:.1f} s;", f"total {t['time_total_s']:.1f}, choose {t['time_choose_s']:.1f}, "
          f"judge {t['time_judge_s']:.1f} s; slots used {t['slot_utilisation']:.3f}; experiments {experiments}; "
          f"the winner is the published point: {same}; "
          f"judged {judged}", flush=True)


def main() -> None:
    rounds, seed, old, new = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    work = tempfile.mkdtemp(prefix="raycse-ab-")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_suite.py"), "rehearsal", work], check=True,
                   capture_output=True)
    text = open(os.path.join(RECORD, "ahead-search.yaml")).read()
    space = os.path.join(work, "ahead-search.yaml")
    open(space, "w").write(text.replace("TINY_BERT", os.path.join(work, "tiny-bert"))
                           .replace("SMALL_DEV", os.path.join(work, "small-dev.tsv")).replace("SEED", seed))
    cache = os.path.join(work, "cache")
    run("warm-up", new, space, work, cache, -1)  # the untouched model's figures, into the cache
    for index in range(rounds):
        for name, root in (("old", old), ("new", new)) if index % 2 == 0 else (("new", new), ("old", old)):
            run(name, root, space, work, cache, index)
    print("work:", work)


if __name__ == "__main__":
    main()
