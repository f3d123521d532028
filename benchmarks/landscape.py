"""Record a search space's landscape: real trainings of a space-filling design of configurations, several seeds each.

A search benchmark can only tell good search from bad where the hyperparameters move the objective by more than
seed noise, and it needs hundreds of repetitions of each strategy, which real training cannot afford. This script
trains a design of configurations of one space with raycse's own trainer (`raycse.training.trainer.train`, no Ray) and
keeps every run's dev curve; `benchmarks/surrogate.py` fits a model to the file, and the search-quality
benchmark replays searches against that model instead of training.

    # CPU (about an hour of a 2-core machine, run in the background): 17 configurations x 2 seeds
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/landscape.py --preset cpu --jobs 2 \\
        --output benchmarks/landscapes/focal-minilm-cls-cpu.json
    # one GPU, 8 trainings at once, the model from a directory (benchmarks/minilm_fp16.py makes one)
    python benchmarks/landscape.py --preset gpu --model .gpu/minilm-fp16 --jobs 8 --deadline 470 \\
        --output benchmarks/landscapes/focal-minilm-cls-h100.json
    # the spread first: the corners of (tau, lr) at the published m, 2 seeds
    python benchmarks/landscape.py --preset probe --jobs 2 --output /tmp/probe.json

The setting: focal.yaml's space (tau, m, lr) on the packaged all-MiniLM-L6-v2 trained with SimCSE's `pooler: cls`
(CLS + MLP head, evaluated as cls_before_pooler). The model was trained for mean pooling; its CLS vector is not
(79.7 STS-B dev untouched, against 87 for mean pooling), so a short training moves it by points and tau and lr
decide by how much. With the model's own mean pooling every configuration lands within a fraction of a point
(benchmarks/search-quality.md: 87.05-87.29), below seed noise.

The design is a scrambled Sobol sequence over the space's unit cube (log scale for loguniform parameters), plus the
published point, rather than a grid: a grid of n points in d = 3 dimensions gives each parameter only n^(1/3)
distinct values, and repeats each of them n^(2/3) times, while the surrogate must predict every continuous value in
between; a Sobol design of the same size gives every parameter n distinct, evenly spread values and fills the
cube with low discrepancy (what surrogate benchmarks such as HPOBench and YAHPO fit their models on: random or
quasi-random samples, not grids). Sobol's balance holds for powers of two, hence 16 and 128 points.

The file (JSON, a few hundred KB at most) holds the setting, the design, every run (configuration, seed, steps ->
objective, cumulative training and evaluation seconds, start-up seconds), the untouched model's objective (step 0
of every curve) and a summary of its spread: the best minus the worst configuration mean, the pooled between-seed
std, and their ratio. It is rewritten after every finished run, atomically; a recording killed and started again
with the same command skips the runs it holds. `--deadline S` starts no run after S seconds (so that a command
with a time limit ends with its file written; the next call goes on).

Checkpoints are not written: the landscape needs curves, not models, and writing best/ and last/ at every
evaluation (about 0.5 s on this CPU, the optimiser state included) would dominate a GPU run of a few seconds. The
worker processes replace the trainer's `save_last` and `Encoder.save` with no-ops (`_without_checkpoints`).
"""
from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, where benchmarks/concurrent.py would shadow the
# standard library's `concurrent` package (which this script and numpy import): take the folder off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait  # noqa: E402
from pathlib import Path  # noqa: E402

FORMAT = "raycse-landscape/1"
SPACE_FILE = "search_spaces/focal.yaml"
# What every preset trains: the space file's fixed settings with these replaced (the CLS + MLP head, no test tasks).
COMMON_TRAIN = {"pooler": "cls", "max_len": 32, "epochs": 1, "test_eval": False, "compile": "never"}
PRESETS = {
    # 2-core CPU: 16 Sobol points + the published point, 2 seeds = 34 runs of 32 steps at batch 16, STS-B dev every
    # 8 steps (4 evaluations): ~120 s a run with one thread on a quiet machine (40 s of steps, 80 s of evaluations),
    # two at once: ~35 min quiet; a shared machine's load doubles or triples it
    "cpu": {"train": {"batch_size": 16, "max_steps": 32, "eval_steps": 8}, "points": 16, "seeds": [42, 43],
            "threads": 1},
    # one GPU: 128 Sobol points + the published point, 2 seeds = 258 runs of one epoch of the bundled corpus at
    # batch 64 (186 steps), STS-B dev every 31 steps (6 evaluations, the last at the epoch's end)
    "gpu": {"train": {"batch_size": 64, "max_steps": 186, "eval_steps": 31}, "points": 128, "seeds": [42, 43],
            "threads": 2},
    # benchmarks/gpu_suite.sh --rehearse: the gpu preset's path on a tiny model in seconds, 2 Sobol points + the
    # published point, 2 seeds, 4 steps
    "rehearse": {"train": {"batch_size": 8, "max_steps": 4, "eval_steps": 2}, "points": 2, "seeds": [42, 43],
                 "threads": 1},
    # the spread, measured before a recording: the four corners of (tau, lr) at the published m, 2 seeds
    "probe": {"train": {"batch_size": 16, "max_steps": 32, "eval_steps": 8}, "corners": ["tau", "lr"],
              "seeds": [42, 43], "threads": 1},
}
DESIGN_SEED = 0  # the Sobol scrambling's seed: the design, and so a resumed recording's runs, never change


