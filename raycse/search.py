"""`raycse search`: Ray Tune + Optuna (TPE) + ASHA over a search-space file; every trial in MLflow.

Each trial runs the trainer of `raycse.trainer`: in process for one worker, through Ray Train's
`TorchTrainer` for several (Ray 2.60 runs Train V2: this Tune function trainable starts the TorchTrainer
and `TuneReportCallback` forwards its reports). Trials report the STS-B dev figure at every evaluation,
which drives ASHA and Optuna, and persist the best checkpoint through Tune's storage. MLflow is written by
the driver alone (a Tune callback), so a SQLite store is never written concurrently. Knows nothing of loss
internals: a trial is a `TrainConfig`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.config import TrainConfig
from raycse.errors import ConfigError
from raycse.evaluation import RESULTS_OF_TASKS
from raycse.space import SearchSpace
from raycse.tracking import SEARCH_TAG, STATUS_TAG, TRIAL_TAG, Tracker, training_params

METRIC = "stsb_dev"
WORST_SPEARMAN = -100.0  # the objective of a diverged trial
PATH_TAG = "raycse.experiment_path"  # where Tune keeps the search's state: finds the parent run on --resume
# what a trial's best checkpoint is scored on at the end: evaluation's 'all' set less the dev objective itself
FINAL_KEYS = tuple(k for k in RESULTS_OF_TASKS["all"] if k != METRIC)


# ---------------------------------------------------------------------------------- inside a trial
def _eval_metrics(report) -> dict[str, float]:
    return {"step": report.step, METRIC: report.stsb_dev, "best_stsb_dev": report.best_stsb_dev,
            "best_step": report.best_step, "train_loss": report.train_loss,
            "sentences_per_s": report.sentences_per_s}


def _final_metrics(results: dict) -> dict[str, Any]:
    """The last report of a trial: its best dev figure as the objective, plus the test figures if scored."""
    final = {"step": results["steps"], METRIC: results["best_stsb_dev"], "best_stsb_dev": results["best_stsb_dev"],
             "best_step": results["best_step"], "sentences_per_s": results["sentences_per_s"], "final": 1}
    final.update({k: results[k] for k in FINAL_KEYS if k in results})
    return final


def _train_to_final_metrics(config: TrainConfig, report_eval) -> dict[str, Any]:
    """Train, reporting each evaluation; return the trial's last report.

    A diverged training is an outcome, not a crash: it ends with the worst possible objective (so ASHA and
    Optuna learn from it) and `diverged: 1`, and Ray's FailureConfig is left to retry real crashes only.
    """
    from raycse.trainer import TrainingDiverged, train

    evaluations = []

    def on_eval(report) -> None:
        evaluations.append(report)
        report_eval(report)

    try:
        return _final_metrics(train(config, on_eval=on_eval))
    except TrainingDiverged as err:
        last = evaluations[-1] if evaluations else None
        return {"step": err.step, METRIC: WORST_SPEARMAN, "final": 1, "diverged": 1, "error": str(err),
                "best_stsb_dev": last.best_stsb_dev if last else WORST_SPEARMAN, "best_step": last.best_step if last else 0}


def _worker_loop(loop_config: dict) -> None:
    """One Ray Train worker of a multi-worker trial (torch.distributed is set up by TorchTrainer)."""
    import ray.train

    config = TrainConfig(**loop_config["config"])
    config.output_dir = tempfile.mkdtemp(prefix="raycse-worker-")  # local; checkpoints persist via ray.train.report

    def report_eval(report) -> None:
        checkpoint = ray.train.Checkpoint.from_directory(report.checkpoint) if report.checkpoint else None
        ray.train.report(_eval_metrics(report), checkpoint=checkpoint)  # every worker: it is a barrier

    # every worker diverges at the same step (the non-finite flag is all-reduced), so reports stay paired
    ray.train.report(_train_to_final_metrics(config, report_eval))


def run_trial(sampled: dict, space: SearchSpace) -> None:
    """The Tune function trainable: one training with the sampled hyperparameters."""
    from ray import tune

    config = space.trial_config(sampled)
    config = dataclasses.replace(
        config, workers=space.resources.workers, gpus_per_worker=space.resources.gpus_per_worker,
        test_eval=space.test_eval == "all", output_dir=os.path.join(tune.get_context().get_trial_dir(), "train"))
    if config.workers == 1:
        def report_eval(report) -> None:
            checkpoint = tune.Checkpoint.from_directory(report.checkpoint) if report.checkpoint else None
            tune.report(_eval_metrics(report), checkpoint=checkpoint)

        tune.report(_train_to_final_metrics(config, report_eval))
        return

    from ray.tune.integration.ray_train import TuneReportCallback

    from raycse.launch import torch_trainer

    context = tune.get_context()
    torch_trainer(_worker_loop, config, cpus_per_worker=space.resources.cpus_per_worker,
                  storage_path=os.path.dirname(context.get_trial_dir()), name=f"{context.get_trial_id()}-train",
                  callbacks=[TuneReportCallback()]).fit()


# ------------------------------------------------------------------------------ driver-side MLflow
def say(message: str) -> None:
    """The search's progress lines (a module function: Tune pickles the callback that holds it)."""
    print(message, flush=True)


