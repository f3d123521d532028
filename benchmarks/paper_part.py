"""The GPU suite's `paper` part: the seed papers' own setting at its real scale, timed, with the dry run's prediction
beside every figure.

    python benchmarks/paper_part.py OUTDIR --deadline S                 # on the GPU: BERT-base's shape, 1, 2, 4 a GPU
    python benchmarks/paper_part.py OUTDIR --deadline S --rehearse DIR  # on a CPU: DIR/tiny-bert, 2 on the fake GPU
    python benchmarks/paper_part.py OUTDIR --plan                       # the GPU searches' predictions, nothing run

What runs: `raycse search --budget paper --no-confirm` over search_spaces/focal.yaml, its paper budget (batch 64,
max_len 32, STS-B dev every 125 steps; tau, m and lr sampled as the file's search samples them) with two stand-ins,
so that no download is needed: BERT-base's shape with random weights (the packaged MiniLM's tokenizer, which is
bert-base-uncased's vocabulary) and `corpus: synthetic-wiki1m`. Each trial trains 2,000 of the paper's 15,625 steps.
The search runs once for each number of trials sharing the GPU (`num_samples` = k, `gpus_per_worker` = 1/k; FIFO, so
that no trial stops early, and no test tasks). The first search reads the whole million sentences (the tokenisation
and memory figures); the later ones read the 128,000 that 2,000 steps of 64 train on (the step does not depend on the
corpus, and the window is short).

Measured, for each search: from its search_summary.json, a trial's step (training seconds over steps), an evaluation
(evaluation seconds over evaluations), a trial's start-up, compile and checkpoint seconds and their share of the
trial, the tokenisation and the wall clock; sampled every second while it runs (SAMPLE_S): the driver's and each
trial process's peak resident memory (/proc's VmHWM) and unique memory (USS: the pages no other process shares; the
token ids come from Ray's shared object store, so a trial's own memory grows by far less than their size), the GPU's
memory (nvidia-smi, per process and in all: the CUDA context and the allocator's cache included, so an upper bound of
torch's max_memory_allocated), the largest best/ and last/ a trial wrote, and the peak disk its checkpoints held
(ray_results/ and the trials' temporary folders). Predicted by `raycse.plan` (`raycse search --dry-run --budget paper
--gpus 1`), each with where its figure came from: on the GPU from recorded figures; in the rehearsal, whose tiny
shape has none, from the step this run measured (named as such).

A search cut off by the deadline leaves no figure and runs again from its start in the next call; a sharing already
measured is never run again; none starts when its predicted wall clock (x PREDICTION_MARGIN, and a minute) exceeds
the time left.
Writes OUTDIR/paper.json (with each search's first trial's own seconds by term, measured and forecast: `trial`);
`python benchmarks/gpu_suite.py summary paper OUTDIR` prints its one line. benchmarks/paper_full.py runs the same
machinery (`Part`, under another name and settings) for one trial of the papers' full length.
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package: take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

SPACE = Path(_HERE).parent / "search_spaces" / "focal.yaml"
# The GPU's setting, and the rehearsal's: the suite's rehearsal is the test suite's slowest test, so on the CPU the
# part is one search of about 35 s (the rehearsal's 2-layer BERT, 6 steps of 8 sentences, 2,048 sentences read, 2
# trials on the fake GPU; the untouched model's scoring holds one trial's share of it at first).
PAPER = {"shape": "bert-base", "steps": 2000, "sharing": [1, 2, 4], "cpus_per_trial": 2, "first_sentences": None}
REHEARSAL = {"shape": "tiny", "steps": 6, "eval_steps": 2, "batch_size": 8, "sharing": [2], "cpus_per_trial": 1,
             "first_sentences": 2048}
SAMPLE_S = 1.0
PAPER_BATCH = 64  # focal.yaml's paper budget's batch
PREDICTION_MARGIN = 1.0  # a search starts only when its predicted wall clock (and a minute) fits: the three
# searches of 2026-11-26 on an H100 took 0.81-0.97 of their prediction (benchmarks/results/paper-scale/2026-11-26-h100)


def load_gpu_suite():
    """benchmarks/gpu_suite.py by path (its supervise: a command in its own process group, killed at a deadline)."""
    spec = importlib.util.spec_from_file_location("benchmark_gpu_suite", Path(_HERE) / "gpu_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------- the setting
def random_model(folder: Path, shape: str, weights: bool = True) -> Path:
    """A random-weight BERT of raycse bench's `shape` (raycse/bench/synthetic.py) with the packaged MiniLM's
    tokenizer, in `folder` (made once); without `weights`, its configuration alone (what a plan reads)."""
    if not (folder / ("model.safetensors" if weights else "config.json")).is_file():
        import torch
        from transformers import BertModel

        from raycse.bench.synthetic import bench_tokenizer, bert_config

        torch.manual_seed(0)
        tokenizer = bench_tokenizer()
        config = bert_config(shape, len(tokenizer), "sdpa")
        (BertModel(config) if weights else config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def space_file(path: Path, model: Path, sharing: int, setting: dict, whole: bool,
               objective: str | None) -> tuple[Path, int | None]:
    """(focal.yaml with its paper budget on the stand-ins: `sharing` trials of setting's steps, 1/sharing GPU each;
    the sentences they read): setting's first_sentences (None: the whole corpus) when `whole`, else the sentences a
    trial trains on."""
    import yaml

    space = yaml.safe_load(SPACE.read_text())
    budget = space["paper_budget"]
    batch = setting.get("batch_size", budget["train"]["batch_size"])
    sentences = setting["first_sentences"] if whole else setting["steps"] * batch
    budget.update(model=str(model.resolve()), corpus="synthetic-wiki1m", num_samples=sharing, test_eval="none",
                  scheduler={"name": "fifo"}, resources={"workers": 1, "gpus_per_worker": 1 / sharing,
                                                         "cpus_per_worker": setting["cpus_per_trial"]})
    budget["train"].update(max_steps=setting["steps"], **{k: setting[k] for k in ("eval_steps", "batch_size")
                                                          if k in setting})
    if sentences is not None:
        budget["train"]["max_sentences"] = sentences
    if objective is not None:
        budget["objective"] = objective
    path.write_text(f"# benchmarks/paper_part.py: {SPACE.name}'s paper budget on the stand-ins, {sharing} a GPU\n"
                    + yaml.safe_dump(space, sort_keys=False))
    return path, sentences


# ------------------------------------------------------------------------------------------------------ sampling
def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as source:
            return source.read().decode(errors="replace")
    except OSError:
        return None


def _kb(text: str | None, *fields: str) -> float:
    """The sum of /proc's `Field: N kB` lines named, in MB."""
    total = 0
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        if name in fields:
            total += int(value.split()[0])
    return total / 1024


