"""The search driver at scale: `raycse search`'s real stack over 64, 256 and 1,024 trials on a simulated cluster.

Everything the driver does is real — the stages (raycse.driver.run), Optuna's TPE in the persistent study behind
Tune's searcher, ASHA, the MLflow callback, the SQLite stores, Tune's snapshots — on a Ray runtime that advertises
fake GPUs (8 GPUs x 4 trials a GPU = 32 slots by default). Only the trials' training is replaced: each trial runs
raycse.bench.simulated_trial, which replays a dev curve (one evaluation every --eval-interval seconds, a Tune
checkpoint with each, the keys of a real evaluation) in a Ray worker that imports no torch. The curve source is
pluggable (`--curve`): a parametric landscape here, a recorded one (benchmarks/landscapes/) where a surrogate file
exists.

    python benchmarks/scale.py                                  # 64, 256 and 1,024 trials; the table and the plot
    python benchmarks/scale.py --trials 1024 --output OUT       # one size (9 minutes on 2 CPU cores)
    python benchmarks/scale.py --trials 1024 --eval-interval 4  # a MiniLM trial's pace, 4 trials sharing an H100
    python benchmarks/scale.py --trials 256 --profile cpu       # + the profile of Tune's loop (cpu or wall)
    python benchmarks/scale.py --tabulate --output OUT          # the table and plot of the runs already in OUT

Each size runs in a process of its own (so that its peak memory and CPU are its own, and Ray starts fresh) and
reports:

  driver CPU s/trial   the driver process's CPU seconds (every thread: Tune's loop, Ray's, MLflow's) in the search
                       stage, per trial; and over the whole command
  ask / tell           Optuna's ask (a Tune suggest) and tell latency, median and p99, and by the study's size
  MLflow               calls per second of the search stage (writes: runs, metrics, params, tags) and their latency
  peak memory          the driver process's peak RSS
  snapshot             the size of Tune's experiment snapshot (experiment state + searcher + callback state)
  driver threads       the driver process's CPU seconds by thread (Tune's loop, the MLflow writer, Ray's threads)
  trial workers        Ray actors Tune requested for trials, reused, and killed while starting (Tune's debug log)
  concurrency          mean trials training at once / slots, from the trials' own clocks, between the first trial's
                       start and the last trial's start (while trials remain to start); `occupied` counts a trial
                       from its start to its last evaluation (waiting in tune.report for the driver included)

and writes OUT/scale.json, OUT/scale.png (log-log) and the projection of the driver's overhead to 10,000 trials
(a power law fitted to the sizes measured).
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
import math  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "search_spaces" / "focal.yaml"
PROJECT_TO = 10_000
WRITES = ("start_run", "end_run", "reopen_run", "log_params", "log_metrics", "log_metric_steps", "set_tags",
          "log_artifact", "log_artifacts", "log_dict", "register_model")


# ---------------------------------------------------------------------------------------------- one size
def tiny_model(directory: Path) -> str:
    """A 2-layer, 32-wide BERT with the packaged MiniLM's tokenizer: the baseline stage scores the untouched model
    and the tokenize stage tokenises the corpus for real, and neither should weigh on a measurement of the driver."""
    if (directory / "config.json").is_file():
        return str(directory)
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from raycse.encoder.loading import resolve_model_path

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def make_curve(name: str, steps: tuple[int, ...], published: dict):
    """The curve source: 'parametric' (a peak near the published point), or a landscape file whose surrogate
    (benchmarks/surrogate.py, where present) gives `curve(params, seed)`."""
    if name == "parametric":
        optimum = {k: v * 0.8 if isinstance(v, float) else v for k, v in published.items()}
        return sibling("simulated_trial").ParametricCurve(steps=steps, optimum=optimum)
    from ray import cloudpickle

    module = sibling("surrogate")
    cloudpickle.register_pickle_by_value(module)  # the workers get the class with the object: no path to set up
    return module.Surrogate.load(name)


def sibling(name: str):
    """A module of benchmarks/ by path, once (this folder is off sys.path: benchmarks/concurrent.py would shadow the
    standard library's `concurrent`)."""
    if name in sys.modules:
        return sys.modules[name]
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(_HERE) / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fake_cluster(gpus: int, slots: int) -> None:
    """A local Ray runtime advertising `gpus` GPUs and a CPU per slot (plus one for the baseline's task), with as
    many logical CPUs as that; nothing stops 32 sleeping workers from sharing two real cores."""
    import ray

    ray.init(num_cpus=slots + 1, num_gpus=gpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=256 * 1024 ** 2,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}})


