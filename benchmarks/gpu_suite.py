"""The helpers of benchmarks/gpu_suite.sh: the rehearsal's tiny setting, a space file's variants, the untouched
model's check, a command under a deadline, and each part's one summary line.

    python benchmarks/gpu_suite.py rehearsal DIR             # a tiny BERT, a 48-pair dev file, a tiny focal.yaml
    python benchmarks/gpu_suite.py space FILE --sampler random --output F
    python benchmarks/gpu_suite.py check-minilm EVAL.json    # the untouched model's STS-B dev against the CPU figure
    python benchmarks/gpu_suite.py pins                      # the carried wheels' versions against this machine's
    python benchmarks/gpu_suite.py paper-row OUTDIR [--part paper-full]  # the bench row a paper search is held to
    python benchmarks/gpu_suite.py supervise --deadline S --log F [--kill-when TEXT] -- COMMAND...
    python benchmarks/gpu_suite.py summary PART OUTDIR       # PART.json's one line (search and sampler: made here)

Every figure a summary line prints comes from a file the part wrote; nothing is measured here.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package: take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

# all-MiniLM-L6-v2 (the packaged fp32 weights) on STS-B dev with its own mean pooling, on the 2-core CPU
# (`raycse eval --model minilm --pooler avg --tasks stsb-dev`: 86.71699; its fp16 copy 86.71792,
# benchmarks/gpu-suite.md)
MINILM_STSB_DEV = 86.72
MINILM_TOLERANCE = 0.05
WHEELS = Path(_HERE) / "device_wheels.txt"


# ------------------------------------------------------------------------------------------------- rehearsal
def rehearsal(folder: Path) -> None:
    """The rehearsal's setting in `folder`: a 2-layer BERT with MiniLM's tokenizer (random weights: tests/conftest.py's
    tiny BERT), the first 48 pairs of STS-B dev as the objective, and focal.yaml with tiny trials and budgets: 2
    search trials of 4 steps (the published point and one from the sampler, under ASHA), the top 2 chosen among on
    1 seed, the winner and the published point judged on 2 seeds (the first also scoring the seven test tasks),
    2 trials at once on the fake GPU."""
    import torch
    import yaml
    from transformers import AutoTokenizer, BertConfig, BertModel

    from raycse.encoder.loading import resolve_model_path
    from raycse.evaluation.tasks import load_sts_task

    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "tiny-bert"
    if not (model / "config.json").is_file():
        torch.manual_seed(0)
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
        BertModel(config).save_pretrained(model)
        tokenizer.save_pretrained(model)
    dev = folder / "small-dev.tsv"
    pairs = load_sts_task("STSBenchmark-dev")["all"]
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"{a}\t{b}\t{s}\n" for a, b, s in list(zip(pairs.sentences1, pairs.sentences2, pairs.scores))[:48]))
    space = yaml.safe_load((Path(_HERE).parent / "search_spaces" / "focal.yaml").read_text())
    space.pop("cpu_budget")  # the fake GPU gives the full budget, as a real one does
    space.update(model=str(model.resolve()), objective=str(dev.resolve()))
    space["train"].update(batch_size=8, max_len=32, max_steps=4, eval_steps=2, max_sentences=64)
    space["search"].update(num_samples=2, test_eval="best",
                           confirm={"top_k": 2, "choose_seeds": 1, "judge_seeds": 2, "test_seeds": 1})
    space["resources"] = {"workers": 1, "gpus_per_worker": 0.5, "cpus_per_worker": 1}
    (folder / "focal.yaml").write_text("# benchmarks/gpu_suite.py rehearsal: search_spaces/focal.yaml, tiny\n"
                                       + yaml.safe_dump(space, sort_keys=False))
    print(folder / "focal.yaml")


def space_variant(source: Path, sampler: str | None, test_eval: str | None, output: Path,
                  gpus_per_worker: float | None = None) -> None:
    """`source` with another sampler (search.sampler.name), test_eval and resources.gpus_per_worker, the rest
    unchanged."""
    import yaml

    space = yaml.safe_load(source.read_text())
    search = space.setdefault("search", {})
    if sampler is not None:
        search.setdefault("sampler", {})["name"] = sampler
    if test_eval is not None:
        search["test_eval"] = test_eval
    if gpus_per_worker is not None:
        space.setdefault("resources", {})["gpus_per_worker"] = gpus_per_worker
    header = (f"# {source}, with search.sampler.name: {sampler or 'as is'}, search.test_eval: {test_eval or 'as is'}, "
              f"resources.gpus_per_worker: {'as is' if gpus_per_worker is None else gpus_per_worker}\n")
    output.write_text(header + yaml.safe_dump(space, sort_keys=False))


# ------------------------------------------------------------------------------------------------------ checks
def check_minilm(path: Path) -> int:
    value = json.loads(path.read_text())["stsb_dev"]
    ok = abs(value - MINILM_STSB_DEV) <= MINILM_TOLERANCE
    print(f"untouched all-MiniLM-L6-v2 (installed as 'minilm'): STS-B dev {value:.4f}, the CPU figure "
          f"{MINILM_STSB_DEV} ± {MINILM_TOLERANCE}: {'ok' if ok else 'WRONG'}")
    if not ok:
        print("gpu_suite: error: the installed weights are not all-MiniLM-L6-v2's (random stand-in? a broken fp16 "
              "copy?): no objective figure of this machine would mean anything; nothing else runs", file=sys.stderr)
    return 0 if ok else 1


def pinned() -> dict[str, str]:
    """benchmarks/device_wheels.txt: name -> version."""
    pins = {}
    for line in WHEELS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name] = version
    return pins


def check_pins() -> int:
    """Whether the wheels carried to the device are the versions this machine runs the rehearsal with: 1 when one
    differs (a newer release installed here, say), which the rehearsal reports without stopping."""
    from importlib.metadata import PackageNotFoundError, version

    wrong = []
    for name, want in pinned().items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = None
        if have != want:
            wrong.append(f"{name} {want} carried, {have or 'none'} here")
    print(f"carried wheels: {len(pinned())} pinned in benchmarks/device_wheels.txt, "
          + (f"{len(wrong)} differ from this machine's: {'; '.join(wrong)}" if wrong else "the versions this "
             "machine runs"))
    return 1 if wrong else 0


# ---------------------------------------------------------------------------------------------------- supervise
def supervise(deadline: float, log: Path, kill_when: str | None, command: list[str], watch=None) -> int:
    """Run `command` in its own process group, its output to `log` (appended) and to stdout; SIGKILL the group (the
    command and the Ray runtime it started, as tests/test_search.py's kill does) at `deadline` seconds or once
    `kill_when` appears in its output. `watch(pid)`, if given, is called with the command's process id every poll
    (benchmarks/paper_part.py samples its processes' memory there). Returns its exit status, or 124 when killed."""
    import threading

    started, seen = time.monotonic(), threading.Event()
    with log.open("a") as sink:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def copy() -> None:
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                if kill_when and kill_when in line:
                    seen.set()

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        killed = None
        while proc.poll() is None:
            if watch is not None:
                watch(proc.pid)
            if time.monotonic() - started > deadline:
                killed = f"its deadline ({deadline:.0f} s)"
            elif seen.is_set():
                killed = f"{kill_when!r} in its output"
            if killed:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.2)
        reader.join(timeout=10)
        if killed:
            note = f"gpu_suite: killed after {time.monotonic() - started:.0f} s ({killed}); the same call again resumes"
            sink.write(note + "\n")
            print(note, flush=True)
            return 124
        return proc.returncode


# ------------------------------------------------------------------------------------------------------ summary
def search_summary(state: Path) -> dict | None:
    found = sorted(glob.glob(str(state / "**" / "search_summary.json"), recursive=True), key=os.path.getmtime)
    return json.loads(Path(found[-1]).read_text()) if found else None


def _difference(block: dict | None) -> str:
    if not block or block.get("mean") is None:
        return "none (the winner is the published point)" if block is None else "-"
    interval = (f" [{block['low']:+.2f}, {block['high']:+.2f}]" if block.get("low") is not None
                and block.get("high") is not None else ", no interval")
    return f"{block['mean']:+.2f}{interval} (n = {block.get('n')})"


def search_line(summary: dict) -> str:
    """The answer, its intervals, the wall clock by stage and the slots' use, from search_summary.json."""
    winner, timings = summary.get("winner") or {}, summary.get("timings") or {}
    decision = summary.get("decision") or {}
    stages: dict[str, int] = {}
    for trial in summary.get("trials") or []:
        stages[trial.get("stage")] = stages.get(trial.get("stage"), 0) + 1
    phases = ", ".join(f"{k[5:-2]} {v:.0f}" for k, v in timings.items()
                       if k.startswith("time_") and k.endswith("_s") and k != "time_total_s")
    work = "/".join(f"{timings.get(f'trial_{k}_s', 0):.0f}" for k in ("startup", "compile", "train", "eval",
                                                                     "checkpoint"))
    published = " (the published point)" if winner.get("is_published") else ""
    return (f"{', '.join(f'{n} {stage}' for stage, n in stages.items())} trials (judging look {decision.get('look')}"
            f", {decision.get('stopped') or 'not stopped early'}); winner {winner.get('params')}{published}: "
            f"dev {winner.get('mean', float('nan')):.2f} ± {winner.get('std') or 0:.2f} (n = {winner.get('n')}); "
            f"winner - published, {winner.get('judged_on')}: {_difference(winner.get('versus_published'))}; "
            f"winner - untouched: {_difference(winner.get('versus_baseline'))}; untouched dev "
            f"{(summary.get('baseline') or {}).get('objective', float('nan')):.2f}; "
            f"{timings.get('time_total_s', 0):.0f} s ({phases}); trials startup/compile/train/eval/checkpoint "
            f"{work} s; slot use {100 * timings.get('slot_utilisation', 0):.0f}% of "
            f"{timings.get('concurrent_slots', 0):.0f}")


def _batch(out: Path) -> str:
    data = json.loads(next(iter(sorted(out.glob("cached-*.json")))).read_text())
    return f"{data['cached_batch_size']} in chunks of {data['batch_size']} ({data['shape']})"


def _beside(run: dict, name: str, unit: str, digits: int = 1) -> str:
    """A measured figure with the dry run's prediction in brackets ('-' where there is none)."""
    def shown(value):
        return "-" if value is None else f"{value:.{digits}f}"
    predicted = (run.get("predicted") or {}).get(name) or {}
    return f"{shown(run['measured'].get(name))} [{shown(predicted.get('value'))}] {unit}".rstrip()


def _steady(measured: dict) -> str:
    """The step after the first evaluation, when the log gave one (the mean above counts the eager steps run while
    compile: auto compiles)."""
    steady = measured.get("steady_step_ms")
    return "" if steady is None else f" ({steady:.1f} ms after the first evaluation)"


def paper_row(out: Path, part: str = "paper") -> str:
    """The `raycse bench` row (its step-*.json name in OUTDIR) of the paper part's (or `part`'s: paper-full) fewest-
    trials search's shape and batch, compiled as its trials were; '' before that search has run."""
    path = out / f"{part}.json"
    runs = json.loads(path.read_text())["runs"] if path.is_file() else []
    if not runs:
        return ""
    run = min(runs, key=lambda r: r["sharing"])
    return "step-bert-base-64" + ("" if run["measured"].get("compile_s") else "-eager")


def paper_line(data: dict, bench: dict | None = None) -> str:
    """Each sharing's figures from paper.json (benchmarks/paper_part.py), the dry run's prediction in brackets; and
    the fewest-trials search's step against `bench`, raycse bench's step of the same shape, batch and precision."""
    setting = data["setting"]
    cells = []
    for run in data["runs"]:
        m = run["measured"]
        gpu = ", ".join(f"{m[key] / 1024:.1f} GiB {where}" for key, where in (("gpu_trial_peak_mib", "a trial"),
                                                                               ("gpu_peak_mib", "in all"))
                       if m.get(key) is not None) or "- (no GPU)"
        share = "-" if m.get("checkpoint_share") is None else f"{100 * m['checkpoint_share']:.1f}%"
        sentences = "the whole corpus" if m.get("sentences") is None else f"{m['sentences']:,} sentences"
        cells.append(
            f"{run['sharing']} a GPU: step {_beside(run, 'step_ms', 'ms')}{_steady(m)}, "
            f"evaluation {_beside(run, 'eval_s', 's', 2)}"
            f", checkpoints {_beside(run, 'checkpoint_s', 's')} a trial ({share} of it), best/ "
            f"{_beside(run, 'best_gb', 'GB', 2)}, last/ {_beside(run, 'last_gb', 'GB', 2)}, disk peak "
            f"{_beside(run, 'disk_peak_gb', 'GB', 2)}, tokenising {sentences} "
            f"{_beside(run, 'tokenize_s', 's')}, start-up {_beside(run, 'startup_s', 's')}, wall "
            f"{_beside(run, 'wall_s', 's', 0)}; GPU memory {gpu}; resident memory: driver "
            f"{m.get('driver_peak_rss_mb') or 0:.0f} MB, a trial {m.get('trial_peak_rss_mb') or 0:.0f} MB "
            f"({m.get('trial_peak_uss_mb') or 0:.0f} MB its own)")
    if bench and data["runs"]:
        run = min(data["runs"], key=lambda r: r["sharing"])
        step = run["measured"].get("steady_step_ms") or run["measured"]["step_ms"]
        after = " after the first evaluation" if run["measured"].get("steady_step_ms") else ""
        cells.append(f"{run['sharing']} a GPU{after} against raycse bench's {bench['ms_per_step']:.1f} ms "
                     f"({bench.get('device')}): {step / bench['ms_per_step']:.2f}x (at most 1.15x wanted)")
    return (f"paper ({setting['shape']} shape, random weights, {setting['corpus']}, {setting['steps']} steps a trial; "
            f"measured [the dry run's prediction]): " + (" | ".join(cells) or "no search finished yet"))


def _paper_full():
    """benchmarks/paper_full.py by path (its summary line)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("benchmark_paper_full", Path(_HERE) / "paper_full.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summarize(part: str, out: Path) -> str:
    if part == "paper-full":
        path, row = out / "paper-full.json", out / f"{paper_row(out, part)}.json"
        bench = json.loads(row.read_text()) if row.is_file() else None
        data = json.loads(path.read_text()) if path.is_file() else None
        return _paper_full().full_line(data, bench) if data else "paper-full: no trial finished yet"
    if part == "paper":
        path, row = out / "paper.json", out / f"{paper_row(out)}.json"
        bench = json.loads(row.read_text()) if row.is_file() else None
        return paper_line(json.loads(path.read_text()), bench) if path.is_file() else "paper: no search finished yet"
    if part in ("search", "search-cold", "search-four"):
        summary = search_summary(out / "state" / part)
        if summary is None:
            return f"{part}: no search_summary.json yet (not finished: run the same call again, it resumes)"
        (out / f"{part}.json").write_text(json.dumps(summary, indent=1) + "\n")
        return f"{part}: {search_line(summary)}"
    if part == "sampler":
        runs = []
        for state in sorted((out / "state").glob("sampler-*")):
            summary = search_summary(state)
            if summary is not None:
                name, seed = state.name.removeprefix("sampler-").rsplit("-", 1)
                best = max((t["best_objective"] for t in summary["trials"]
                            if t.get("stage") == "search" and t.get("best_objective") is not None), default=None)
                runs.append({"sampler": name, "seed": int(seed), "best_search_objective": best,
                             "trials": len(summary["trials"]), "time_total_s": summary["timings"].get("time_total_s"),
                             "best_params": (summary.get("winner") or {}).get("params")})
        (out / "sampler.json").write_text(json.dumps({"runs": runs}, indent=1) + "\n")
        cells = []
        for name in sorted({r["sampler"] for r in runs}):
            values = [r["best_search_objective"] for r in runs if r["sampler"] == name
                      and r["best_search_objective"] is not None]
            mean = sum(values) / len(values) if values else float("nan")
            cells.append(f"{name} {mean:.2f} over {len(values)} run(s) ({', '.join(f'{v:.2f}' for v in values)})")
        return "sampler: the search stage's best dev objective: " + ("; ".join(cells) or "no finished run")
    if part == "cached":
        cells = []
        for mode in ("eager", "compiled"):
            path = out / f"cached-{mode}.json"
            if not path.is_file():
                cells.append(f"{mode}: not run")
                continue
            data = json.loads(path.read_text())
            cells.append(f"{mode} ({data['device']}): " + "; ".join(
                f"{r['loss']} {r['time_ratio']:.2f}x time, {r['memory_ratio']:.2f}x memory" for r in data["rows"]))
        return f"cached: cached {_batch(out)} against uncached: " + " | ".join(cells)
    if part == "landscape":
        data = json.loads((out / "landscape.json").read_text())
        s = data.get("summary", {})
        final = s.get("final") or {}
        planned = (data["setting"]["design"]["points"] or 0) + 1
        return (f"landscape: {s.get('runs', 0)} runs of {planned * len(data['setting']['seeds'])} "
                f"({planned} configurations x {len(data['setting']['seeds'])} seeds); untouched "
                f"{data['untouched']['objective']:.2f}; final spread {final.get('spread')} against seed std "
                f"{final.get('seed_std_pooled')}: {final.get('spread_over_seed_std')}x; best "
                f"{(final.get('best') or {}).get('mean')} at {(final.get('best') or {}).get('config')}")
    if part == "step":
        cells = []
        for path in sorted(out.glob("step-*.json"), key=os.path.getmtime):
            data = json.loads(path.read_text())
            name = path.stem.removeprefix("step-")
            if isinstance(data, list):  # benchmarks/concurrent.py: one entry per number of trials
                cells.append(f"{name} " + ", ".join(f"{r['concurrent']}: {r['scaling']:.2f}x" for r in data))
            else:
                cells.append(f"{name} {data['ms_per_step']:.2f} ms")
        return "step (ms a step; concurrent: aggregate x one trial): " + "; ".join(cells)
    if part == "peers":
        return peers_line(out)
    raise SystemExit(f"unknown part {part}")


def peers_line(out: Path) -> str:
    """benchmarks/peers.py's records (peers-SHAPE.json): each shape's training-run and search ratios, recipe / raycse
    (above 1: raycse faster), and both sides' objective."""
    cells = []
    for path in sorted(out.glob("peers-*.json"), key=os.path.getmtime):
        data = json.loads(path.read_text())
        name = data["setting"]["shape"] + (" (random weights)" if data["setting"]["random_weights"] else "")
        cell = [name]
        if "train" in data:
            t, sides = data["train"], data["train"]["sides"]
            ratio, objective = t["ratios"], {side: sides[side]["objective"]["mean"] for side in sides}
            cell.append(f"training run {ratio['wall']:.2f}x on wall clock (steps {ratio['steps']:.2f}x, evaluations "
                        f"{ratio['evaluations']:.2f}x), objective raycse {objective['raycse']:.2f}, recipe "
                        f"{objective['recipe']:.2f}")
        if "search" in data:
            s = data["search"]
            cell.append(f"{len(s['raycse']['trials'])}-trial search {s['ratios']['device_s']:.2f}x on device-seconds")
        cells.append(" ".join(cell[:1]) + ": " + "; ".join(cell[1:]))
    if not cells:
        return "peers: no peers-*.json yet (not finished: run the same call again, it goes on)"
    return "peers (recipe / raycse; above 1: raycse faster): " + " | ".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("rehearsal").add_argument("folder", type=Path)
    variant = sub.add_parser("space")
    variant.add_argument("source", type=Path)
    variant.add_argument("--sampler", default=None)
    variant.add_argument("--test-eval", default=None)
    variant.add_argument("--gpus-per-worker", type=float, default=None)
    variant.add_argument("--output", type=Path, required=True)
    sub.add_parser("check-minilm").add_argument("eval_json", type=Path)
    sub.add_parser("pins")
    row = sub.add_parser("paper-row")
    row.add_argument("out", type=Path)
    row.add_argument("--part", default="paper")
    run = sub.add_parser("supervise")
    run.add_argument("--deadline", type=float, required=True)
    run.add_argument("--log", type=Path, required=True)
    run.add_argument("--kill-when", default=None)
    run.add_argument("command", nargs=argparse.REMAINDER)
    summary = sub.add_parser("summary")
    summary.add_argument("part")
    summary.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.what == "rehearsal":
        rehearsal(args.folder)
    elif args.what == "space":
        space_variant(args.source, args.sampler, args.test_eval, args.output, args.gpus_per_worker)
    elif args.what == "check-minilm":
        return check_minilm(args.eval_json)
    elif args.what == "pins":
        return check_pins()
    elif args.what == "paper-row":
        print(paper_row(args.out, args.part))
    elif args.what == "supervise":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return supervise(args.deadline, args.log, args.kill_when, command)
    elif args.what == "summary":
        line = summarize(args.part, args.out)
        print(line)
        with (args.out / "summary.txt").open("a") as sink:
            sink.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {line}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
