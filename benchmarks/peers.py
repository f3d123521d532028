"""Is a raycse trial and a raycse search faster than what a researcher runs instead? Both sides in one run, on the
same model, corpus sample, batch size, sequence length, precision, learning rate, tau, steps, evaluation interval and
objective:

- one training run: `raycse.train(loss="simcse")` (what `raycse train --loss simcse` runs) against
  sentence-transformers' unsupervised SimCSE recipe: MultipleNegativesRankingLoss over (s, s) pairs with scale 1/tau,
  max_seq_length = the training length, SentenceTransformerTrainer, EmbeddingSimilarityEvaluator on the objective's
  pairs during training, the best checkpoint kept (load_best_model_at_end). Each run is its own subprocess, the sides
  alternated by seed (A B, B A, A B, ...). Per side: the wall clock (the process, from its start to its exit), its
  parts (start-up, steps, evaluations, checkpoints), trained sentences a second, the process's peak resident memory
  (and CUDA's peak allocation on a GPU) and the objective reached, as a mean over the seeds with its 95% Student-t
  interval (raycse/stats.py).
- one search: N trials of an Optuna TPE loop over lr and tau (one process, each trial one recipe run, one at a time,
  the published point first, as raycse's search has it) against `raycse search` of the same N trials at the same
  per-trial budget (--no-confirm: no choosing or judging stages, no test tasks). Per side: the wall clock, the
  device-seconds (wall x the devices held: the GPUs, or on a CPU machine its cores), trials an hour and the
  configuration each chose (raycse's search-stage seconds and its trials' parts beside them, from its summary).

Both sides score on the same sentences at the same length: the evaluator encodes at the length raycse evaluates
at (the tokenizer's limit capped by the position embeddings), not at the training length, and both use mean
pooling (raycse's --pooler avg; sentence-transformers' pooling for a model that declares none) and cosines.

    python benchmarks/peers.py --quick [--output FILE.json]        # the 2-core CPU shape (MiniLM, under 10 min)
    python benchmarks/peers.py --size cpu [--output FILE.json]     # longer trainings, 4 seeds: the scores' agreement
    python benchmarks/peers.py --size tiny --model DIR [--output F]  # a tiny random model: timings of the plumbing
    python benchmarks/peers.py --size gpu --shape minilm|bert-base [--parts train search] [--output F]

`--size gpu` is benchmarks/gpu_suite.sh's `peers` part: batch 64, length 32, an evaluation every 125 steps; BERT-base
is its shape with random weights (a timing only: no objective figure of it means anything). It writes one JSON
record (--output; else it prints it): the setting, each run of each side, each side's figures and the ratios
(recipe / raycse: above 1 means raycse is faster or smaller).
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # benchmarks/concurrent.py

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(_HERE).parent
SIDES = ("raycse", "recipe")
METRIC = "eval_dev_spearman_cosine"  # the evaluator named "dev": its key in the trainer's metrics
PUBLISHED = {"lr": 3e-5, "tau": 0.05}  # search_spaces/simcse.yaml's published point, the first trial of both loops
SPACE = {"tau": (0.01, 0.2), "lr": (1e-5, 1e-4)}  # search_spaces/simcse.yaml's, log-uniform each

# Each size: the training runs' shape and the search's. `steps` x batch sentences are the corpus's first, so both
# sides train on the same sentences, once each. On 2 CPU cores the quick size (under 10 minutes in all) evaluates
# once, at its last step, and its search's trials are 4 steps each, scored on a cut of STS-B dev (the first
# `search_dev_pairs` pairs, one file for both sides): a check of both sides' fixed costs, not of a search's answer.
SIZES = {
    "quick": {"model": "minilm", "batch_size": 32, "max_len": 32, "steps": 32, "eval_steps": 32, "lr": 1e-4,
              "tau": 0.05, "seeds": [1, 2, 3], "trials": 8, "search_steps": 4, "search_eval_steps": 4,
              "search_dev_pairs": 100, "devices": "cpu"},
    # Longer trainings, where both sides move the dev score well past seed noise: the score agreement's size (about
    # 100 s a run on 2 quiet cores, so some 15 minutes with its search).
    "cpu": {"model": "minilm", "batch_size": 32, "max_len": 32, "steps": 48, "eval_steps": 48, "lr": 5e-5,
            "tau": 0.05, "seeds": [1, 2, 3, 4], "trials": 8, "search_steps": 4, "search_eval_steps": 4,
            "search_dev_pairs": 100, "devices": "cpu"},
    "tiny": {"model": None, "batch_size": 8, "max_len": 32, "steps": 4, "eval_steps": 2, "lr": 5e-5, "tau": 0.05,
             "seeds": [1, 2], "trials": 2, "search_steps": 2, "search_eval_steps": 1, "search_dev_pairs": 48,
             "devices": "cpu"},
    "gpu": {"model": "minilm", "batch_size": 64, "max_len": 32, "steps": 250, "eval_steps": 125, "lr": 3e-5,
            "tau": 0.05, "seeds": [1, 2, 3], "trials": 8, "search_steps": 250, "search_eval_steps": 125,
            "search_dev_pairs": None, "devices": "cuda"},
}


# ------------------------------------------------------------------------------------------------ the two sides
def _model_path(model: str) -> str:
    from raycse.encoder.loading import resolve_model_path

    return str(resolve_model_path(model))


def eval_length(model_path: str) -> int:
    """The length raycse evaluates at (raycse.encoder.model.Encoder.max_seq_length): the tokenizer's limit capped by
    the position embeddings."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    limits = [tokenizer.model_max_length, getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings",
                                                  None)]
    return min(limit for limit in limits if limit)