def descendants(root: int) -> list[int]:
    """`root` and every process below it (the driver, Ray's services and its workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        stat = _read(f"/proc/{entry}/stat") if entry.isdigit() else None
        if stat:
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def nvidia_smi(*query: str) -> list[list[str]] | None:
    """nvidia-smi's CSV rows for the query, or None without one (the CPU rehearsal)."""
    try:
        done = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def _size(path: str) -> int:
    """A file's bytes; 0 for one deleted meanwhile (a trial's checkpoints come and go) or not a plain file."""
    try:
        return os.stat(path, follow_symlinks=False).st_size if os.path.isfile(path) else 0
    except OSError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class Watch:
    """What a search holds while it runs, sampled every SAMPLE_S seconds from the driver's process id down: each
    process's peak resident and unique memory, the GPU's memory, and the disk its checkpoints take."""

    def __init__(self, state: Path):
        self.state, self.started, self.last = state, time.time(), 0.0
        self.driver: int | None = None  # the search's own process: the first one watched
        self.processes: dict[int, dict] = {}  # pid -> title, peak_rss_mb, peak_uss_mb, gpu_mib
        used = nvidia_smi("--query-gpu=memory.used")
        self.has_gpu = bool(used)
        self.gpu_start_mib = float(used[0][0]) if used else None
        self.gpu_peak_mib = None
        self.largest = {"best": 0, "last": 0}  # bytes of the largest best/ and last/ seen
        self.disk_peak = 0

    def __call__(self, driver: int) -> None:
        if self.driver is None:
            self.driver = driver
        if time.monotonic() - self.last < SAMPLE_S:
            return
        self.last = time.monotonic()
        for pid in descendants(driver):
            title = (_read(f"/proc/{pid}/cmdline") or "").replace("\0", " ").strip()
            status, rollup = _read(f"/proc/{pid}/status"), _read(f"/proc/{pid}/smaps_rollup")
            if not title or status is None:
                continue
            seen = self.processes.setdefault(pid, {"title": title, "peak_rss_mb": 0.0, "peak_uss_mb": 0.0})
            if title.startswith("ray::") and title != "ray::IDLE":
                seen["title"] = title  # what a Ray worker last ran
            seen["peak_rss_mb"] = max(seen["peak_rss_mb"], _kb(status, "VmHWM"))
            seen["peak_uss_mb"] = max(seen["peak_uss_mb"], _kb(rollup, "Private_Clean", "Private_Dirty"))
        self._gpu()
        self._disk()

    def _gpu(self) -> None:
        for pid, mib in nvidia_smi("--query-compute-apps=pid,used_memory") or []:
            if pid.isdigit() and int(pid) in self.processes and mib.isdigit():
                seen = self.processes[int(pid)]
                seen["gpu_mib"] = max(seen.get("gpu_mib", 0.0), float(mib))
        used = nvidia_smi("--query-gpu=memory.used")
        if used:
            self.gpu_peak_mib = max(self.gpu_peak_mib or 0.0, float(used[0][0]) - self.gpu_start_mib)

    def _disk(self) -> None:
        """ray_results/ (Tune's checkpoints) and the trials' temporary folders made since the search started."""
        temporary = [p for p in Path(tempfile.gettempdir()).glob("raycse-trial-*")
                     if _mtime(p) >= self.started - 1]
        total = 0
        for top in [self.state / "ray_results", *temporary]:
            for folder, _, files in os.walk(top):
                size = sum(_size(os.path.join(folder, f)) for f in files)
                total += size
                name = os.path.basename(folder)
                if name in self.largest:  # best/ and last/ hold files only
                    self.largest[name] = max(self.largest[name], size)
        self.disk_peak = max(self.disk_peak, total)

    def trials(self) -> list[dict]:
        """The processes that ran a trial: Tune's function trainable (one worker: the trial trains in it)."""
        return [p for p in self.processes.values() if "ImplicitFunc" in p["title"]]