# ---------------------------------------------------------------------------------------------------- design
def unit_to_value(dist: dict, u: float) -> float:
    """A point u in [0, 1] of a parameter's axis -> its value (log scale for loguniform, rounded for int)."""
    low, high = float(dist["low"]), float(dist["high"])
    if dist["type"] == "loguniform":
        return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    value = low + u * (high - low)
    return float(round(value)) if dist["type"] == "int" else value


def design(space: dict[str, dict], published: dict, preset: dict) -> list[dict[str, float]]:
    """The configurations to train: the published point first, then a scrambled Sobol design (or the probe's
    corners: every combination of the named parameters' bounds, the others at the published point)."""
    from itertools import product

    points = [dict(published)]
    if "corners" in preset:
        names = preset["corners"]
        for bounds in product(*[(space[n]["low"], space[n]["high"]) for n in names]):
            points.append({**published, **dict(zip(names, (float(b) for b in bounds)))})
        return points
    from scipy.stats import qmc

    names = list(space)
    sobol = qmc.Sobol(d=len(names), scramble=True, seed=DESIGN_SEED).random(preset["points"])
    for row in sobol:
        points.append({n: unit_to_value(space[n], float(u)) for n, u in zip(names, row)})
    return [{k: float(f"{v:.6g}") for k, v in p.items()} for p in points]  # short, exact in the file