def objective_pairs(objective: str):
    """The objective's sentence pairs and gold scores, as raycse reads them (raycse/evaluation/sts.py)."""
    from raycse.evaluation.sts import build_objective

    [pairs] = build_objective(objective).pairs.values()
    return list(pairs.sentences1), list(pairs.sentences2), [float(s) for s in pairs.scores]


def _peak_memory() -> dict:
    import torch

    peak = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available():
        peak["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return peak


def raycse_run(spec: dict, started: float) -> dict:
    """One `raycse train --loss simcse` run, as the Python API runs it (no MLflow record, no test tasks: the recipe
    has neither)."""
    import raycse

    called = time.time()
    out = Path(spec["output_dir"])
    raycse.train(output_dir=str(out), model=spec["model"], loss="simcse", pooler="avg", eval_pooler="avg",
                 batch_size=spec["batch_size"], lr=spec["lr"], max_steps=spec["steps"], eval_steps=spec["eval_steps"],
                 max_len=spec["max_len"], objective=spec["objective"], max_sentences=spec["steps"] * spec["batch_size"],
                 seed=spec["seed"], precision=spec["precision"], test_eval=False, mlflow=False, tau=spec["tau"])
    results = json.loads((out / "results.json").read_text())
    t = results["timings"]
    curve = results["dev_curve"]
    improved, best = 0, -math.inf
    for point in curve:
        if point["objective"] > best:
            best, improved = point["objective"], improved + 1
    return {"side": "raycse", "seed": spec["seed"], "lr": spec["lr"], "tau": spec["tau"],
            "to_first_step_s": (called - started) + t["startup_s"],
            "steps_s": t["train_s"] + t["compile_s"], "compile_s": t["compile_s"], "eval_s": t["eval_s"],
            "checkpoint_s": t["checkpoint_s"], "steps": results["steps"], "evaluations": len(curve),
            "checkpoints": {"best_writes": improved, "last_writes": "at the first and the last evaluation at least "
                                                                     "(CheckpointCadence)"},
            "objective": results["best_objective"], "best_step": results["best_step"],
            "curve": [[p["step"], p["objective"]] for p in curve], **_peak_memory()}


def recipe_run(spec: dict, started: float) -> dict:
    """One run of sentence-transformers' unsupervised SimCSE recipe (its docs' "Unsupervised Learning > SimCSE"),
    with its trainer's documented options: bf16 on a GPU that has it, else fp16 on a GPU, fp32 on a CPU."""
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator
    from transformers import TrainerCallback

    from raycse.data.corpus import read_corpus

    cuda = torch.cuda.is_available()
    path = _model_path(spec["model"])
    model = SentenceTransformer(path, device="cuda" if cuda else "cpu")
    model.max_seq_length = spec["max_len"]
    sentences = read_corpus("wiki-sample" if spec["corpus"] is None else spec["corpus"],
                            max_sentences=spec["steps"] * spec["batch_size"])
    train = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    loss = losses.MultipleNegativesRankingLoss(model, scale=1.0 / spec["tau"])
    s1, s2, gold = objective_pairs(spec["objective"])
    evaluator = EmbeddingSimilarityEvaluator(s1, s2, gold, main_similarity="cosine", name="dev")
    length = eval_length(path)
    bf16 = cuda and spec["precision"] != "fp32" and torch.cuda.is_bf16_supported()
    args = SentenceTransformerTrainingArguments(
        output_dir=spec["output_dir"], max_steps=spec["steps"], per_device_train_batch_size=spec["batch_size"],
        learning_rate=spec["lr"], warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, seed=spec["seed"],
        bf16=bf16, fp16=cuda and spec["precision"] != "fp32" and not bf16, use_cpu=not cuda,
        eval_strategy="steps", eval_steps=spec["eval_steps"], save_strategy="steps", save_steps=spec["eval_steps"],
        save_total_limit=1, load_best_model_at_end=True, metric_for_best_model=METRIC, greater_is_better=True,
        logging_steps=spec["eval_steps"], report_to="none", disable_tqdm=True)
    clock = {"eval_s": 0.0, "checkpoint_s": 0.0, "load_best_s": 0.0, "evaluations": 0, "checkpoints": 0}

    class Moments(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock["train_begin"] = time.time()

        def on_train_end(self, *a, **k):
            clock["train_end"] = time.time()

    class Timed(SentenceTransformerTrainer):
        def evaluate(self, *a, **k):
            # scored at raycse's evaluation length, so that both sides rank the same sentences at the same length
            begun, model.max_seq_length = time.perf_counter(), length
            try:
                return super().evaluate(*a, **k)
            finally:
                model.max_seq_length = spec["max_len"]
                clock["eval_s"] += time.perf_counter() - begun
                clock["evaluations"] += 1

        def _save_checkpoint(self, *a, **k):
            begun = time.perf_counter()
            try:
                return super()._save_checkpoint(*a, **k)
            finally:
                clock["checkpoint_s"] += time.perf_counter() - begun
                clock["checkpoints"] += 1

        def _load_best_model(self, *a, **k):
            begun = time.perf_counter()
            try:
                return super()._load_best_model(*a, **k)
            finally:
                clock["load_best_s"] += time.perf_counter() - begun

    trainer = Timed(model=model, args=args, train_dataset=train, loss=loss, evaluator=evaluator,
                    callbacks=[Moments()])
    trainer.train()
    state = trainer.state
    loop = clock["train_end"] - clock["train_begin"]
    curve = [[e["step"], 100 * e[METRIC]] for e in state.log_history if METRIC in e]
    best_step = int(state.best_model_checkpoint.rsplit("-", 1)[1]) if state.best_model_checkpoint else None
    return {"side": "recipe", "seed": spec["seed"], "lr": spec["lr"], "tau": spec["tau"],
            "to_first_step_s": clock["train_begin"] - started,
            "steps_s": loop - clock["eval_s"] - clock["checkpoint_s"] - clock["load_best_s"],
            "eval_s": clock["eval_s"], "checkpoint_s": clock["checkpoint_s"] + clock["load_best_s"],
            "load_best_s": clock["load_best_s"], "steps": state.global_step, "evaluations": clock["evaluations"],
            "checkpoints": {"writes": clock["checkpoints"], "load_best": 1},
            "objective": 100 * state.best_metric, "best_step": best_step, "curve": curve,
            "precision": "bf16" if bf16 else "fp16" if args.fp16 else "fp32", **_peak_memory()}


def recipe_loop(spec: dict, started: float) -> dict:
    """The loop a researcher writes around the recipe: an Optuna study (TPE, seeded) over lr and tau, the published
    point first, each trial one recipe run in this process, one at a time; each trial's folder removed after it (its
    score is what the study keeps)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=spec["seed"]))
    study.enqueue_trial(PUBLISHED)
    trials = []

    def objective(trial):
        params = {"tau": trial.suggest_float("tau", *SPACE["tau"], log=True),
                  "lr": trial.suggest_float("lr", *SPACE["lr"], log=True)}
        begun = time.time()
        folder = Path(spec["output_dir"]) / f"trial-{trial.number}"
        run = recipe_run({**spec, **params, "output_dir": str(folder)}, begun)
        shutil.rmtree(folder, ignore_errors=True)
        trials.append({"params": params, "objective": run["objective"], "steps": run["steps"],
                       "evaluations": run["evaluations"], "wall_s": time.time() - begun})
        return run["objective"]

    first = time.time()
    study.optimize(objective, n_trials=spec["trials"])
    return {"side": "recipe", "startup_s": first - started, "trials": trials, "chose": study.best_params,
            "best_objective": study.best_value, **_peak_memory()}


def child(argv: list[str]) -> None:
    """`peers.py _side KIND SPEC.json OUT.json` (KIND raycse, recipe or loop): one side's run in this process."""
    started = float(os.environ.get("PEERS_STARTED", time.time()))
    kind, spec_path, out = argv
    spec = json.loads(Path(spec_path).read_text())
    run = {"raycse": raycse_run, "recipe": recipe_run, "loop": recipe_loop}[kind](spec, started)
    own = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    # the process's own view, up to here (the driver's wall_s adds its exit): kept with the run's figures
    run.update(child_wall_s=time.time() - started, child_cpu_s=sum(u.ru_utime + u.ru_stime for u in own))
    Path(out).write_text(json.dumps(run, indent=1) + "\n")


# ------------------------------------------------------------------------------------------------- the driver
def run_side(kind: str, spec: dict, work: Path, threads: int | None, log: Path) -> dict:
    """One side's run in its own process: its wall clock from its start to its exit, its CPU time and its figures."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path, out = work / f"{kind}-spec.json", work / f"{kind}-run.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    env["PEERS_STARTED"] = repr(started)
    with log.open("a") as sink:
        sink.write(f"== {kind} {json.dumps(spec)}\n")
        sink.flush()
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "_side", kind, str(spec_path), str(out)],
                              env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=work)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"peers: the {kind} run failed ({done.returncode}); its output: {log}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = json.loads(out.read_text())
    run.update(wall_s=wall, cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    if "steps_s" in run:  # a training run: the rest of the process's wall clock is its start-up and its end
        run["startup_s"] = wall - run["steps_s"] - run["eval_s"] - run["checkpoint_s"]
    return run


def raycse_search(setting: dict, work: Path, log: Path) -> dict:
    """`raycse search` of simcse.yaml's space at the setting's per-trial budget, N trials, no choosing or judging."""
    import yaml

    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    space = yaml.safe_load((ROOT / "search_spaces" / "simcse.yaml").read_text())
    space.pop("cpu_budget", None)
    space.pop("paper_budget", None)
    space["model"] = setting["model"]
    space["objective"] = setting["search_objective"]
    space["space"] = {"tau": space["space"]["tau"], "lr": space["space"]["lr"]}  # the loop's two parameters
    space["published"] = dict(PUBLISHED)
    space["train"].update(batch_size=setting["batch_size"], mini_batch_size=None, max_len=setting["max_len"],
                          max_steps=setting["search_steps"], eval_steps=setting["search_eval_steps"],
                          max_sentences=setting["search_steps"] * setting["batch_size"], pooler="avg",
                          precision=setting["precision"])
    space["search"].update(num_samples=setting["trials"], test_eval="none", seed=0)
    if setting["devices"] == "cpu":
        space["resources"] = {"workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1}  # simcse.yaml's CPU budget
    file = work / "simcse-peers.yaml"
    file.write_text("# benchmarks/peers.py: search_spaces/simcse.yaml's space over lr and tau at the peers' setting\n"
                    + yaml.safe_dump(space, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    with log.open("a") as sink:
        sink.write(f"== raycse search {file}\n")
        sink.flush()
        done = subprocess.run([sys.executable, "-m", "raycse", "search", "--space", str(file), "--no-confirm",
                               "--budget", "full", "--state", str(state), "--experiment", "peers-raycse"],
                              env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=state)
    wall = time.time() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"peers: raycse search failed ({done.returncode}); its output: {log}")
    [path] = sorted(glob.glob(str(state / "**" / "search_summary.json"), recursive=True), key=os.path.getmtime)[-1:]
    summary = json.loads(Path(path).read_text())
    timings = summary.get("timings") or {}
    trials = [{"params": t["params"], "objective": t["best_objective"], "steps": t.get("steps"),
               "status": t.get("status"), "stage": t.get("stage")} for t in summary["trials"]]
    shutil.rmtree(state / "ray_results", ignore_errors=True)  # the trials' checkpoints: disk only
    return {"side": "raycse", "wall_s": wall,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "cpu_s_note": "user + system of the processes reaped under raycse's; Ray's workers may escape it (a floor)",
            "peak_rss_mb_largest_process": after.ru_maxrss / 1024,
            "stages_s": {k: v for k, v in timings.items() if k.startswith("time_")},
            "trial_parts_s": {k: v for k, v in timings.items() if k.startswith("trial_")},
            "trials": [t for t in trials if t["stage"] in (None, "search")],
            "chose": (summary.get("winner") or {}).get("params"),
            "best_objective": max((t["objective"] for t in trials if t["objective"] is not None), default=None)}


def interval(values: list[float]) -> dict:
    from raycse.stats import summarise, t_quantile

    s = summarise(values)
    if s.n < 2:
        return {"mean": s.mean, "std": None, "n": s.n, "low": None, "high": None}
    half = t_quantile(s.n) * s.std / math.sqrt(s.n)
    return {"mean": s.mean, "std": s.std, "n": s.n, "low": s.mean - half, "high": s.mean + half}


def side_figures(runs: list[dict], batch_size: int) -> dict:
    def mean(key):
        return sum(r[key] for r in runs) / len(runs)

    figures = {key: mean(key) for key in ("wall_s", "startup_s", "steps_s", "eval_s", "checkpoint_s", "cpu_s",
                                          "peak_rss_mb")}
    figures["sentences_per_s"] = sum(r["steps"] * batch_size for r in runs) / sum(r["steps_s"] for r in runs)
    if all("peak_cuda_mb" in r for r in runs):
        figures["peak_cuda_mb"] = mean("peak_cuda_mb")
    figures["steps"] = sorted({r["steps"] for r in runs})
    figures["evaluations"] = sorted({r["evaluations"] for r in runs})
    figures["objective"] = interval([r["objective"] for r in runs])
    return figures


def untouched(setting: dict) -> float:
    """The untouched model's figure on the training runs' objective, scored here the way raycse scores."""
    from raycse.encoder.model import Encoder, encode_fn, pick_device
    from raycse.evaluation.sts import build_objective

    encoder = Encoder.from_pretrained(setting["model"], pooler="avg").to(pick_device())
    return build_objective(setting["objective"])(encode_fn(encoder, "avg"))["objective"]


def cut_objective(pairs: int | None, folder: Path) -> str:
    """STS-B dev, or a file of its first `pairs` pairs (the quick search's objective, the same file for both)."""
    if pairs is None:
        return "stsb_dev"
    s1, s2, gold = objective_pairs("stsb_dev")
    path = folder / f"stsb-dev-first-{pairs}.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in
                                                              list(zip(s1, s2, gold))[:pairs]))
    return str(path)


def bert_base(folder: Path, tokenizer_of: str) -> str:
    """BERT-base's shape (transformers' BertConfig defaults) with random weights and MiniLM's tokenizer: timings."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = folder / "bert-base-random"
    if not (path / "config.json").is_file():
        import torch

        torch.manual_seed(0)
        tokenizer = AutoTokenizer.from_pretrained(_model_path(tokenizer_of))
        BertModel(BertConfig(vocab_size=len(tokenizer))).save_pretrained(path)
        tokenizer.save_pretrained(path)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_side"]:
        child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 2-core CPU shape (--size quick)")
    parser.add_argument("--size", choices=sorted(SIZES), default=None)
    parser.add_argument("--shape", choices=["minilm", "bert-base"], default="minilm",
                        help="bert-base: its shape with random weights (timings only)")
    parser.add_argument("--model", default=None, help="a model folder instead of the shape's (--size tiny needs one)")
    parser.add_argument("--parts", nargs="+", choices=["train", "search"], default=["train", "search"])
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--eval-steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of each training process")
    parser.add_argument("--work", type=Path, default=None, help="where the runs' folders go (default: a temporary one)")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--raycse-first", action="store_true", help="the search: raycse's before the loop's")
    args = parser.parse_args(argv)
    size = "quick" if args.quick else args.size or "quick"
    setting = dict(SIZES[size])
    for key in ("seeds", "trials", "steps", "eval_steps", "batch_size", "lr"):
        if getattr(args, key) is not None:
            setting[key] = getattr(args, key)
    random_weights = False
    work = args.work or Path(tempfile.mkdtemp(prefix="peers-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.model:
        setting["model"] = args.model
    elif args.shape == "bert-base":
        setting["model"], random_weights = bert_base(work, "minilm"), True
    if setting["model"] is None:
        parser.error(f"--size {size} needs --model DIR")
    random_weights = random_weights or size == "tiny"
    setting.update(shape=args.shape if not args.model else Path(args.model).name, size=size, precision="auto",
                   objective="stsb_dev", corpus=None, random_weights=random_weights)
    setting["search_objective"] = cut_objective(setting.pop("search_dev_pairs"), work)
    log = work / "peers.log"
    import torch

    cuda = torch.cuda.is_available()
    devices = torch.cuda.device_count() if cuda else os.cpu_count()
    record = {"question": "is a raycse trial and a raycse search faster than what a researcher runs instead?",
              "command": "python benchmarks/peers.py " + " ".join(argv),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({os.cpu_count()} cores)",
              "load_average_at_start": os.getloadavg(), "setting": setting, "torch": torch.__version__,
              "versions": _versions(), "work": str(work)}
    if random_weights:
        record["note"] = "random weights: every figure is a timing; no objective figure of this run means anything"
    print(f"peers: {size}, {setting['model']}, work in {work}, log {log}", flush=True)

    if "train" in args.parts:
        record["untouched_objective"] = untouched(setting)
        runs = []
        for i, seed in enumerate(setting["seeds"]):
            order = SIDES if i % 2 == 0 else SIDES[::-1]  # A B, B A, A B, ...
            for side in order:
                spec = {key: setting[key] for key in ("model", "batch_size", "max_len", "steps", "eval_steps", "lr",
                                                      "tau", "objective", "corpus", "precision")}
                spec.update(seed=seed, output_dir=str(work / "train" / f"{side}-{seed}" / "out"))
                run = run_side(side, spec, work / "train" / f"{side}-{seed}", args.threads, log)
                runs.append(run)
                print(f"  train {side:6} seed {seed}: {run['wall_s']:.1f} s (start-up {run['startup_s']:.1f}, steps "
                      f"{run['steps_s']:.1f}, evaluations {run['eval_s']:.1f}, checkpoints {run['checkpoint_s']:.1f}),"
                      f" objective {run['objective']:.2f}", flush=True)
                shutil.rmtree(spec["output_dir"], ignore_errors=True)
        figures = {side: side_figures([r for r in runs if r["side"] == side], setting["batch_size"]) for side in SIDES}
        a, b = figures["raycse"], figures["recipe"]
        difference = interval([x["objective"] - y["objective"] for x, y in
                               zip([r for r in runs if r["side"] == "raycse"],
                                   [r for r in runs if r["side"] == "recipe"])])
        record["train"] = {
            "runs": runs, "sides": figures,
            "ratios": {"wall": b["wall_s"] / a["wall_s"], "steps": b["steps_s"] / a["steps_s"],
                       "evaluations": b["eval_s"] / a["eval_s"], "startup": b["startup_s"] / a["startup_s"],
                       "checkpoints": b["checkpoint_s"] / max(a["checkpoint_s"], 1e-9),
                       "sentences_per_s": a["sentences_per_s"] / b["sentences_per_s"],
                       "peak_rss": b["peak_rss_mb"] / a["peak_rss_mb"]},
            "objective_difference_raycse_minus_recipe": difference,
            "same_steps_and_evaluations": a["steps"] == b["steps"] and a["evaluations"] == b["evaluations"],
            "gain_over_untouched": {side: figures[side]["objective"]["mean"] - record["untouched_objective"]
                                    for side in SIDES}}
    if "search" in args.parts:
        search = {}
        spec = {key: setting[key] for key in ("model", "batch_size", "max_len", "tau", "lr", "corpus", "precision")}
        spec.update(steps=setting["search_steps"], eval_steps=setting["search_eval_steps"], trials=setting["trials"],
                    objective=setting["search_objective"], seed=0, output_dir=str(work / "search" / "loop" / "out"))
        for side in (SIDES if args.raycse_first else SIDES[::-1]):
            if side == "recipe":
                search["recipe"] = run_side("loop", spec, work / "search" / "loop", None, log)
            else:
                search["raycse"] = raycse_search(setting, work / "search" / "raycse", log)
            print(f"  search {side}: {search[side]['wall_s']:.1f} s, chose {search[side]['chose']}", flush=True)
        search["order"] = list(SIDES if args.raycse_first else SIDES[::-1])
        for side in SIDES:
            s = search[side]
            s["device_s"] = s["wall_s"] * devices
            s["trials_an_hour"] = len(s["trials"]) * 3600 / s["wall_s"]
        search["devices_held"] = f"{devices} {'GPU' if cuda else 'CPU core'}(s), each side the whole machine"
        search["ratios"] = {"wall": search["recipe"]["wall_s"] / search["raycse"]["wall_s"],
                            "device_s": search["recipe"]["device_s"] / search["raycse"]["device_s"]}
        record["search"] = search
    text = json.dumps(record, indent=1) + "\n"
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    print(summary_lines(record), flush=True)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _versions() -> dict:
    import importlib.metadata as metadata

    return {name: metadata.version(name) for name in ("sentence-transformers", "transformers", "accelerate",
                                                      "optuna", "ray")}


def summary_lines(record: dict) -> str:
    lines = []
    if "train" in record:
        t = record["train"]
        for side in SIDES:
            f = t["sides"][side]
            o = f["objective"]
            ci = f" [{o['low']:.2f}, {o['high']:.2f}]" if o["low"] is not None else ""
            lines.append(f"train {side}: wall {f['wall_s']:.1f} s (start-up {f['startup_s']:.1f}, steps "
                         f"{f['steps_s']:.1f}, evaluations {f['eval_s']:.1f}, checkpoints {f['checkpoint_s']:.1f}), "
                         f"{f['sentences_per_s']:.1f} sentences/s, peak RSS {f['peak_rss_mb']:.0f} MB, objective "
                         f"{o['mean']:.2f}{ci} (n {o['n']})")
        lines.append("train ratios (recipe / raycse): " + ", ".join(f"{k} {v:.2f}" for k, v in t["ratios"].items()))
    if "search" in record:
        s = record["search"]
        for side in SIDES:
            lines.append(f"search {side}: wall {s[side]['wall_s']:.1f} s, {s[side]['trials_an_hour']:.0f} trials an "
                         f"hour, chose {s[side]['chose']} ({s[side]['best_objective']:.2f})")
        lines.append("search ratios (recipe / raycse): " + ", ".join(f"{k} {v:.2f}" for k, v in s["ratios"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