# -------------------------------------------------------------------------------------- predicted and measured
def _figure(value: float | None, source: str) -> dict:
    return {"value": value, "source": source}


def predict(space: Path, step_ms: float | None = None, step_source: str | None = None) -> dict | None:
    """The dry run's figures for this search on one GPU (`raycse.plan`, as `raycse search --dry-run --budget paper
    --gpus 1` prints them), each with its source; None when it refuses (no recorded GPU step for the shape and none
    given)."""
    import raycse
    from raycse.errors import ConfigError
    from raycse.planning.cost_model import BEST_COPIES, LAST_COPIES

    try:
        run = raycse.plan(str(space), step_ms=step_ms, gpus=1, budget="paper", confirm=False)
    except ConfigError:
        return None
    rates, cost = run.rates, run.cost
    trial = next(stage for stage in cost.stages if stage.name == "search").blocks[0].most[0]
    work = trial.steps * rates.step.value + trial.evals * rates.dev_eval.value
    model = "the cost model (raycse/planning/cost_model.py)"
    weights = run.weight_bytes or 0
    figures = {"wall_s": _figure(cost.wall_seconds(), model),
               "step_ms": _figure(1000 * rates.step.value, step_source or rates.step.source),
               "checkpoint_s": _figure(trial.checkpoint_seconds(rates, work), f"{model}: the cadence's share of "
                                       f"{trial.evals} evaluations at {rates.checkpoint.value:.2f} s a write"),
               "best_gb": _figure(weights * BEST_COPIES / 1e9, "the model's float32 weights, counted"),
               "last_gb": _figure(weights * LAST_COPIES / 1e9, "the weights and Adam's two moments, counted"),
               "disk_peak_gb": _figure((run.disk_bytes or 0) / 1e9, model)}
    for name, rate in (("setup_s", rates.setup), ("tokenize_s", rates.tokenize), ("startup_s", rates.cold_start),
                       ("compile_s", rates.compile), ("eval_s", rates.dev_eval)):
        figures[name] = _figure(rate.value, rate.source)
    figures["plan"] = {"trials": run.trials, "steps": trial.steps, "evals": trial.evals, "at_once": run.concurrent,
                       "gpu_hours": run.gpu_hours}
    figures["trial"] = trial_terms(trial, rates)
    return figures


