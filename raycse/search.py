"""`raycse search`: Ray Tune + Optuna (TPE) + ASHA over a search-space file, then a confirmation over seeds.

A search runs in stages, each timed (`time_<stage>_s` on the MLflow parent run):

  setup     Ray, the MLflow parent run, the Optuna study, and the baseline: the untouched model's objective
  stage0    DCLR only, when no complementary model is given: one SimCSE training whose checkpoint every
            DCLR trial uses as its frozen complementary model (the paper's recipe)
  search    Tune trials sampled by Optuna's TPE (the published point first), early-stopped by ASHA
  confirm   the top-K configurations and the published point retrained until each has S seeds; the answer is
            the best mean, with the paired difference to the published point and its 95% interval
  test      the winner's checkpoints scored on the seven STS test tasks (unless its trials scored them)
  record    the summary, MLflow, the registered model, the report page

Every trial is a Tune trial (`raycse.trial.run_trial`) recorded as an MLflow child run by a Tune callback in the
driver, so a SQLite store is written by one process. `--resume` continues whichever stage was interrupted:
finished trials are never trained again, unfinished ones continue from their last evaluation.
The search layer knows nothing of loss internals: a trial is a `TrainConfig`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse import stats
from raycse.config import TrainConfig
from raycse.errors import ConfigError
from raycse.space import Confirm, SearchSpace, TrialSpec
from raycse.tracking import SEARCH_TAG, STATUS_TAG, TRIAL_TAG, Tracker, training_params
from raycse.trial import FINAL_KEYS, METRIC, TIMING_KEYS, WORST_OBJECTIVE, TrialContext, run_trial

PATH_TAG = "raycse.experiment_path"  # where Tune keeps the search's state: finds the parent run on --resume
STAGE_TAG, SEED_TAG, KEY_TAG = "raycse.stage", "raycse.seed", "raycse.config_key"
PLAN_TAG, BASELINE_TAG = "raycse.confirm_plan", "raycse.baseline"
SUMMARY_FILE = "search_summary.json"
TEST_KEYS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg")
STATUSES = {"finished": "finished", "stopped": "stopped early (ASHA)", "failed": "failed", "diverged": "diverged"}


def say(message: str) -> None:
    """The search's progress lines (a module function: Tune pickles the callback that holds it)."""
    print(message, flush=True)


# ------------------------------------------------------------------------------------- what comes out
@dataclass
class SearchOptions:
    tracking_uri: str
    storage_path: str
    resume: bool = False
    num_samples: int | None = None
    max_concurrent: int | None = None
    seed: int | None = None
    budget: str = "auto"  # auto | cpu | full
    confirm_seeds: int | None = None  # overrides the space's search.confirm.seeds
    confirm: bool = True  # False: no confirmation stage (--no-confirm)
    optuna_storage: str | None = None
    started_at: float = field(default_factory=time.perf_counter)  # the command's start: time_total_s runs from it
    # How the search stage samples (benchmarks/search_quality.py compares them): "tpe" (Optuna's TPE, the
    # default), "random" (Optuna's RandomSampler) or "grid" (Tune's grid over `grid`: {param: [values]}).
    sampler: str = "tpe"
    grid: dict[str, list] | None = None
    scheduler: str | None = None  # "asha" | "fifo": overrides the space file's
    grace_evals: int | None = None  # overrides the space file's ASHA grace period (in evaluations)
    max_total_steps: int | None = None  # stop the search stage once its trials took this many steps in all


@dataclass
class TrialRecord:
    """One Tune trial of either stage, as the answer needs it."""

    trial_id: str
    stage: str
    family: str
    params: dict[str, Any]
    seed: int
    config_key: str
    best_objective: float | None
    best_step: int
    steps: int
    status: str
    checkpoint: str | None  # the trial's best model directory (a path, or a URI on remote storage)
    test: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    ended_at: float = 0.0  # the wall-clock time (time.time()) of the trial's last result
    optuna_number: int | None = None  # the trial's number in the persistent Optuna study (search stage only)


@dataclass
class ConfirmedConfig:
    """A configuration of the confirmation stage: its best objective at every seed, and how it compares."""

    config_key: str
    family: str
    params: dict[str, Any]
    is_published: bool
    search_rank: int | None  # its rank among the search's configurations (None: the published point, unranked)
    seeds: list[int]
    values: list[float]
    runs: list[TrialRecord]
    summary: stats.Summary | None
    diff_to_published: stats.PairedInterval | None = None


@dataclass
class SearchOutcome:
    experiment: str
    name: str
    parent_run_id: str
    budget: str
    objective: str
    baseline: dict[str, Any]
    trials: list[TrialRecord]
    confirmation: list[ConfirmedConfig]
    winner: ConfirmedConfig | None
    verdict: str
    winner_test: dict[str, stats.Summary]
    seed_noise_std: float | None
    timings: dict[str, float]
    best_checkpoint: str | None = None
    model_version: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


class PhaseClock:
    """Wall-clock seconds by phase, contiguous from the command's start: the phases add up to the total."""

    def __init__(self, started_at: float):
        self.started_at = self.mark = started_at
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        try:
            yield
        finally:
            now = time.perf_counter()
            self.seconds[f"time_{name}_s"] = self.seconds.get(f"time_{name}_s", 0.0) + now - self.mark
            self.mark = now

    def total(self) -> float:
        return time.perf_counter() - self.started_at