def _make_callback_class():
    """The Tune callback that writes every trial to MLflow from the driver (built lazily: Ray imports late)."""
    from ray import tune

    class MlflowSearchCallback(tune.Callback):
        def __init__(self, tracking_uri: str, experiment: str, parent_run_id: str, space: SearchSpace, log=say):
            self.tracking_uri, self.experiment, self.parent_run_id, self.space = tracking_uri, experiment, parent_run_id, space
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
                run_id = self.tracker.start_run(trial.trial_id, tags={TRIAL_TAG: trial.trial_id, STATUS_TAG: "running"},
                                                parent_run_id=self.parent_run_id)
            self.run_ids[trial.trial_id] = run_id
            return run_id

        def on_trial_start(self, iteration, trials, trial, **info):
            run_id = self._run(trial)
            self.tracker.client.update_run(run_id, status="RUNNING")
            config = self.space.trial_config(trial.config)
            self.tracker.log_params(run_id, {"loss_family": self._family(trial.config), **training_params(config.to_dict())})

        def _family(self, sampled: dict) -> str:
            return sampled["loss"] if self.space.conditional else next(iter(self.space.families))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            run_id = self._run(trial)
            if result.get("final"):
                if result.get("diverged"):
                    self.log(f"trial {trial.trial_id}  diverged: {result.get('error')}")
                self.tracker.log_metrics(run_id, {k: result[k] for k in FINAL_KEYS if k in result})
                self.tracker.log_metrics(run_id, {"best_stsb_dev": result["best_stsb_dev"],
                                                  "best_step": result["best_step"]})
            else:
                self.tracker.log_metrics(run_id, {k: result[k] for k in (METRIC, "train_loss", "sentences_per_s",
                                                                       "best_stsb_dev") if k in result},
                                         step=int(result["step"]))
                self.log(f"trial {trial.trial_id}  {self._family(trial.config):<13} step {int(result['step']):>6}  "
                         f"loss {result.get('train_loss', float('nan')):8.4f}  STS-B dev {result[METRIC]:6.2f}  "
                         f"(best {result['best_stsb_dev']:6.2f})  {result.get('sentences_per_s', 0):8.1f} sentences/s")

        def on_trial_complete(self, iteration, trials, trial, **info):
            run_id = self._run(trial)
            last = trial.last_result or {}
            if last.get("diverged"):
                self.tracker.set_tags(run_id, {STATUS_TAG: "diverged", "raycse.error": last.get("error", ""),
                                               "raycse.steps": last.get("step", 0)})
                self.tracker.end_run(run_id, "FAILED")
                return
            status = "finished" if last.get("final") else "stopped early (ASHA)"
            self.log(f"trial {trial.trial_id}  {status}: best STS-B dev {last.get('best_stsb_dev', float('nan')):.2f}")
            self.tracker.set_tags(run_id, {STATUS_TAG: status, "raycse.steps": last.get("step", 0)})
            self.tracker.end_run(run_id, "FINISHED")

        def on_trial_error(self, iteration, trials, trial, **info):
            run_id = self._run(trial)
            error = _trial_error(trial)  # divergence never lands here: it ends a trial normally
            self.log(f"trial {trial.trial_id}  failed: {error}")
            self.tracker.set_tags(run_id, {STATUS_TAG: "failed", "raycse.error": error,
                                           "raycse.steps": (trial.last_result or {}).get("step", 0)})
            self.tracker.end_run(run_id, "FAILED")

    return MlflowSearchCallback


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


# -------------------------------------------------------------------------------------- the search
@dataclass
class SearchOptions:
    tracking_uri: str
    storage_path: str
    resume: bool = False
    num_samples: int | None = None
    max_concurrent: int | None = None
    seed: int | None = None
    budget: str = "auto"  # auto | cpu | full
    name: str | None = None


@dataclass
class TrialSummary:
    trial_id: str
    family: str
    params: dict[str, Any]
    best_stsb_dev: float | None
    status: str
    steps: int
    checkpoint: str | None = None