def trial_terms(trial, rates) -> dict:
    """The cost model's seconds of one trial (a slot's first: a new worker's start-up) by term, and in all."""
    work = trial.steps * rates.step.value + trial.evals * rates.dev_eval.value
    return {"wall_s": trial.seconds(rates, cold=True), "startup_s": rates.cold_start.value,
            "compile_s": rates.compile.value if trial.steps else 0.0, "train_s": trial.steps * rates.step.value,
            "eval_s": trial.evals * rates.dev_eval.value, "checkpoint_s": trial.checkpoint_seconds(rates, work)}


def measured_trial(trial: dict) -> dict:
    """One search trial's own seconds by term (its timings), and in all: from its start (a new worker's creation)
    to its last report."""
    timings = trial.get("timings") or {}
    started, ended = trial.get("started_at"), trial.get("ended_at")
    return {"wall_s": ended - started if started and ended else None,
            **{key: timings.get(f"trial_{key}") for key in ("startup_s", "compile_s", "train_s", "eval_s",
                                                             "checkpoint_s")}}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def measure(summary: dict, watch: Watch, sentences: int | None, log_text: str = "", batch_size: int = 64) -> dict:
    """A search's figures: from its search_summary.json, its log's progress lines, and what `watch` sampled."""
    timings = summary["timings"]
    trials = [t for t in summary["trials"] if t.get("stage") == "search"]

    def spent(key: str) -> list[float]:
        return [t["timings"][key] for t in trials]

    steps, evals = sum(t["steps"] for t in trials), sum(len(t.get("curve") or []) for t in trials)
    kinds = ("trial_startup_s", "trial_compile_s", "trial_train_s", "trial_eval_s", "trial_checkpoint_s")
    whole = sum(sum(spent(k)) for k in kinds)
    running = watch.trials()
    gpu = [p["gpu_mib"] for p in running if "gpu_mib" in p]
    return {
        "trials": len(trials), "steps": [t["steps"] for t in trials], "evals": evals, "sentences": sentences,
        "wall_s": timings.get("time_total_s"), "setup_s": timings.get("time_setup_s"),
        "tokenize_s": timings.get("time_tokenize_s"), "startup_s": _mean(spent("trial_startup_s")),
        "compile_s": _mean(spent("trial_compile_s")),
        "step_ms": 1000 * sum(spent("trial_train_s")) / steps if steps else None,
        "steady_step_ms": steady_step_ms(log_text, batch_size),
        "eval_s": sum(spent("trial_eval_s")) / evals if evals else None,
        "checkpoint_s": _mean(spent("trial_checkpoint_s")),
        "checkpoint_share": sum(spent("trial_checkpoint_s")) / whole if whole else None,
        "best_gb": watch.largest["best"] / 1e9, "last_gb": watch.largest["last"] / 1e9,
        "disk_peak_gb": watch.disk_peak / 1e9,
        "gpu_trial_peak_mib": max(gpu) if gpu else None, "gpu_peak_mib": watch.gpu_peak_mib,
        "gpu_how": "nvidia-smi: a process's memory, the CUDA context and torch's cache included" if watch.has_gpu
        else "no nvidia-smi (no GPU here)",
        "driver_peak_rss_mb": watch.processes.get(watch.driver, {}).get("peak_rss_mb"),
        "trial_peak_rss_mb": max((p["peak_rss_mb"] for p in running), default=None),
        "trial_peak_uss_mb": max((p["peak_uss_mb"] for p in running), default=None),
        "trial_processes": len(running),
        "largest_processes": sorted(watch.processes.values(), key=lambda p: -p["peak_rss_mb"])[:8],
        "trial": measured_trial(trials[0]) if trials else None,  # the first search trial's own seconds
    }