def space_of(space_file: str, model: str | None = None) -> tuple[dict[str, dict], dict, str, dict]:
    """(distributions, published point, loss, fixed training settings) of a single-loss space file, its model
    replaced by `model` when given (before the file is validated: a lent GPU has no packaged 'minilm')."""
    import yaml

    from raycse.errors import ConfigError
    from raycse.settings.space import load_space, parse_space

    space = load_space(space_file) if model is None else None
    if space is None:
        try:
            raw = yaml.safe_load(Path(space_file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            load_space(space_file)  # its own one-line error
            raise
        if not isinstance(raw, dict):
            load_space(space_file)
        space = parse_space({**raw, "model": model}, space_file)
    if space.conditional:
        raise ConfigError(f"{space_file}: a conditional space (several loss families) is not supported here")
    family = next(iter(space.families.values()))
    dists = {}
    for name, dist in family.space.items():
        if dist.kind == "categorical":
            raise ConfigError(f"{space_file}: space.{name}: categorical parameters are not supported here")
        dists[name] = {"type": dist.kind, "low": dist.low, "high": dist.high}
    base = {k: v for k, v in space.base.to_dict().items() if k not in ("output_dir", "seed")}
    base.update(loss=family.loss, reg=family.reg)
    return dists, dict(family.published), family.loss, base


def run_key(config: dict, seed: int) -> str:
    return json.dumps({**{k: config[k] for k in sorted(config)}, "seed": seed}, separators=(",", ":"))


# ------------------------------------------------------------------------------------------- worker processes
def _without_checkpoints() -> None:
    """In a landscape worker only: the trainer writes neither best/ nor last/ (see the module's docstring)."""
    from raycse.encoder import model
    from raycse.training import trainer

    for owner, name in ((trainer, "save_last"), (model.Encoder, "save")):
        if not hasattr(owner, name):
            raise RuntimeError(f"raycse changed: {owner.__name__}.{name} is gone; update _without_checkpoints")
    trainer.save_last = lambda *args, **kwargs: None
    model.Encoder.save = lambda self, *args, **kwargs: None


def _init_worker(threads: int) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(threads)
    _without_checkpoints()


_SHARED: dict = {}  # per worker process: the training data's token ids, made once


def _shared_tokens(config):
    from raycse.data.corpus import load_examples
    from raycse.data.tokens import data_fingerprint, share_tokens
    from raycse.encoder.loading import load_tokenizer, resolve_model_path

    fingerprint = data_fingerprint(config)
    if fingerprint not in _SHARED:
        tokenizer = load_tokenizer(resolve_model_path(config.model), config.trust_remote_code)
        _SHARED[fingerprint] = share_tokens(tokenizer, load_examples(config), config.max_len, fingerprint)
    return _SHARED[fingerprint]


def train_one(train: dict, config: dict, seed: int, train_keys: tuple[str, ...]) -> dict:
    """One training of `config` with `seed`: its dev curve and where its time went (a worker process)."""
    from raycse.settings.config import TrainConfig
    from raycse.training.trainer import TrainingDiverged
    from raycse.training.trainer import train as train_model

    hparams = {**train["hparams"], **{k: v for k, v in config.items() if k not in train_keys}}
    settings = {**train, **{k: v for k, v in config.items() if k in train_keys}, "hparams": hparams}
    points: list[dict] = []

    def on_eval(report) -> None:
        points.append({"step": report.step, "objective": report.objective, "train_s": report.timings.train_s,
                       "eval_s": report.timings.eval_s})

    started = time.perf_counter()
    status, startup_s = "ok", None
    output_dir = tempfile.mkdtemp(prefix="raycse-landscape-")  # the trainer wants one; nothing is left in it
    try:
        cfg = TrainConfig(**settings, seed=seed, output_dir=output_dir).validate()
        results = train_model(cfg, on_eval=on_eval, shared_tokens=_shared_tokens(cfg))
        startup_s = results["timings"]["startup_s"]
    except TrainingDiverged:
        status = "diverged"
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    return {
        "config": config, "seed": seed, "status": status,
        "steps": [p["step"] for p in points],
        "objective": [round(p["objective"], 4) for p in points],
        "train_s": [round(p["train_s"], 3) for p in points],  # cumulative, as the trainer counts them
        "eval_s": [round(p["eval_s"], 3) for p in points],
        "startup_s": None if startup_s is None else round(startup_s, 3),
        "wall_s": round(time.perf_counter() - started, 3),
    }


def untouched_objective(train: dict) -> dict:
    """The objective of the model before any step (every curve's step 0), with the evaluation pooler."""
    from raycse.encoder.model import Encoder, encode_fn, pick_device
    from raycse.evaluation.sts import build_objective
    from raycse.settings.config import TrainConfig

    cfg = TrainConfig(**train)
    _, eval_pooler = cfg.poolers()
    started = time.perf_counter()
    encoder = Encoder.from_pretrained(cfg.model, pooler=eval_pooler).to(pick_device()).eval()
    scores = build_objective(cfg.objective, cfg.objective_columns)(encode_fn(encoder, eval_pooler))
    return {"objective": round(scores["objective"], 4), "pooler": eval_pooler,
            "seconds": round(time.perf_counter() - started, 3)}


# --------------------------------------------------------------------------------------------------- summary
def summarize(runs: list[dict]) -> dict:
    """The landscape's spread at the last recorded step and at each run's best step: configuration means, the
    best minus the worst, and the pooled between-seed std (the root of the mean within-configuration variance,
    configurations with >= 2 finished seeds). Diverged runs are counted, not averaged."""
    import numpy as np

    by_config: dict[str, list[dict]] = {}
    for run in runs:
        by_config.setdefault(run_key(run["config"], 0), []).append(run)
    summary: dict = {"runs": len(runs), "configurations": len(by_config),
                     "diverged": sum(r["status"] != "ok" for r in runs)}
    for name, pick in (("final", lambda r: r["objective"][-1]), ("best_of_curve", lambda r: max(r["objective"]))):
        means, variances, dofs = [], [], []
        for group in by_config.values():
            values = [pick(r) for r in group if r["status"] == "ok" and r["objective"]]
            if not values:
                continue
            means.append((float(np.mean(values)), group[0]["config"], len(values)))
            if len(values) >= 2:
                variances.append(float(np.var(values, ddof=1)) * (len(values) - 1))
                dofs.append(len(values) - 1)
        if not means:
            continue
        best, worst = max(means, key=lambda m: m[0]), min(means, key=lambda m: m[0])
        seed_std = math.sqrt(sum(variances) / sum(dofs)) if dofs else None
        spread = best[0] - worst[0]
        summary[name] = {
            "best": {"mean": round(best[0], 4), "config": best[1], "seeds": best[2]},
            "worst": {"mean": round(worst[0], 4), "config": worst[1], "seeds": worst[2]},
            "spread": round(spread, 4),
            "std_of_configuration_means": round(float(np.std([m[0] for m in means], ddof=1)), 4)
            if len(means) > 1 else None,
            "seed_std_pooled": None if seed_std is None else round(seed_std, 4),
            "seed_std_dof": sum(dofs),
            "spread_over_seed_std": None if not seed_std else round(spread / seed_std, 2),
        }
    summary["seed_effect"] = seed_effect(by_config)
    ok = [r for r in runs if r["status"] == "ok" and r["steps"]]
    if ok:
        step_s = [r["train_s"][-1] / r["steps"][-1] for r in ok]
        eval_s = [r["eval_s"][-1] / len(r["steps"]) for r in ok]
        summary["cost"] = {"step_s_median": round(float(np.median(step_s)), 5),
                           "eval_s_median": round(float(np.median(eval_s)), 4),
                           "startup_s_median": round(float(np.median([r["startup_s"] for r in ok])), 3),
                           "run_wall_s_median": round(float(np.median([r["wall_s"] for r in ok])), 3),
                           "run_wall_s_total": round(sum(r["wall_s"] for r in runs), 1)}
    return summary


def seed_effect(by_config: dict[str, list[dict]]) -> dict | None:
    """How much of the between-seed variation at the last step is the seed's own, shared by every configuration
    (its data order, its head's initialisation), and how much is the configuration x seed interaction: over the
    configurations with every seed, each seed's mean deviation from the configuration means, and the pooled std of
    what is left (a two-way layout without replication). A search's trials share one seed, so only the
    interaction can rank one configuration above another by luck."""
    import numpy as np

    seeds = sorted({r["seed"] for group in by_config.values() for r in group})
    table = []
    for group in by_config.values():
        finals = {r["seed"]: r["objective"][-1] for r in group if r["status"] == "ok" and r["objective"]}
        if all(seed in finals for seed in seeds):
            table.append([finals[seed] for seed in seeds])
    if len(seeds) < 2 or len(table) < 2:
        return None
    values = np.array(table)  # configurations x seeds
    effects = values.mean(axis=0) - values.mean()
    rest = values - values.mean(axis=1, keepdims=True) - effects
    dof = (len(table) - 1) * (len(seeds) - 1)
    return {"configurations": len(table),
            "effect_by_seed": {str(seed): round(float(e), 4) for seed, e in zip(seeds, effects)},
            "interaction_std": round(float(np.sqrt((rest ** 2).sum() / dof)), 4), "interaction_dof": dof}


# ------------------------------------------------------------------------------------------------------ main
def setting_of(args) -> dict:
    """What the file's runs depend on; a resumed recording must have the very same."""
    preset = PRESETS[args.preset]
    space, published, loss, base = space_of(args.space, args.model)
    train = {**base, **COMMON_TRAIN, **preset["train"]}
    return {"space_file": args.space, "loss": loss, "space": space, "published": published, "train": train,
            "objective": train["objective"], "seeds": preset["seeds"],
            "design": {"kind": "corners" if "corners" in preset else "sobol", "points": preset.get("points"),
                       "scramble_seed": DESIGN_SEED, "plus": "the published point first"}}


def load_existing(path: Path, setting: dict) -> dict | None:
    from raycse.errors import ConfigError

    if not path.is_file():
        return None
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"--output: {str(path)!r} exists and is not a landscape file ({err})") from None
    if existing.get("format") != FORMAT:
        raise ConfigError(f"--output: {str(path)!r} exists and is not a {FORMAT} file")
    mine = {k: v for k, v in setting.items() if k != "train"}
    theirs = {k: existing.get("setting", {}).get(k) for k in mine}
    train_differs = {k for k in set(setting["train"]) | set(existing["setting"].get("train", {}))
                     if k != "model" and setting["train"].get(k) != existing["setting"]["train"].get(k)}
    if mine != theirs or train_differs:
        what = sorted({k for k in mine if mine[k] != theirs[k]} | {f"train.{k}" for k in train_differs})
        raise ConfigError(f"--output: {str(path)!r} holds a landscape of another setting (it differs in "
                          f"{', '.join(what)}); give another file")
    return existing


def main(argv: list[str] | None = None) -> int:
    from raycse.errors import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="cpu")
    parser.add_argument("--output", required=True, help="the landscape file (JSON); an existing one is resumed")
    parser.add_argument("--jobs", type=int, default=1, help="trainings at once, each in its own process")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per training (default: the "
                        "preset's)")
    parser.add_argument("--model", default=None, help="the model (a directory; default: the space file's)")
    parser.add_argument("--space", default=SPACE_FILE, help="a single-loss space file (default: %(default)s)")
    parser.add_argument("--deadline", type=float, default=None, help="start no run after this many seconds")
    args = parser.parse_args(argv)
    try:
        return record(args)
    except ConfigError as err:
        print(f"raycse: error: {err}", file=sys.stderr)
        return 2