@dataclass
class SearchSummary:
    experiment: str
    parent_run_id: str
    budget: str
    trials: list[TrialSummary]
    best: TrialSummary | None
    best_config: dict[str, Any] | None
    best_test: dict[str, float] = field(default_factory=dict)
    best_checkpoint: str | None = None
    model_version: str | None = None
    wall_seconds: float = 0.0


def experiment_dir_name(experiment: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-") or "raycse"


def run_search(space: SearchSpace, options: SearchOptions, log=say) -> SearchSummary:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    started = time.perf_counter()
    if options.seed is not None:
        space.seed = options.seed

    name = options.name or experiment_dir_name(space.experiment)
    storage_path = options.storage_path if "://" in options.storage_path else str(Path(options.storage_path).resolve())
    experiment_path = f"{storage_path.rstrip('/')}/{name}"  # also an s3:// or gs:// URI on a cluster
    exists = tune.Tuner.can_restore(experiment_path)
    if options.resume and not exists:
        raise ConfigError(f"--resume: no search to resume at {experiment_path!r}")
    if not options.resume and exists:
        raise ConfigError(f"a search already exists at {experiment_path!r}: pass --resume to continue it, "
                          "or a new --storage-path / experiment name")

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false",
                                           "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0")}})
    budget = options.budget if options.budget != "auto" else _auto_budget(ray.cluster_resources())
    if budget == "cpu":
        space.apply_cpu_budget()
        log(f"No GPU in the Ray cluster: using the CPU budget of {space.path} "
            f"({space.num_samples} trials, batch {space.base.batch_size}, "
            f"{space.base.max_steps or 'all'} steps, STS-B dev every {space.base.eval_steps} steps).")
    if options.num_samples is not None:  # an explicit flag wins over the budget
        space.num_samples = options.num_samples
    if options.max_concurrent is not None:
        space.max_concurrent = options.max_concurrent

    tracker = Tracker(options.tracking_uri, space.experiment)
    if options.resume:  # the parent run is found by the search's storage location, kept as a tag
        parent_run_id = tracker.find_run(PATH_TAG, experiment_path)
        if parent_run_id is None:
            raise ConfigError(f"--resume: no MLflow parent run for {experiment_path!r} in {options.tracking_uri} "
                              "(pass the --tracking-uri the search started with)")
        killed = tracker.mark_orphans_killed(parent_run_id)
        tracker.client.update_run(parent_run_id, status="RUNNING")
        log(f"Resuming search {name!r} (MLflow parent run {parent_run_id}; {killed} orphaned trial run(s) marked KILLED).")
    else:
        parent_run_id = tracker.start_run(name, tags={SEARCH_TAG: name, PATH_TAG: experiment_path, "raycse.budget": budget})
        tracker.log_artifact(parent_run_id, space.path)
        tracker.log_params(parent_run_id, {"space_file": os.path.basename(space.path), "num_samples": space.num_samples,
                                           "budget": budget, "seed": space.seed, "scheduler": space.scheduler["name"]})

    trainable = tune.with_resources(tune.with_parameters(run_trial, space=space), _trial_resources(space))
    if options.resume:
        # finished and errored trials stay as they are; unfinished ones run again under their own trial ids.
        # The restored run config brings back the pickled MLflow callback (it re-opens its client lazily).
        tuner = tune.Tuner.restore(experiment_path, trainable=trainable, resume_unfinished=True,
                                   resume_errored=False, restart_errored=False)
    else:
        callback = _make_callback_class()(options.tracking_uri, space.experiment, parent_run_id, space, log)
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                metric=METRIC, mode="max",
                search_alg=OptunaSearch(space=space.define_by_run, metric=METRIC, mode="max",
                                        points_to_evaluate=space.points_to_evaluate() or None,
                                        sampler=optuna.samplers.TPESampler(seed=space.seed)),
                scheduler=_scheduler(space, ASHAScheduler, FIFOScheduler),
                num_samples=space.num_samples,
                max_concurrent_trials=_max_concurrent(space, ray.cluster_resources()),
            ),
            run_config=tune.RunConfig(
                name=name, storage_path=storage_path, callbacks=[callback], verbose=0,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                # a crashed trial (a killed worker, a lost node) is retried once; divergence is no crash
                failure_config=tune.FailureConfig(max_failures=1),
            ),
        )
    grid = tuner.fit()
    summary = _summarise(space, grid, tracker, parent_run_id, budget, log)
    summary.wall_seconds = time.perf_counter() - started
    tracker.log_metrics(parent_run_id, {"wall_seconds": summary.wall_seconds})
    tracker.end_run(parent_run_id, "FINISHED")
    return summary