def steady_step_ms(log_text: str, batch_size: int) -> float | None:
    """A trial's step after its first evaluation (compiled by then, when it compiles), its trials' mean, from the
    progress lines of one search's log: each evaluation's line gives the sentences a second over the training so far,
    so the training seconds at each evaluation are batch x step / rate, and their differences the later steps' time.
    The mean step (`step_ms`) includes the first evaluation's steps: eager ones while compile: auto compiles."""
    seconds: dict[str, list[tuple[int, float]]] = {}
    for line in log_text.splitlines():
        found = STEADY_LINE.match(line)
        if found and float(found["rate"]) > 0:
            step = int(found["step"])
            seconds.setdefault(found["trial"], []).append((step, batch_size * step / float(found["rate"])))
    per_trial = [1000 * (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
                 for points in seconds.values() if len(points) > 1 and points[-1][0] > points[0][0]]
    return _mean(per_trial)


STEADY_LINE = re.compile(r"trial (?P<trial>\w+)\s+search\s.*\bstep\s+(?P<step>\d+)\s.*?(?P<rate>[\d.]+) sentences/s$")


# ------------------------------------------------------------------------------------------------------- the runs
class Part:
    """The part's searches, one for each sharing, into OUTDIR/NAME.json; a deadline in seconds from its start.
    `name`, `gpu_setting`, `rehearsal_setting`: the part's (benchmarks/paper_full.py's full-length trial is another)."""

    name, gpu_setting, rehearsal_setting = "paper", PAPER, REHEARSAL

    def __init__(self, out: Path, deadline: float, rehearsal: Path | None, weights: bool = True):
        self.out, self.started, self.deadline = out, time.monotonic(), deadline
        self.rehearsing = rehearsal is not None
        self.setting = self.rehearsal_setting if rehearsal else self.gpu_setting
        self.record = out / f"{self.name}.json"
        self.log = out / f"{self.name}.log"
        if rehearsal:  # the suite's rehearsal model and dev file (gpu_suite.py rehearsal), shared with its search
            self.model, self.objective = rehearsal / "tiny-bert", str((rehearsal / "small-dev.tsv").resolve())
        else:
            self.model = random_model(out / "state" / "paper-model", self.setting["shape"], weights)
            self.objective = None
        self.supervise = load_gpu_suite().supervise

    def left(self) -> float:
        return self.deadline - (time.monotonic() - self.started)

    def note(self, text: str) -> None:
        with self.log.open("a") as sink:
            sink.write(f"{self.name}: {text}\n")

    def data(self) -> dict:
        if self.record.is_file():
            return json.loads(self.record.read_text())
        return {"setting": {**self.setting, "space": str(SPACE), "model": str(self.model), "corpus": "synthetic-wiki1m",
                            "date": time.strftime("%Y-%m-%d")}, "runs": []}

    def run_all(self) -> int:
        done = {run["sharing"] for run in self.data()["runs"]}
        for number, sharing in enumerate(self.setting["sharing"]):
            if sharing in done:
                continue
            rc = self.run(sharing, whole=number == 0)
            if rc:
                return rc
        return 0

    def space(self, sharing: int, whole: bool) -> tuple[Path, int | None]:
        """(the space file of `sharing` trials a GPU, the sentences it reads): the whole corpus for the first
        search, the sentences a trial trains on for the others."""
        (self.out / "state").mkdir(parents=True, exist_ok=True)
        return space_file(self.out / "state" / f"{self.name}-{sharing}.yaml", self.model, sharing, self.setting,
                          whole, self.objective)

    def plan(self) -> int:
        """Each search's predicted figures (--plan), nothing run."""
        total = 0.0
        for number, sharing in enumerate(self.setting["sharing"]):
            figures = predict(self.space(sharing, whole=number == 0)[0])
            total += figures["wall_s"]["value"]
            print(f"{sharing} a GPU: " + ", ".join(f"{name} {figure['value']:.2f}" for name, figure in figures.items()
                                                   if "value" in figure) + f"; step: {figures['step_ms']['source']}")
            print("  its first trial: " + ", ".join(f"{name} {value:.1f}" for name, value in figures["trial"].items())
                  + f"; the search needs {self.needs(figures):.0f} s left to start")
        print(f"the part's searches: {total:.0f} s predicted")
        return 0

    def needs(self, predicted: dict) -> float:
        """The seconds a search must have left to start: its predicted wall clock x PREDICTION_MARGIN, and a minute."""
        return predicted["wall_s"]["value"] * PREDICTION_MARGIN + 60

    def run(self, sharing: int, whole: bool) -> int:
        """One search, `sharing` trials on the GPU; its figures and predictions appended to NAME.json."""
        state = self.out / "state" / f"{self.name}-{sharing}"
        shutil.rmtree(state, ignore_errors=True)  # a search cut off runs again from its start
        state.mkdir(parents=True)
        space, sentences = self.space(sharing, whole)
        predicted = None if self.rehearsing else predict(space)  # the tiny shape has no recorded step
        if predicted and self.needs(predicted) > self.left():
            self.note(f"{sharing} a GPU not started: predicted {predicted['wall_s']['value']:.0f} s (it needs "
                      f"{self.needs(predicted):.0f} s), {self.left():.0f} s left; the next call runs it")
            return 124
        command = [sys.executable, "-m", "raycse", "search", "--space", str(space), "--budget", "paper",
                   "--no-confirm", "--state", str(state), "--experiment", f"{self.name}-{sharing}"]
        watch, here = Watch(state), os.getcwd()
        logged = self.log.stat().st_size if self.log.is_file() else 0
        os.chdir(state)  # the report page goes to STATE/report
        try:
            rc = self.supervise(self.left(), self.log, None, command, watch=watch)
        finally:
            os.chdir(here)
        summary = load_gpu_suite().search_summary(state) if rc == 0 else None
        if summary is None:
            self.note(f"{sharing} a GPU: the search {'was cut off' if rc == 124 else f'failed ({rc})'}")
            return rc or 1
        with self.log.open("rb") as log:
            log.seek(logged)
            log_text = log.read().decode(errors="replace")
        measured = measure(summary, watch, sentences, log_text, self.setting.get("batch_size", 64))
        if predicted is None:  # no recorded step: the rest of the model from the step this run measured
            predicted = predict(space, measured["step_ms"], "the step this run measured (no recorded GPU step for "
                                                            f"a {self.setting['shape']}-shaped model)")
        data = self.data()
        data["runs"].append({"sharing": sharing, "command": " ".join(command[1:]), "measured": measured,
                             "predicted": predicted})
        self.record.write_text(json.dumps(data, indent=1) + "\n")
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the suite's OUTDIR")
    parser.add_argument("--deadline", type=float, default=540, help="seconds from now; a search cut off there "
                                                                     "runs again in the next call (default: 540)")
    parser.add_argument("--plan", action="store_true", help="print each search's predicted figures; run nothing")
    parser.add_argument("--steady", type=Path, default=None, metavar="LOG",
                        help="print each search's steady step (after the first evaluation) from a recorded paper.log")
    parser.add_argument("--rehearse", type=Path, default=None, metavar="DIR",
                        help="the CPU rehearsal's setting, with gpu_suite.py rehearsal's DIR")
    args = parser.parse_args(argv)
    if args.steady is not None:
        searches = re.split(r"^Search '(paper-\d+)'.*$", args.steady.read_text(), flags=re.M)
        for name, text in zip(searches[1::2], searches[0::2]):
            print(json.dumps({"search": name, "steady_step_ms": steady_step_ms(text, PAPER_BATCH)}))
        return 0
    part = Part(args.out.resolve(), args.deadline, args.rehearse, weights=not args.plan)
    return part.plan() if args.plan else part.run_all()


if __name__ == "__main__":
    sys.exit(main())