def record(args) -> int:
    from raycse.errors import ConfigError
    from raycse.files import write_json_atomic
    from raycse.settings.config import searchable_settings

    if args.jobs < 1:
        raise ConfigError(f"--jobs: must be >= 1, got {args.jobs}")
    started = time.perf_counter()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    preset = PRESETS[args.preset]
    threads = args.threads or preset["threads"]
    setting = setting_of(args)
    out = Path(args.output)
    existing = load_existing(out, setting)
    runs: list[dict] = existing["runs"] if existing else []
    done = {run_key(r["config"], r["seed"]) for r in runs}
    configs = design(setting["space"], setting["published"], preset)
    # seed-major: a recording stopped half-way still covers the whole space with its first seeds
    todo = [(c, s) for s in setting["seeds"] for c in configs if run_key(c, s) not in done]
    print(f"{len(configs)} configurations x {len(setting['seeds'])} seeds: {len(runs)} runs recorded, "
          f"{len(todo)} to go, {args.jobs} at once, {threads} thread(s) each", flush=True)
    payload = existing or {"format": FORMAT, "preset": args.preset, "setting": setting, "runs": runs,
                           "recordings": []}
    payload["setting"]["train"]["model"] = setting["train"]["model"]
    import torch

    recording = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "jobs": args.jobs,
                 "threads": threads, "host": platform.node(), "cpus": os.cpu_count(),
                 "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                 "torch": torch.__version__, "runs": 0}
    if todo:
        payload["recordings"].append(recording)

    def save() -> None:
        recording["wall_s"] = round(time.perf_counter() - started, 1)
        payload["summary"] = summarize(runs)
        write_json_atomic(out, payload)

    if "untouched" not in payload:
        torch.set_num_threads(max(threads, 1))
        payload["untouched"] = untouched_objective(setting["train"])
        print(f"untouched model: {payload['untouched']['objective']:.2f} ({payload['untouched']['pooler']}, "
              f"{payload['untouched']['seconds']:.1f} s)", flush=True)
        save()
    train_keys = tuple(k for k in setting["space"] if k in searchable_settings())
    context = multiprocessing.get_context("spawn")  # no forked CUDA or OpenMP state
    pending, queue = set(), list(todo)
    with ProcessPoolExecutor(args.jobs, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
        while queue or pending:
            late = args.deadline is not None and time.perf_counter() - started > args.deadline
            while queue and len(pending) < args.jobs and not late:
                config, seed = queue.pop(0)
                pending.add(pool.submit(train_one, setting["train"], config, seed, train_keys))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                run = future.result()
                runs.append(run)
                recording["runs"] += 1
                curve = " ".join(f"{v:.2f}" for v in run["objective"])
                print(f"[{len(runs)}/{len(configs) * len(setting['seeds'])}] {run['config']} seed {run['seed']}: "
                      f"{run['status']} {curve} ({run['wall_s']:.0f} s)", flush=True)
            save()
    save()
    summary = payload["summary"]
    left = len(configs) * len(setting["seeds"]) - len(runs)
    for name in ("final", "best_of_curve"):
        s = summary.get(name)
        if s:
            print(f"{name}: best {s['best']['mean']:.2f} {s['best']['config']}, worst {s['worst']['mean']:.2f} "
                  f"{s['worst']['config']}; spread {s['spread']:.2f}, seed std {s['seed_std_pooled']} "
                  f"({s['seed_std_dof']} dof): spread / seed std = {s['spread_over_seed_std']}")
    if summary.get("seed_effect"):
        effect = summary["seed_effect"]
        print(f"the seeds' own effect at the last step: {effect['effect_by_seed']} (over {effect['configurations']} "
              f"configurations); configuration x seed interaction std {effect['interaction_std']}")
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KB); {time.perf_counter() - started:.0f} s; "
          f"{left} runs left" + (" (--deadline: run the same command again to go on)" if left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