# ---------------------------------------------------------------------------------- driver-side MLflow
def _make_callback_class():
    """The Tune callback that writes every trial to MLflow from the driver (built lazily: Ray imports late)."""
    from ray import tune

    class MlflowSearchCallback(tune.Callback):
        def __init__(self, tracking_uri: str, experiment: str, parent_run_id: str, space: SearchSpace, log=say):
            self.tracking_uri, self.experiment, self.space = tracking_uri, experiment, space
            self.parent_run_id = parent_run_id
            self.log = log
            self.run_ids: dict[str, str] = {}
            self._tracker = None

        def __getstate__(self):  # Tune pickles its run config; the MLflow client is re-created on demand
            state = dict(self.__dict__)
            state["_tracker"] = None
            return state

        @property
        def tracker(self) -> Tracker:
            if self._tracker is None:
                self._tracker = Tracker(self.tracking_uri, self.experiment)
            return self._tracker

        def _run(self, trial) -> str:
            run_id = self.run_ids.get(trial.trial_id) or self.tracker.find_run(TRIAL_TAG, trial.trial_id)
            if run_id is None:
                spec = TrialSpec.of(trial.config, self.space.base.seed)
                run_id = self.tracker.start_run(
                    trial.trial_id, parent_run_id=self.parent_run_id,
                    tags={TRIAL_TAG: trial.trial_id, STATUS_TAG: "running", STAGE_TAG: spec.stage,
                          SEED_TAG: spec.seed, KEY_TAG: self.space.config_key(spec.sampled)})
            self.run_ids[trial.trial_id] = run_id
            return run_id

        def on_trial_start(self, iteration, trials, trial, **info):
            run_id = self._run(trial)
            if self.tracker.client.get_run(run_id).info.status == "FINISHED":
                return  # recorded already: the trial only replays its result (raycse.trial.replayed_result)
            self.tracker.client.update_run(run_id, status="RUNNING")
            spec = TrialSpec.of(trial.config, self.space.base.seed)
            config = self.space.trial_config(spec.sampled, spec.seed)
            self.tracker.log_params(run_id, {"loss_family": self.space.family_of(spec.sampled),
                                             **training_params(config.to_dict())})

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get("replayed"):
                return
            run_id = self._run(trial)
            if result.get("final"):
                if result.get("diverged"):
                    self.log(f"trial {trial.trial_id}  diverged: {result.get('error')}")
                self.tracker.log_metrics(run_id, {k: result[k] for k in (*FINAL_KEYS, *TIMING_KEYS, "best_objective",
                                                                         "best_step") if k in result})
                return
            numbers = {k: v for k, v in result.items() if isinstance(v, (int, float)) and k in _STEP_METRICS(result)}
            self.tracker.log_metrics(run_id, numbers, step=int(result["step"]))
            spec = TrialSpec.of(trial.config, self.space.base.seed)
            self.log(f"trial {trial.trial_id}  {spec.stage:<7} {self.space.family_of(spec.sampled):<13} "
                     f"seed {spec.seed:<4} step {int(result['step']):>6}  "
                     f"loss {result.get('train_loss', math.nan):8.4f}  "
                     f"objective {result[METRIC]:6.2f}  (best {result['best_objective']:6.2f})  "
                     f"{result.get('sentences_per_s', 0):8.1f} sentences/s")

        def on_trial_complete(self, iteration, trials, trial, **info):
            run_id = self._run(trial)
            last = trial.last_result or {}
            if last.get("replayed"):
                return
            checkpoint = getattr(trial, "checkpoint", None)
            tags = {"raycse.steps": last.get("step", 0), "raycse.checkpoint": checkpoint.path if checkpoint else ""}
            if last.get("diverged"):
                self.tracker.set_tags(run_id, {STATUS_TAG: "diverged", "raycse.error": last.get("error", ""), **tags})
                self.tracker.end_run(run_id, "FAILED")
                return
            status = STATUSES["finished"] if last.get("final") else STATUSES["stopped"]
            self.tracker.set_tags(run_id, {STATUS_TAG: status, **tags})
            self.tracker.end_run(run_id, "FINISHED")  # from here on the trial is done, whatever happens to the driver
            self.log(f"trial {trial.trial_id}  {status}: best objective {last.get('best_objective', math.nan):.2f}")

        def on_trial_error(self, iteration, trials, trial, **info):
            run_id = self._run(trial)
            error = _trial_error(trial)  # divergence never lands here: it ends a trial normally
            self.log(f"trial {trial.trial_id}  failed: {error}")
            self.tracker.set_tags(run_id, {STATUS_TAG: "failed", "raycse.error": error,
                                           "raycse.steps": (trial.last_result or {}).get("step", 0)})
            self.tracker.end_run(run_id, "FAILED")

    return MlflowSearchCallback


def _STEP_METRICS(result: dict) -> set[str]:
    """The step-indexed metrics of an evaluation: the objective and its parts, the loss and its diagnostics."""
    fixed = {METRIC, "best_objective", "train_loss", "sentences_per_s", "stsb_dev", "sickr_dev", "dev_file"}
    return fixed | {k for k in result if k.startswith(("dclr_", "loss_"))}


def _trial_error(trial) -> str:
    """The last line of a failed trial's error: the exception, not the traceback."""
    error_file = getattr(trial, "error_file", None)
    try:
        text = Path(error_file).read_text() if error_file else ""
    except OSError:
        text = ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", line)), None)
    return (error or (lines[-1] if lines else "trial failed (no error file)"))[:500]


# ------------------------------------------------------------------------------------------ the plan
def experiment_dir_name(experiment: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-") or "raycse"


def auto_budget(cluster: dict) -> str:
    """'full' where there is a GPU to use, else the file's CPU budget.

    A cluster that autoscales GPU workers from zero shows no GPU until a trial asks for one, so a driver that
    joined an existing cluster (RAY_ADDRESS, as `ray job submit` sets) counts as having GPUs; pass
    `--budget cpu` for a CPU-only cluster.
    """
    if cluster.get("GPU", 0) > 0 or os.environ.get("RAY_ADDRESS"):
        return "full"
    return "cpu"


def search_plan(space: SearchSpace, options: SearchOptions, budget: str) -> SearchSpace:
    """The space the search runs: the budget applied, then the command line's overrides (flags win)."""
    plan = space.with_cpu_budget() if budget == "cpu" else space
    changes: dict[str, Any] = {}
    for name in ("num_samples", "max_concurrent", "seed"):
        if getattr(options, name) is not None:
            changes[name] = getattr(options, name)
    if options.scheduler is not None:
        changes["scheduler"] = {**plan.scheduler, "name": options.scheduler}
    if options.grace_evals is not None:
        changes["scheduler"] = {**changes.get("scheduler", plan.scheduler), "grace_evals": options.grace_evals}
    if not options.confirm:
        changes["confirm"] = None
    elif options.confirm_seeds is not None:
        changes["confirm"] = dataclasses.replace(plan.confirm or Confirm(), seeds=options.confirm_seeds)
    return dataclasses.replace(plan, **changes)


def default_optuna_storage(tracking_uri: str) -> str:
    """`optuna.db` beside a SQLite MLflow store, else in the working directory (absolute: trials run elsewhere)."""
    folder = Path.cwd()
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri[len("sqlite:///"):]).parent
    return f"sqlite:///{(folder / 'optuna.db').resolve()}"