def _auto_budget(cluster: dict) -> str:
    """'full' where there is a GPU to use, else the file's CPU budget.

    A cluster that autoscales GPU workers from zero shows no GPU until a trial asks for one, so a driver that
    joined an existing cluster (RAY_ADDRESS, as `ray job submit` sets) counts as having GPUs; pass
    `--budget cpu` for a CPU-only cluster.
    """
    if cluster.get("GPU", 0) > 0 or os.environ.get("RAY_ADDRESS"):
        return "full"
    return "cpu"


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


def _scheduler(space: SearchSpace, asha, fifo):
    if space.scheduler["name"] == "fifo":
        return fifo()
    eval_steps = space.base.eval_steps
    # trials end on their own; max_t only caps ASHA's rungs (one past the last step keeps the final report)
    max_t = (space.base.max_steps or 10**7) + 1
    return asha(time_attr="step", max_t=max_t, grace_period=int(space.scheduler["grace_evals"] * eval_steps),
                reduction_factor=space.scheduler["reduction_factor"])


def _last_checkpoint(result) -> str | None:
    """The trial's best checkpoint: Tune's own (one worker) or the TorchTrainer's path it reported (several)."""
    if result.checkpoint is not None:
        return result.checkpoint.path
    frame = result.metrics_dataframe
    if frame is not None and "checkpoint_path" in frame:
        paths = frame["checkpoint_path"].dropna()
        return str(paths.iloc[-1]) if len(paths) else None
    return None


def _summarise(space: SearchSpace, grid, tracker: Tracker, parent_run_id: str, budget: str, log) -> SearchSummary:
    trials = []
    for result in grid:
        trial_id = result.path.rstrip("/").split("/")[-1]
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id", trial_id)
        config = result.config or {}
        family = config.get("loss") if space.conditional else next(iter(space.families))
        params = dict(config.get(family, {})) if space.conditional else dict(config)
        status = ("failed" if result.error else "diverged" if metrics.get("diverged")
                  else "finished" if metrics.get("final") else "stopped early (ASHA)")
        checkpoint = _last_checkpoint(result)
        best = metrics.get("best_stsb_dev")
        trials.append(TrialSummary(trial_id, family, params, best if best is not None and math.isfinite(best) else None,
                                   status, int(metrics.get("step", 0) or 0), checkpoint))
    scored = [t for t in trials if t.best_stsb_dev is not None and t.checkpoint]
    best = max(scored, key=lambda t: t.best_stsb_dev, default=None)
    summary = SearchSummary(space.experiment, parent_run_id, budget, trials, best, None)
    if best is None:
        log("No trial produced a checkpoint.")
        return summary
    sampled = ({"loss": best.family, best.family: best.params} if space.conditional else best.params)
    summary.best_config = space.trial_config(sampled).to_dict()
    summary.best_checkpoint = best.checkpoint
    best_result = next(r for r in grid if (r.metrics or {}).get("trial_id") == best.trial_id)
    test = {k: best_result.metrics[k] for k in FINAL_KEYS if k in (best_result.metrics or {})}
    if not test and space.test_eval == "best":
        log("Scoring the best checkpoint on the seven STS test tasks ...")
        test = _score_checkpoint(best.checkpoint, summary.best_config)
        best_run = tracker.find_run(TRIAL_TAG, best.trial_id)
        if best_run:
            tracker.log_metrics(best_run, test)
    summary.best_test = test
    tracker.log_metrics(parent_run_id, {"best_stsb_dev": best.best_stsb_dev, **test})
    tracker.log_params(parent_run_id, {f"best.{k}": v for k, v in training_params(summary.best_config).items()})
    tracker.set_tags(parent_run_id, {"raycse.best_trial": best.trial_id, "raycse.best_checkpoint": best.checkpoint})
    tracker.log_artifacts(parent_run_id, best.checkpoint, "best_checkpoint")
    summary.model_version = tracker.register_model(parent_run_id, "best_checkpoint", space.experiment)
    return summary


def _score_checkpoint(path: str, config: dict) -> dict[str, float]:
    from raycse.evaluation import evaluate_encoder
    from raycse.model import Encoder

    pooler = TrainConfig(**config).resolved_eval_pooler
    encoder = Encoder.from_pretrained(path, pooler=pooler)
    results = evaluate_encoder(lambda s: encoder.encode(s, batch_size=128, pooler=pooler), tasks="all")
    return {k: results[k] for k in FINAL_KEYS if k in results}