class ThreadCPU:
    """CPU seconds of this process's threads, sampled every `every_s` (a thread's last figure before it ends is
    kept), summed by name: Python's threads by their names ("MainThread" runs Tune's loop, "raycse-mlflow" the MLflow
    writes), Ray's C++ threads by the names the kernel shows (/proc/self/task/TID/comm)."""

    def __init__(self, every_s: float = 2.0):
        import threading

        self.every_s, self.seen, self.names = every_s, {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="scale-thread-cpu", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def _sample(self) -> None:
        import threading

        import psutil

        me = psutil.Process()
        while True:
            python = {t.native_id: t.name for t in threading.enumerate()}
            for thread in me.threads():
                self.seen[thread.id] = thread.user_time + thread.system_time
                if thread.id not in self.names:
                    try:
                        self.names[thread.id] = python.get(thread.id) or Path(
                            f"/proc/self/task/{thread.id}/comm").read_text().strip()
                    except OSError:
                        self.names[thread.id] = "?"
            if self.stop.wait(self.every_s):
                return

    def by_name(self, at_least_s: float = 0.5) -> dict[str, float]:
        """Seconds by thread name, largest first; names under `at_least_s` summed as "other threads" (Tune and Ray
        start a short-lived thread per trial or per call)."""
        totals: dict[str, float] = {}
        for tid, seconds in self.seen.items():
            name = self.names.get(tid, "?")
            totals[name] = totals.get(name, 0.0) + seconds
        named = {name: seconds for name, seconds in totals.items() if seconds >= at_least_s}
        named["other threads"] = sum(seconds for seconds in totals.values() if seconds < at_least_s)
        return dict(sorted(named.items(), key=lambda kv: -kv[1]))


def concurrency(timeline_dir: Path, slots: int) -> dict:
    """Mean trials training at once / slots, and mean trials occupying a slot / slots, over [first start, last
    start]: the window in which every slot could have been busy."""
    trials = [json.loads(p.read_text()) for p in timeline_dir.glob("*.json")]
    if not trials:
        return {"training": 0.0, "occupied": 0.0, "window_s": 0.0, "trials": 0}
    begin, end = min(t["start"] for t in trials), max(t["start"] for t in trials)
    if end <= begin:
        return {"training": 0.0, "occupied": 0.0, "window_s": 0.0, "trials": len(trials)}

    def covered(intervals) -> float:
        return sum(max(0.0, min(b, end) - max(a, begin)) for a, b in intervals)

    training = sum(covered(t["training"]) for t in trials)
    occupied = sum(covered([(t["start"], t["training"][-1][1])]) for t in trials if t["training"])
    window = end - begin
    # a reused worker's wait between two trials: its previous trial's last evaluation to its next trial's first
    # (the driver's turnaround: the result, the stop, the ask, the reset), apart from starting new workers
    gaps, by_worker = [], {}
    for t in sorted((t for t in trials if t["training"] and "pid" in t), key=lambda t: t["start"]):
        previous = by_worker.get(t["pid"])
        if previous is not None:
            gaps.append(t["training"][0][0] - previous["training"][-1][1])
        by_worker[t["pid"]] = t
    gaps.sort()
    return {"training": training / (window * slots), "occupied": occupied / (window * slots), "window_s": window,
            "trials": len(trials), "workers": len(by_worker),
            "turnaround_median_s": gaps[len(gaps) // 2] if gaps else None,
            "turnaround_p90_s": gaps[int(len(gaps) * 0.9)] if gaps else None}


def snapshot_bytes(experiment_dir: Path) -> dict:
    """The latest experiment snapshot's files: Tune's experiment state, the searcher's and the callbacks' state."""
    sizes = {}
    for pattern, key in (("experiment_state-*.json", "experiment_state"), ("search*-state-*.pkl", "searcher"),
                         ("callback-states-*.pkl", "callbacks")):
        files = sorted(experiment_dir.glob(pattern), key=lambda p: p.stat().st_mtime)
        sizes[key] = files[-1].stat().st_size if files else 0
    sizes["total"] = sum(sizes.values())
    return sizes


def ray_processes_cpu() -> dict:
    """CPU seconds of this Ray runtime's own processes (GCS, raylet) and of its workers (the simulated trials)."""
    import psutil
    import ray

    node = ray._private.worker._global_node  # the runtime this process started (private: Ray 2.60)
    head, workers = 0.0, 0.0
    for infos in node.all_processes.values():
        for info in infos:
            try:
                proc = psutil.Process(info.process.pid)
                times = proc.cpu_times()
                head += times.user + times.system
                if "raylet" in proc.name():
                    for child in proc.children(recursive=True):
                        child_times = child.cpu_times()
                        workers += child_times.user + child_times.system
            except psutil.Error:
                continue
    return {"ray_head_cpu_s": head, "workers_cpu_s": workers}


def run_one(args) -> dict:
    """One size, in this process: the search, then its figures (OUT/result.json)."""
    import dataclasses as dc

    from raycse.driver.run import run_stages
    from raycse.driver.state import BenchmarkHook, SearchOptions
    from raycse.records import phase_key
    from raycse.settings.space import load_space
    from raycse.tracking.latency import LATENCIES

    SimulatedTrials = sibling("simulated_trial").SimulatedTrials
    WorkerRequests = sibling("trial_workers").WorkerRequests
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)  # the report page is written to the working directory
    n, slots = args.one, args.gpus * args.trials_per_gpu
    eval_steps = 125
    space = load_space(SPACE)
    # the whole bundled corpus over as many epochs as the run needs: validation refuses a run whose data ends before
    # its first evaluation, and max_steps ends it where the stand-in's curve does
    base = dc.replace(space.base, model=tiny_model(out / "tiny-bert"), max_steps=args.evals * eval_steps,
                      eval_steps=eval_steps, epochs=args.evals * eval_steps)
    space = dc.replace(space, experiment=f"scale-{n}", num_samples=n, test_eval="none", confirm=None, base=base,
                       resources=dc.replace(space.resources, workers=1, cpus_per_worker=1,
                                            gpus_per_worker=1 / args.trials_per_gpu))
    steps = tuple(range(eval_steps, args.evals * eval_steps + 1, eval_steps))
    timeline = out / "timeline"
    timeline.mkdir(exist_ok=True)
    stand_in = SimulatedTrials(curve=make_curve(args.curve, steps, space.published_sampled() or {}),
                               eval_interval_s=args.eval_interval, timeline_dir=str(timeline))
    tracking_uri = args.tracking_uri or f"sqlite:///{out / 'mlflow.db'}"
    options = SearchOptions(tracking_uri=tracking_uri, storage_path=str(out / "ray"), budget="full", confirm=False,
                            optuna_storage=args.optuna_storage or f"sqlite:///{out / 'optuna.db'}",
                            benchmark=BenchmarkHook(trial_stand_in=stand_in))
    fake_cluster(args.gpus, slots)
    profiler = None
    if args.profile:
        import cProfile

        # the main thread (Tune's loop): its CPU, or its wall clock (where it waits)
        profiler = cProfile.Profile(time.thread_time if args.profile == "cpu" else time.perf_counter)
        profiler.enable()
    started = time.perf_counter()
    with WorkerRequests() as workers, ThreadCPU() as threads:
        state = run_stages(space, options)
    wall = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
        write_profile(profiler, out / "profile.txt")
    processes = ray_processes_cpu()

    searched = state.searched or []
    search_wall = state.clock.seconds.get(phase_key("search"), 0.0)
    search_cpu = state.clock.cpu_seconds.get(phase_key("search"), 0.0)
    latencies = LATENCIES.snapshot()
    mlflow = {k[len("mlflow."):]: v for k, v in latencies.items() if k.startswith("mlflow.")}
    writes = [v for k, v in mlflow.items() if k in WRITES]
    write_count = sum(v["count"] for v in writes)
    result = {
        "trials": n, "slots": slots, "eval_interval_s": args.eval_interval, "evals_per_trial": args.evals,
        "wall_s": wall, "search_wall_s": search_wall, "search_cpu_s": search_cpu,
        "driver_cpu_s": sum(state.clock.cpu_seconds.values()),
        "phases_s": state.clock.seconds, "phases_cpu_s": state.clock.cpu_seconds,
        "search_cpu_s_per_trial": search_cpu / n, "driver_cpu_s_per_trial": sum(state.clock.cpu_seconds.values()) / n,
        "evaluations": sum(r.steps // eval_steps for r in searched),
        "statuses": {s: sum(r.status == s for r in searched) for s in sorted({r.status for r in searched})},
        "latencies": latencies,
        "mlflow_writes": write_count, "mlflow_writes_per_s": write_count / search_wall if search_wall else 0.0,
        "mlflow_write_median_s": weighted(writes, "median_s"), "mlflow_write_p99_s": max_of(writes, "p99_s"),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "snapshot_bytes": snapshot_bytes(Path(state.search_path)),
        "concurrency": concurrency(timeline, slots), "trial_workers": workers.counts,
        "driver_threads_cpu_s": threads.by_name(),
        "load_average": os.getloadavg(), **processes,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def weighted(kinds: list[dict], key: str) -> float:
    """A count-weighted mean of the kinds' `key` (the median write latency across write calls, roughly)."""
    total = sum(k["count"] for k in kinds)
    return sum(k[key] * k["count"] for k in kinds) / total if total else 0.0


def max_of(kinds: list[dict], key: str) -> float:
    return max((k[key] for k in kinds if k["count"]), default=0.0)


def write_profile(profiler, path: Path) -> None:
    import io
    import pstats

    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("cumulative")
    stats.print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    path.write_text(text.getvalue())


# ---------------------------------------------------------------------------------------------- all sizes
def fit_power_law(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(a, b) of y = a x^b by least squares on logs; None with fewer than two positive points."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mx) ** 2 for p in points)
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0
    return math.exp(my - b * mx), b


def last_bucket(result: dict, call: str) -> dict:
    """The ask or tell latency of the largest study-size bucket of a run (the study at its biggest)."""
    buckets = {int(k.split("/")[1]): v for k, v in result["latencies"].items() if k.startswith(f"searcher.{call}/")}
    return buckets[max(buckets)] if buckets else {"median_s": 0.0, "p99_s": 0.0}


def table(results: list[dict]) -> str:
    head = ("| trials | slots | wall s | driver CPU s/trial (search stage; whole command) | ask median / p99 ms "
            "(all; last study-size bucket) | tell median / p99 ms | MLflow writes/s; write median / p99 ms | "
            "driver peak MiB | snapshot KiB | concurrency: training (occupied) / slots | a reused worker's wait "
            "between trials, median / p90 s |")
    rows = [head, "|" + "---|" * 11]
    for r in results:
        ask, tell = r["latencies"].get("searcher.ask", {}), r["latencies"].get("searcher.tell", {})
        ask_last, tell_last = last_bucket(r, "ask"), last_bucket(r, "tell")
        ms = 1000
        rows.append(
            f"| {r['trials']} | {r['slots']} | {r['wall_s']:.0f} | {r['search_cpu_s_per_trial']:.3f}; "
            f"{r['driver_cpu_s_per_trial']:.3f} | {ask.get('median_s', 0) * ms:.1f} / {ask.get('p99_s', 0) * ms:.1f}; "
            f"{ask_last['median_s'] * ms:.1f} / {ask_last['p99_s'] * ms:.1f} | "
            f"{tell.get('median_s', 0) * ms:.1f} / {tell.get('p99_s', 0) * ms:.1f}; "
            f"{tell_last['median_s'] * ms:.1f} / {tell_last['p99_s'] * ms:.1f} | "
            f"{r['mlflow_writes_per_s']:.1f}; {r['mlflow_write_median_s'] * ms:.1f} / "
            f"{r['mlflow_write_p99_s'] * ms:.1f} | {r['peak_rss_mib']:.0f} | "
            f"{r['snapshot_bytes']['total'] / 1024:.0f} | {r['concurrency']['training']:.0%} "
            f"({r['concurrency']['occupied']:.0%}) | {seconds(r['concurrency'].get('turnaround_median_s'))} / "
            f"{seconds(r['concurrency'].get('turnaround_p90_s'))} |")
    return "\n".join(rows)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def projection(results: list[dict]) -> dict:
    """The driver's search-stage CPU per trial, its ask latency and the snapshot, fitted as power laws of the
    number of trials and extrapolated to PROJECT_TO trials."""
    xs = [r["trials"] for r in results]
    projected = {}
    for name, ys in (("search_cpu_s_per_trial", [r["search_cpu_s_per_trial"] for r in results]),
                     ("ask_median_s_last_bucket", [last_bucket(r, "ask")["median_s"] for r in results]),
                     ("snapshot_bytes", [r["snapshot_bytes"]["total"] for r in results])):
        fit = fit_power_law(xs, ys)
        if fit:
            a, b = fit
            projected[name] = {"a": a, "exponent": b, f"at_{PROJECT_TO}": a * PROJECT_TO ** b}
    cpu = projected.get("search_cpu_s_per_trial")
    if cpu:
        cpu["total_hours_at_" + str(PROJECT_TO)] = cpu[f"at_{PROJECT_TO}"] * PROJECT_TO / 3600
    return projected


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    xs = [r["trials"] for r in results]
    series = {
        "driver CPU s / trial (search stage)": [r["search_cpu_s_per_trial"] for r in results],
        "ask p99 s (largest study bucket)": [last_bucket(r, "ask")["p99_s"] for r in results],
        "MLflow write p99 s": [r["mlflow_write_p99_s"] for r in results],
        "snapshot MiB": [r["snapshot_bytes"]["total"] / 2 ** 20 for r in results],
        "driver peak GiB": [r["peak_rss_mib"] / 1024 for r in results],
    }
    for label, ys in series.items():
        left.plot(xs, ys, marker="o", label=label)
    left.set(xscale="log", yscale="log", xlabel="trials in the search", title="Driver costs against the search's size")
    left.legend(fontsize=7)
    for r in results:
        for call, style in (("ask", "-"), ("tell", "--")):
            buckets = sorted((int(k.split("/")[1]), v["median_s"]) for k, v in r["latencies"].items()
                             if k.startswith(f"searcher.{call}/"))
            if buckets:
                right.plot([b for b, _ in buckets], [s * 1000 for _, s in buckets], style, marker=".",
                           label=f"{call} median, {r['trials']}-trial search")
    right.set(xscale="log", yscale="log", xlabel="trials in the study (bucket: fewer than)", ylabel="ms",
              title="Optuna ask / tell latency as the study grows")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256, 1024], help="search sizes to run")
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs advertised by the local Ray runtime")
    parser.add_argument("--trials-per-gpu", type=int, default=4, help="trials sharing a GPU (gpus_per_worker 1/N)")
    parser.add_argument("--eval-interval", type=float, default=1.0, help="seconds between a trial's evaluations")
    parser.add_argument("--evals", type=int, default=8, help="evaluations of a trial that ASHA does not stop")
    parser.add_argument("--curve", default="parametric", help="'parametric' or a landscape file (a surrogate's)")
    parser.add_argument("--tracking-uri", help="MLflow (default: SQLite in the output directory)")
    parser.add_argument("--optuna-storage", help="Optuna's storage (default: SQLite in the output directory)")
    parser.add_argument("--output", default="scale-results", help="a directory: one folder per size, the table")
    parser.add_argument("--profile", choices=("cpu", "wall"),
                        help="profile the driver's main thread (Tune's loop) into OUT/N-trials/profile.txt")
    parser.add_argument("--tabulate", action="store_true",
                        help="run nothing: the table, plot and projection of the runs already in --output")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one size in this process
    args = parser.parse_args(argv)
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                        ("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0"), ("RAY_USAGE_STATS_ENABLED", "0")):
        os.environ.setdefault(name, value)
    if args.one:
        run_one(args)
        return 0

    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    if args.tabulate:
        results = sorted((json.loads(p.read_text()) for p in out.glob("*-trials/result.json")),
                         key=lambda r: r["trials"])
    for n in [] if args.tabulate else args.trials:
        folder = out / f"{n}-trials"
        if (folder / "ray").exists():
            raise SystemExit(f"scale.py: {folder} holds an earlier run: remove it or pass another --output")
        command = [sys.executable, os.path.abspath(__file__), "--one", str(n), "--output", str(folder),
                   "--gpus", str(args.gpus), "--trials-per-gpu", str(args.trials_per_gpu),
                   "--eval-interval", str(args.eval_interval), "--evals", str(args.evals), "--curve", args.curve,
                   *(["--tracking-uri", args.tracking_uri] if args.tracking_uri else []),
                   *(["--optuna-storage", args.optuna_storage] if args.optuna_storage else []),
                   *(["--profile", args.profile] if args.profile else [])]
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with (folder / "search.log").open("w") as log:
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        if code != 0:
            raise SystemExit(f"scale.py: the {n}-trial run failed ({code}): see {folder / 'search.log'}")
        result = json.loads((folder / "result.json").read_text())
        results.append(result)
        workers = result["trial_workers"]
        print(f"{n} trials: {time.perf_counter() - started:.0f} s (load average {result['load_average'][0]:.1f}); "
              f"trial workers requested {workers['requested']}, reused {workers['reused']}, killed while starting "
              f"{workers['killed_while_starting']}", flush=True)
        threads = list(result["driver_threads_cpu_s"].items())[:4]
        print("  driver CPU s by thread: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in threads),
              flush=True)
    summary = {"results": results, "projection": projection(results),
               "settings": {k: v for k, v in vars(args).items() if k != "one"}}
    (out / "scale.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(results, out / "scale.png")
    print(table(results))
    for name, fit in summary["projection"].items():
        print(f"{name}: ~ N^{fit['exponent']:.2f}; at {PROJECT_TO} trials: {fit[f'at_{PROJECT_TO}']:.4g}"
              + (f" ({fit['total_hours_at_' + str(PROJECT_TO)]:.2f} CPU hours in all)"
                 if "total_hours_at_" + str(PROJECT_TO) in fit else ""))
    print(f"wrote {out / 'scale.json'} and {out / 'scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