def _trial_resources(space: SearchSpace):
    from ray import tune

    res = space.resources
    worker = {"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if res.gpus_per_worker else {})}
    if res.workers == 1:
        return worker
    # the Tune function itself only waits on the TorchTrainer: it holds no CPU of its own
    return tune.PlacementGroupFactory([{"CPU": 0}] + [worker] * res.workers)


def _max_concurrent(space: SearchSpace, cluster: dict) -> int:
    if space.max_concurrent:
        return space.max_concurrent
    res = space.resources
    fits = []
    if res.cpus_per_worker:
        fits.append(int(cluster.get("CPU", 0) // (res.cpus_per_worker * res.workers)))
    if res.gpus_per_worker:
        fits.append(int(cluster.get("GPU", 0) // (res.gpus_per_worker * res.workers)))
    fit = min(fits) if fits else 1
    return max(1, min(fit, space.num_samples)) if fit > 0 else space.num_samples  # 0: the autoscaler will add nodes


def _scheduler(space: SearchSpace):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if space.scheduler["name"] == "fifo":
        return FIFOScheduler()
    eval_steps = space.base.eval_steps
    # trials end on their own; max_t only caps ASHA's rungs (one past the last step keeps the final report)
    max_t = (space.base.max_steps or 10**7) + 1
    return ASHAScheduler(time_attr="step", max_t=max_t, grace_period=int(space.scheduler["grace_evals"] * eval_steps),
                         reduction_factor=space.scheduler["reduction_factor"])


# ----------------------------------------------------------------------------------------- the search
def run_search(space: SearchSpace, options: SearchOptions, log=say) -> SearchOutcome:
    """Run (or resume) every stage of a search; the space given is left as it is."""
    import optuna
    import ray

    from raycse.ray_runtime import start_ray

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # its reporter prints tables even at verbose=0
    if "://" not in options.storage_path:
        # Tune's snapshot of which checkpoint each trial has reached, at most a second old when the driver dies
        # (its default waits longer on a local disk, where a snapshot costs next to nothing)
        os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    clock = PhaseClock(options.started_at)
    with clock.phase("setup"):
        name = experiment_dir_name(space.experiment)
        storage = options.storage_path if "://" in options.storage_path else str(Path(options.storage_path).resolve())
        search_path = f"{storage.rstrip('/')}/{name}"  # also an s3:// or gs:// URI on a cluster
        _check_new_or_resume(search_path, options.resume)
        start_ray()
        cluster = ray.cluster_resources()
        budget = options.budget if options.budget != "auto" else auto_budget(cluster)
        plan = search_plan(space, options, budget)
        if budget == "cpu":
            log(f"No GPU in the Ray cluster: using the CPU budget of {space.path} "
                f"({plan.num_samples} trials, batch {plan.base.batch_size}, {plan.base.max_steps or 'all'} steps, "
                f"the objective every {plan.base.eval_steps} steps"
                + (f"; confirmation: top {plan.confirm.top_k} + the published point, {plan.confirm.seeds} seeds)."
                   if plan.confirm else ")."))
        optuna_storage = options.optuna_storage or default_optuna_storage(options.tracking_uri)
        tracker = Tracker(options.tracking_uri, space.experiment)
        parent_run_id = _open_parent_run(tracker, plan, options, name, search_path, budget, optuna_storage, log)
        baseline = start_baseline(plan, tracker, parent_run_id)  # scored beside the search stage's first trials
    with clock.phase("tokenize"):
        shared_tokens = share_training_tokens(plan, log)
    context = TrialContext(options.tracking_uri, space.experiment)
    runner = StageRunner(plan, options, context, storage, name, parent_run_id, cluster, log, shared_tokens)
    if _needs_stage0(plan):
        with clock.phase("stage0"):
            plan = runner.plan = dataclasses.replace(
                plan, base=dataclasses.replace(plan.base, complementary=runner.complementary_model()))
    with clock.phase("search"):
        searched = runner.search_stage(optuna_storage, space.experiment)
        baseline = finish_baseline(baseline, tracker, parent_run_id, log)
    with clock.phase("confirm"):
        entries = _confirm_plan(plan, searched, tracker, parent_run_id)
        confirmed_runs = runner.confirm_stage(entries) if plan.confirm else []
        confirmation = _confirmation(plan, entries, searched, confirmed_runs)
        winner = max((c for c in confirmation if c.summary), key=lambda c: c.summary.mean, default=None)
    with clock.phase("test"):
        winner_test = _winner_test(plan, winner, log) if winner else {}
    with clock.phase("record"):
        outcome = SearchOutcome(
            experiment=space.experiment, name=name, parent_run_id=parent_run_id, budget=budget,
            objective=plan.base.objective, baseline=baseline, trials=searched + confirmed_runs,
            confirmation=confirmation, winner=winner, verdict=verdict(winner, baseline, plan),
            winner_test=winner_test,
            seed_noise_std=stats.pooled_std([c.values for c in confirmation if len(c.values) > 1]),
            timings={})
        record(outcome, plan, tracker, optuna_storage, log)

    def timings() -> dict[str, float]:
        return {**clock.seconds, **_trial_timings(outcome.trials, plan, cluster, clock.seconds),
                "time_total_s": clock.total()}

    with clock.phase("report"):  # the page shows the timings up to here
        outcome.summary["timings"] = timings()
        write_report_page(outcome, tracker, optuna_storage, log)
    outcome.timings = outcome.summary["timings"] = timings()
    return outcome


def finish(outcome: SearchOutcome, tracking_uri: str) -> None:
    """After the answer is printed: the timings and the final summary on the parent run, which then ends."""
    tracker = Tracker(tracking_uri, outcome.experiment)
    tracker.log_metrics(outcome.parent_run_id, outcome.timings)
    tracker.log_dict(outcome.parent_run_id, outcome.summary, SUMMARY_FILE)
    tracker.end_run(outcome.parent_run_id, "FINISHED")


def _check_new_or_resume(search_path: str, resume: bool) -> None:
    from ray import tune

    exists = tune.Tuner.can_restore(search_path)
    if resume and not exists:
        raise ConfigError(f"--resume: no search to resume at {search_path!r}")
    if not resume and exists:
        raise ConfigError(f"a search already exists at {search_path!r}: pass --resume to continue it, "
                          "or a new --storage-path / experiment name")


def _open_parent_run(tracker: Tracker, plan: SearchSpace, options: SearchOptions, name: str, search_path: str,
                     budget: str, optuna_storage: str, log) -> str:
    if options.resume:  # the parent run is found by the search's storage location, kept as a tag
        parent_run_id = tracker.find_run(PATH_TAG, search_path)
        if parent_run_id is None:
            raise ConfigError(f"--resume: no MLflow parent run for {search_path!r} in {options.tracking_uri} "
                              "(pass the --tracking-uri the search started with)")
        killed = tracker.mark_orphans_killed(parent_run_id)
        tracker.client.update_run(parent_run_id, status="RUNNING")
        log(f"Resuming search {name!r} (MLflow parent run {parent_run_id}; "
            f"{killed} orphaned trial run(s) marked KILLED).")
        return parent_run_id
    _check_new_study(optuna_storage, plan.experiment)
    parent_run_id = tracker.start_run(name, tags={SEARCH_TAG: name, PATH_TAG: search_path, "raycse.budget": budget})
    tracker.log_artifact(parent_run_id, plan.path)
    confirm = plan.confirm or Confirm(top_k=0, seeds=1)
    tracker.log_params(parent_run_id, {
        "space_file": os.path.basename(plan.path), "num_samples": plan.num_samples, "budget": budget,
        "seed": plan.seed, "scheduler": plan.scheduler["name"], "objective": plan.base.objective,
        "confirm_top_k": confirm.top_k, "confirm_seeds": confirm.seeds, "optuna_storage": optuna_storage,
        "study_name": plan.experiment})
    return parent_run_id


def optuna_rdb_storage(url: str):
    """Optuna's storage at `url`; a SQLite file waits up to a minute for another search's write lock."""
    import optuna

    from raycse.files import sqlite_creation_lock

    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    with sqlite_creation_lock(url):  # creating the storage creates its tables if the file is new
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


def _check_new_study(optuna_storage: str, study_name: str) -> None:
    import optuna

    try:
        names = optuna.get_all_study_names(storage=optuna_rdb_storage(optuna_storage))
    except Exception as err:  # noqa: BLE001 - Optuna raises several types for a bad URL or an unreadable file
        raise ConfigError(f"--optuna-storage: cannot open {optuna_storage!r}: {str(err).splitlines()[0]}") from None
    if study_name in names:
        raise ConfigError(f"an Optuna study {study_name!r} already exists in {optuna_storage}: resume its search with "
                          f"--resume, delete it (optuna delete-study --study-name {study_name} --storage "
                          f"{optuna_storage}), or pass another --optuna-storage")


# ------------------------------------------------------------------------------------------ baseline
def _baseline_poolers(plan: SearchSpace) -> list[str]:
    """The evaluation poolers the trials use: the fixed one, and every choice of a searched pooler."""
    poolers = []
    for family in plan.families.values():
        choices = family.space["pooler"].choices if "pooler" in family.space else [plan.base.pooler]
        for pooler in choices:
            eval_pooler = dataclasses.replace(plan.base, pooler=pooler).poolers()[1]
            if eval_pooler not in poolers:
                poolers.append(eval_pooler)
    return poolers


def start_baseline(plan: SearchSpace, tracker: Tracker, parent_run_id: str):
    """Start scoring the untouched model (a Ray task with a trial's resources, so it runs beside the first trials);
    returns what `finish_baseline` takes. A resumed search keeps the score it has."""
    import ray

    saved = tracker.client.get_run(parent_run_id).data.tags.get(BASELINE_TAG)
    if saved:
        return json.loads(saved)
    published = plan.published_sampled()
    headline = (plan.trial_config(published) if published else plan.base).poolers()[1]
    task = ray.remote(score_untouched).options(num_cpus=plan.resources.cpus_per_worker,
                                              num_gpus=plan.resources.gpus_per_worker)
    return {"eval_pooler": headline, "pending": task.remote(plan.base, _baseline_poolers(plan))}


def finish_baseline(started: dict, tracker: Tracker, parent_run_id: str, log) -> dict[str, Any]:
    """The untouched model's objective once scored, logged on the parent run."""
    import ray

    if "pending" not in started:
        return started
    scores = ray.get(started["pending"])
    headline = started["eval_pooler"]
    baseline = {"objective": scores[headline]["objective"], "eval_pooler": headline, "by_pooler": scores}
    log(f"baseline (the untouched model, pooler {headline}): objective {baseline['objective']:.2f}"
        + "".join(f"; {p}: {s['objective']:.2f}" for p, s in scores.items() if p != headline))
    tracker.log_metrics(parent_run_id, {"baseline_objective": baseline["objective"]})
    tracker.set_tags(parent_run_id, {BASELINE_TAG: json.dumps(baseline)})
    return baseline


def score_untouched(base: TrainConfig, poolers: list[str]) -> dict[str, dict[str, float]]:
    """The objective of the starting model, before any step, with each evaluation pooler."""
    from raycse.evaluation import build_objective
    from raycse.model import Encoder
    from raycse.trainer import encode_fn, pick_device

    objective = build_objective(base.objective, base.objective_columns)
    encoder = Encoder.from_pretrained(base.model, trust_remote_code=base.trust_remote_code).to(pick_device())
    return {pooler: objective(encode_fn(encoder, pooler)) for pooler in poolers}


# ------------------------------------------------------------------------------------- shared tokens
def share_training_tokens(plan: SearchSpace, log):
    """The training data tokenised once for every trial (raycse.tokens), or None where trials must do it
    themselves: a searched max_len or model, or a tokenizer whose batches the shared ids would not reproduce."""
    from transformers import AutoTokenizer

    from raycse.model import resolve_model_path
    from raycse.tokens import data_fingerprint, share_tokens
    from raycse.trainer import load_examples

    searched = {param for family in plan.families.values() for param in family.space}
    if searched & {"max_len", "model"}:
        log("Each trial tokenises its own data: the search varies max_len.")
        return None
    base = plan.base
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(base.model), trust_remote_code=base.trust_remote_code)
    examples = load_examples(base)
    shared = share_tokens(tokenizer, examples, base.max_len, data_fingerprint(base))
    if not shared.check(tokenizer, examples, base.max_len):
        log("Each trial tokenises its own data: this tokenizer's batches are not plain right-padded ids.")
        return None
    return shared


# --------------------------------------------------------------------------------------- the stages
def _needs_stage0(plan: SearchSpace) -> bool:
    from raycse.losses import build_loss

    return plan.base.complementary is None and any(
        build_loss(family.loss, family.reg).needs_complementary for family in plan.families.values())


@dataclass
class StageRunner:
    """Runs the Tune experiments of a search: stage 0, the search, the confirmation; each resumable."""

    plan: SearchSpace
    options: SearchOptions
    context: TrialContext
    storage: str
    name: str
    parent_run_id: str
    cluster: dict
    log: Any
    shared_tokens: Any = None

    def _tuner(self, stage: str, tune_config, param_space: dict | None = None, stopper=None):
        """A new Tuner for `stage`, or the restored one when the stage's experiment exists (--resume).

        `tune_config` is a function returning the TuneConfig, called for a new experiment only: a restored one
        brings back its own searcher, and building another (OptunaSearch enqueues the published point into the
        persistent study when built) would change the study.
        """
        from ray import tune

        trainable = tune.with_resources(tune.with_parameters(run_trial, space=self.plan, context=self.context,
                                                             shared_tokens=self.shared_tokens),
                                        _trial_resources(self.plan))
        name = self.name if stage == "search" else f"{self.name}-{stage}"
        path = f"{self.storage.rstrip('/')}/{name}"
        if tune.Tuner.can_restore(path):
            # finished and errored trials stay as they are; unfinished ones continue from their last checkpoint.
            # The restored run config brings back the pickled MLflow callback (it re-opens its client lazily).
            return tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=False,
                                      restart_errored=False, param_space=param_space)
        callback = _make_callback_class()(self.options.tracking_uri, self.plan.experiment, self.parent_run_id,
                                          self.plan, self.log)
        return tune.Tuner(
            trainable, param_space=param_space, tune_config=tune_config(),
            run_config=tune.RunConfig(
                name=name, storage_path=self.storage, callbacks=[callback], verbose=0, stop=stopper,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                # a crashed trial (a killed worker, a lost node) is retried once, from its last checkpoint
                failure_config=tune.FailureConfig(max_failures=1),
            ))

    def _fixed_trials(self, specs: list[TrialSpec]):
        """A FIFO Tune config that runs exactly these trials (stage 0, the confirmation)."""
        from ray import tune

        def tune_config():
            return tune.TuneConfig(metric=METRIC, mode="max", num_samples=1, reuse_actors=True,
                                   max_concurrent_trials=_max_concurrent(
                                       dataclasses.replace(self.plan, num_samples=len(specs)), self.cluster))

        return tune_config, {"raycse_trial": tune.grid_search([spec.as_tune_config()["raycse_trial"]
                                                               for spec in specs])}

    def search_stage(self, optuna_storage: str, study_name: str) -> list[TrialRecord]:
        import optuna
        from ray import tune

        from raycse.searcher import RAY_TRIAL_ID, TaggedOptunaSearch, TotalStepsStopper, fail_unrecorded_trials

        plan, options = self.plan, self.options
        grid = options.sampler == "grid"  # a hand-written grid: every combination once, no searcher
        param_space = {name: tune.grid_search(list(values)) for name, values in (options.grid or {}).items()} \
            if grid else None

        def tune_config():
            searcher = None
            if not grid:
                sampler = (optuna.samplers.RandomSampler(seed=plan.seed) if options.sampler == "random"
                           else optuna.samplers.TPESampler(seed=plan.seed))
                searcher = TaggedOptunaSearch(space=plan.define_by_run, metric=METRIC, mode="max",
                                              points_to_evaluate=plan.points_to_evaluate() or None, sampler=sampler,
                                              study_name=study_name, storage=optuna_rdb_storage(optuna_storage))
            return tune.TuneConfig(metric=METRIC, mode="max", search_alg=searcher, scheduler=_scheduler(plan),
                                   num_samples=1 if grid else plan.num_samples, reuse_actors=True,
                                   max_concurrent_trials=_max_concurrent(plan, self.cluster))

        stopper = TotalStepsStopper(options.max_total_steps) if options.max_total_steps else None
        records = self._fit("search", self._tuner("search", tune_config, param_space, stopper=stopper))
        if not grid:  # so that the printed table names each trial as optuna-dashboard and the report do
            study = optuna.load_study(study_name=study_name, storage=optuna_rdb_storage(optuna_storage))
            fail_unrecorded_trials(study, {record.trial_id for record in records})  # sampled just before a kill
            numbers = {t.user_attrs.get(RAY_TRIAL_ID): t.number for t in study.trials}
            for record in records:
                record.optuna_number = numbers.get(record.trial_id)
        return records

    def confirm_stage(self, entries: list[dict]) -> list[TrialRecord]:
        specs = [TrialSpec(entry["sampled"], seed, "confirm") for entry in entries for seed in entry["seeds_to_run"]]
        if not specs:
            return []
        self.log(f"Confirmation: {len(specs)} run(s) of {len(entries)} configuration(s) over seeds "
                 f"{sorted({s.seed for s in specs})}.")
        tune_config, param_space = self._fixed_trials(specs)
        return self._fit("confirm", self._tuner("confirm", tune_config, param_space))

    def _fit(self, stage: str, tuner) -> list[TrialRecord]:
        """Run the stage's Tune experiment; then drop the MLflow runs of trials that a kill took before Tune's
        snapshot recorded them (Tune ran others in their place on --resume), so that each trial is one run."""
        records = trial_records(tuner.fit(), self.plan)
        if self.options.resume:
            tracker = Tracker(self.options.tracking_uri, self.plan.experiment)
            dropped = tracker.drop_unrecorded_trials(self.parent_run_id, (STAGE_TAG, stage),
                                                     {record.trial_id for record in records})
            if dropped:
                self.log(f"{len(dropped)} {stage} trial run(s) started just before the kill, before Tune recorded "
                         f"them, were deleted from MLflow (Tune ran new trials in their place): {', '.join(dropped)}.")
        return records

    def complementary_model(self) -> str:
        """Stage 0: DCLR's complementary model, one SimCSE training on the base recipe (reused on resume)."""
        simcse = dataclasses.replace(next(iter(self.plan.families.values())), loss="simcse", reg=None, space={},
                                     published={})
        stage0 = dataclasses.replace(self.plan, families={"simcse": simcse}, test_eval="none",
                                     base=dataclasses.replace(self.plan.base, hparams={}))
        runner = dataclasses.replace(self, plan=stage0)
        self.log("Stage 0: training the SimCSE model that DCLR trials use as their complementary model.")
        tune_config, param_space = runner._fixed_trials([TrialSpec({}, stage0.base.seed, "stage0")])
        records = runner._fit("stage0", runner._tuner("stage0", tune_config, param_space))
        if not records or records[0].checkpoint is None or records[0].status != STATUSES["finished"]:
            raise RuntimeError("stage 0 (the SimCSE complementary model for DCLR) did not finish: see its MLflow run")
        self.log(f"Stage 0: complementary model at {records[0].checkpoint} "
                 f"(objective {records[0].best_objective:.2f}).")
        return records[0].checkpoint


def trial_records(grid, plan: SearchSpace) -> list[TrialRecord]:
    """Every trial of a Tune run, from its last result (works the same after --resume)."""
    records = []
    for result in grid:
        metrics = result.metrics or {}
        spec = TrialSpec.of(result.config or {}, plan.base.seed)
        status = ("failed" if result.error else "diverged" if metrics.get("diverged")
                  else "finished" if metrics.get("final") else "stopped")
        best = metrics.get("best_objective")
        best = best if isinstance(best, (int, float)) and math.isfinite(best) else None
        if status == "diverged":
            best = WORST_OBJECTIVE
        records.append(TrialRecord(
            trial_id=metrics.get("trial_id") or result.path.rstrip("/").split("/")[-1], stage=spec.stage,
            family=plan.family_of(spec.sampled) if spec.sampled or plan.conditional else next(iter(plan.families)),
            params=plan.params_of(spec.sampled) if spec.sampled else {}, seed=spec.seed,
            config_key=plan.config_key(spec.sampled), best_objective=best,
            best_step=int(metrics.get("best_step", 0) or 0), steps=int(metrics.get("step", 0) or 0),
            status=STATUSES[status], checkpoint=_best_dir(result),
            test={k: metrics[k] for k in TEST_KEYS if k in metrics},
            timings={k: float(metrics.get(k, 0.0)) for k in TIMING_KEYS},
            ended_at=float(metrics.get("timestamp", 0.0))))
    return sorted(records, key=lambda r: r.trial_id)


def _best_dir(result) -> str | None:
    """The trial's best model: best/ inside its last Tune checkpoint (or the path a replayed result names)."""
    if result.checkpoint is not None:
        base = result.checkpoint.path
    else:
        base = (result.metrics or {}).get("checkpoint_path")
        frame = result.metrics_dataframe
        if not base and frame is not None and "checkpoint_path" in frame:  # a multi-worker trial's TorchTrainer
            paths = frame["checkpoint_path"].dropna()
            base = str(paths.iloc[-1]) if len(paths) else None
    return f"{base.rstrip('/')}/best" if base else None


# ------------------------------------------------------------------------------------- confirmation
def _confirm_plan(plan: SearchSpace, searched: list[TrialRecord], tracker: Tracker, parent_run_id: str) -> list[dict]:
    """Which configurations to confirm and which seeds each still needs; kept on the parent run for --resume.

    The top-K configurations by search score and the published point; seeds base, base + 1, ...; a search run
    that trained its full budget (finished) counts as the base seed's run of its configuration.
    """
    saved = tracker.client.get_run(parent_run_id).data.tags.get(PLAN_TAG)
    if saved:
        return json.loads(saved)
    confirm = plan.confirm or Confirm(top_k=1, seeds=1)
    seeds = [plan.base.seed + i for i in range(confirm.seeds)]
    ranked: list[TrialRecord] = []
    for record in sorted((r for r in searched if r.best_objective is not None and r.status != STATUSES["diverged"]),
                         key=lambda r: (-r.best_objective, r.trial_id)):
        if record.config_key not in {r.config_key for r in ranked}:
            ranked.append(record)
    chosen = [(record.config_key, plan.sampled_of(record.family, record.params), rank)
              for rank, record in enumerate(ranked[:max(confirm.top_k, 1)], start=1)]
    # the published point to beat: in a conditional space (all.yaml), that of the leading configuration's family
    published = plan.published_sampled(ranked[0].family if ranked and plan.conditional else None)
    if published is not None and plan.config_key(published) not in {key for key, _, _ in chosen}:
        chosen.append((plan.config_key(published), published, None))
    entries = []
    for key, sampled, rank in chosen:
        finished = {r.seed for r in searched if r.config_key == key and r.status == STATUSES["finished"]}
        entries.append({"config_key": key, "sampled": sampled, "search_rank": rank,
                        "is_published": published is not None and key == plan.config_key(published),
                        "seeds": seeds, "seeds_to_run": [s for s in seeds if s not in finished]
                        if plan.confirm else []})
    tracker.set_tags(parent_run_id, {PLAN_TAG: json.dumps(entries)})
    return entries


def _confirmation(plan: SearchSpace, entries: list[dict], searched: list[TrialRecord],
                  confirmed: list[TrialRecord]) -> list[ConfirmedConfig]:
    """Each confirmed configuration's values over seeds, and its paired difference to the published point."""
    runs_of = {}
    for record in [r for r in searched if r.status == STATUSES["finished"]] + confirmed:
        runs_of.setdefault((record.config_key, record.seed), record)
    configs = []
    for entry in entries:
        seeds, values, runs = [], [], []
        seeds_wanted = entry["seeds"] if plan.confirm else [plan.base.seed]
        for seed in seeds_wanted:
            run = runs_of.get((entry["config_key"], seed))
            if run is None and not plan.confirm:  # no confirmation: the search run itself, finished or not
                run = next((r for r in searched if r.config_key == entry["config_key"]), None)
            if run is not None and run.best_objective is not None:
                seeds.append(seed)
                values.append(run.best_objective)
                runs.append(run)
        sampled = entry["sampled"]
        configs.append(ConfirmedConfig(
            config_key=entry["config_key"], family=plan.family_of(sampled), params=plan.params_of(sampled),
            is_published=entry["is_published"], search_rank=entry["search_rank"], seeds=seeds, values=values,
            runs=runs, summary=stats.summarise(values) if values else None))
    published = next((c for c in configs if c.is_published), None)
    if published is not None:
        for config in configs:
            if config is published:
                continue
            common = [s for s in config.seeds if s in published.seeds]
            if common:
                config.diff_to_published = stats.paired_interval(
                    [config.values[config.seeds.index(s)] for s in common],
                    [published.values[published.seeds.index(s)] for s in common])
    return configs


def verdict(winner: ConfirmedConfig | None, baseline: dict, plan: SearchSpace) -> str:
    """The answer in words: the winner against the published point and against the untouched model."""
    if winner is None:
        return "No configuration produced a score: see the failed trials."
    mean = winner.summary.mean
    over = f"over {winner.summary.n} seed{'s' if winner.summary.n > 1 else ''}" if plan.confirm else "from one seed"
    parts = []
    if winner.is_published:
        parts.append(f"The published point is the best configuration (mean {mean:.2f} {over}); no searched "
                     "configuration beat it.")
    elif winner.diff_to_published is None:
        parts.append(f"The winner scores a mean of {mean:.2f} {over}; the published point has no score to compare.")
    else:
        diff = winner.diff_to_published
        if diff.low is None:
            parts.append(f"The winner scores {mean:.2f} {over}, {diff.mean:+.2f} against the published point on the "
                         "same seed; with one seed there is no interval, so it is not distinguishable from the "
                         "published point at this budget.")
        elif diff.covers_zero:
            parts.append(f"The winner (mean {mean:.2f} {over}) is not distinguishable from the published point at "
                         f"this budget: paired difference {diff.mean:+.2f}, 95% interval [{diff.low:+.2f}, "
                         f"{diff.high:+.2f}] covers 0.")
        else:
            better = "beats" if diff.mean > 0 else "falls below"
            parts.append(f"The winner (mean {mean:.2f} {over}) {better} the published point: paired difference "
                         f"{diff.mean:+.2f}, 95% interval [{diff.low:+.2f}, {diff.high:+.2f}].")
    base = baseline.get("objective")
    if base is not None:
        # The untouched model has no seed: its score is a constant, so the winner's own interval decides.
        low = None
        if winner.summary.std is not None:
            low = mean - stats.t_quantile(winner.summary.n) * winner.summary.std / math.sqrt(winner.summary.n)
        if mean > base and (low is None or low > base):
            parts.append(f"It is {mean - base:+.2f} above the untouched model ({base:.2f})"
                         + (f", beyond its seed spread (95% interval of its mean from {low:.2f})." if low else "."))
        elif mean > base:
            parts.append(f"It is {mean - base:+.2f} above the untouched model ({base:.2f}), within its seed spread "
                         f"(95% interval of its mean from {low:.2f}): training may not have helped at this budget.")
        else:
            parts.append(f"No configuration beats the untouched model ({base:.2f}): training did not help at this "
                         "budget. The registered model is the winner's best checkpoint, not the untouched model.")
    if not plan.confirm:
        parts.append("No confirmation stage ran: one seed per configuration, and in this field one seed moves STS "
                     "figures by up to ~2 points, so differences below that may be noise.")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------- test
def _winner_test(plan: SearchSpace, winner: ConfirmedConfig, log) -> dict[str, stats.Summary]:
    """The winner's seven test tasks over its seeds: from its trials, else scored now (parallel Ray tasks)."""
    import ray

    missing = [run for run in winner.runs if not run.test and run.checkpoint]
    if missing and plan.test_eval != "none":
        log(f"Scoring the winner's {len(missing)} checkpoint(s) on the seven STS test tasks ...")
        task = ray.remote(score_checkpoint).options(num_cpus=plan.resources.cpus_per_worker,
                                                   num_gpus=plan.resources.gpus_per_worker)
        eval_pooler = plan.trial_config(plan.sampled_of(winner.family, winner.params)).poolers()[1]
        for run, figures in zip(missing, ray.get([task.remote(run.checkpoint, eval_pooler) for run in missing])):
            run.test = figures
    scored = [run.test for run in winner.runs if run.test]
    if not scored:
        return {}
    return {key: stats.summarise([figures[key] for figures in scored]) for key in TEST_KEYS
            if all(key in figures for figures in scored)}


def score_checkpoint(path: str, eval_pooler: str) -> dict[str, float]:
    """A saved best checkpoint's seven test tasks (and SICK-R dev, alignment, uniformity)."""
    from raycse.evaluation import evaluate_encoder
    from raycse.model import Encoder
    from raycse.trainer import encode_fn, pick_device

    with _local_copy(path) as local:
        encoder = Encoder.from_pretrained(local, pooler=eval_pooler).to(pick_device())
        results = evaluate_encoder(encode_fn(encoder, eval_pooler), tasks="all")
    return {k: results[k] for k in FINAL_KEYS if k in results}


@contextlib.contextmanager
def _local_copy(path: str):
    """A local directory with the contents of `path` (itself when local; downloaded from s3:// and the like)."""
    if "://" not in path:
        yield path
        return
    from ray.train import Checkpoint

    with Checkpoint(path).as_directory() as local:
        yield local


# ------------------------------------------------------------------------------------------- record
def record(outcome: SearchOutcome, plan: SearchSpace, tracker: Tracker, optuna_storage: str, log) -> None:
    """The answer into MLflow: the winner's figures and checkpoint on the parent run, the registered model, and
    the summary (search_summary.json, which the report page is built from)."""
    parent = outcome.parent_run_id
    winner = outcome.winner
    if winner is not None:
        best_run = max(winner.runs, key=lambda r: r.best_objective)
        outcome.best_checkpoint = best_run.checkpoint
        tracker.log_metrics(parent, {"best_objective": winner.summary.mean,
                                     **({"best_objective_std": winner.summary.std} if winner.summary.std else {}),
                                     **{k: s.mean for k, s in outcome.winner_test.items()}})
        config = plan.trial_config(plan.sampled_of(winner.family, winner.params))
        tracker.log_params(parent, {f"best.{k}": v for k, v in training_params(config.to_dict()).items()})
        tracker.set_tags(parent, {"raycse.best_trial": best_run.trial_id,
                                  "raycse.best_checkpoint": best_run.checkpoint or ""})
        if best_run.checkpoint:
            with _local_copy(best_run.checkpoint) as local:
                tracker.log_artifacts(parent, local, "best_checkpoint")
            outcome.model_version = tracker.register_model(parent, "best_checkpoint", outcome.experiment)
    outcome.summary = search_summary(outcome, plan, optuna_storage)


def write_report_page(outcome: SearchOutcome, tracker: Tracker, optuna_storage: str, log) -> None:
    """report/index.html from the summary (with the timings so far) and the study, logged on the parent run."""
    try:
        from raycse.report import log_report, write_report

        tracker.log_dict(outcome.parent_run_id, outcome.summary, SUMMARY_FILE)
        report = write_report(tracker.tracking_uri, outcome.experiment, Path("report"), optuna_storage)
        log_report(tracker.tracking_uri, outcome.parent_run_id, report.html_path)
        outcome.summary["report"] = str(report.html_path)
    except Exception as err:  # noqa: BLE001 - a report is a view of the results, never a reason to lose them
        log(f"The report page could not be written: {type(err).__name__}: {err}")


def search_summary(outcome: SearchOutcome, plan: SearchSpace, optuna_storage: str) -> dict[str, Any]:
    """The JSON every view of a search reads (docs/search_outputs.md gives its fields)."""
    def summary_dict(summary: stats.Summary | None) -> dict | None:
        return None if summary is None else dataclasses.asdict(summary)

    from raycse.evaluation import build_objective

    def point(sampled: dict | None) -> dict | None:
        return None if sampled is None else {"family": plan.family_of(sampled), "params": plan.params_of(sampled),
                                             "config_key": plan.config_key(sampled)}

    winner = outcome.winner
    paper_family = winner.family if winner else next(iter(plan.families))
    family_paper = plan.paper.get(paper_family, {})
    return {
        "experiment": outcome.experiment, "space_file": os.path.basename(plan.path), "objective": plan.base.objective,
        "objective_description": build_objective(plan.base.objective, plan.base.objective_columns).description,
        "budget": outcome.budget, "model": plan.base.model, "study_name": plan.experiment,
        "optuna_storage": optuna_storage, "baseline": outcome.baseline,
        "published": next((point(plan.sampled_of(c.family, c.params)) for c in outcome.confirmation
                           if c.is_published), point(plan.published_sampled())),
        "published_by_family": {name: point(plan.published_sampled(name)) for name in plan.families
                                if plan.families[name].published},
        "searched_params": {name: list(family.space) for name, family in plan.families.items()},
        "trials": [dataclasses.asdict(r) for r in outcome.trials],
        "confirmation": [{
            "config_key": c.config_key, "family": c.family, "params": c.params, "is_published": c.is_published,
            "search_rank": c.search_rank, "seeds": c.seeds, "values": c.values,
            **(summary_dict(c.summary) or {"mean": None, "std": None, "n": 0}),
            "diff_to_published": None if c.diff_to_published is None else dataclasses.asdict(c.diff_to_published),
        } for c in outcome.confirmation],
        "winner": None if winner is None else {
            "config_key": winner.config_key, "family": winner.family, "params": winner.params,
            **summary_dict(winner.summary), "is_published": winner.is_published,
            "distinguishable_from_published": bool(winner.diff_to_published
                                                   and not winner.diff_to_published.covers_zero),
            "beats_baseline": winner.summary.mean > outcome.baseline.get("objective", math.inf),
            "sentence": outcome.verdict},
        "winner_test": {k: summary_dict(s) for k, s in outcome.winner_test.items()},
        "paper": {"family": paper_family, "label": f"{paper_family} (paper, BERT-base, reported)",
                  "figures": family_paper} if family_paper else None,
        "seed_noise_std": outcome.seed_noise_std,
        "best_checkpoint": outcome.best_checkpoint,
        "registered_model": {"name": outcome.experiment, "version": outcome.model_version},
    }


def _trial_timings(trials: list[TrialRecord], plan: SearchSpace, cluster: dict, phases: dict) -> dict[str, float]:
    """Sums over every trial, and how busy the concurrent trial slots were with training and evaluating."""
    sums = {key: sum(t.timings.get(key, 0.0) for t in trials) for key in TIMING_KEYS}
    slots = _max_concurrent(plan, cluster)
    busy_window = (phases.get("time_search_s", 0.0) + phases.get("time_confirm_s", 0.0)) * slots
    # A resumed search's trial sums hold its earlier sessions' work too, its phases this session's only: capped at 1.
    busy = sums["trial_train_s"] + sums["trial_eval_s"]
    sums["slot_utilisation"] = min(1.0, busy / busy_window) if busy_window else 0.0
    sums["concurrent_slots"] = float(slots)
    return sums
