"""raycse from Python: a search, a training and an evaluation, each one call that returns what the command prints.

    outcome = raycse.search("search_spaces/focal.yaml", num_samples=8)   # a SearchOutcome: winner, verdict, trials
    results = raycse.train(loss="focal", tau=0.05, output_dir="runs/focal")   # results.json's contents
    figures = raycse.evaluate("runs/focal/best", pooler="avg")             # {"stsb_dev": 86.7, ...}

The command line is a thin layer over these functions: `raycse search --num-samples 8` is
`raycse.search(..., num_samples=8)`, and each option is checked by the same rule in both (the `Option` tables below
for a search and an evaluation; TrainConfig's field metadata and the loss registry for a training). Every function
checks everything it was given, and opens the files it names far enough to know they are usable, before it starts
anything: a mistake raises `raycse.ConfigError` (a ValueError) naming the option, and nothing has been written, no
Ray started, no MLflow run or store created. The heavy libraries are imported inside the functions, so that
`import raycse` stays cheap.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raycse.encoder.poolers import AUTO_POOLER, POOLERS
from raycse.errors import ConfigError, shown
from raycse.settings.checks import (
    CONFIRM_SEEDS_LIMIT,
    INT_LIMIT,
    SEED_LIMIT,
    check_bool,
    check_choice,
    check_int,
    check_name,
    check_path_text,
    check_writable_dir,
    check_writable_file,
)
from raycse.settings.config import TrainConfig
from raycse.tracking.stores import resolve_tracking_uri, state_layout

if TYPE_CHECKING:
    from raycse.bench.dry_run import DryRun
    from raycse.comparing import ComparisonOutcome
    from raycse.driver.outcome import SearchOutcome
    from raycse.exporting import ExportResult
    from raycse.reporting.status import SearchStatus
    from raycse.settings.space import SearchSpace
    from raycse.training.result import TrainResult

TRACKING_HELP = "default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db"
DEFAULT_EVAL_STEPS = TrainConfig.eval_steps  # the interval a training evaluates at when none is given


@dataclass(frozen=True)
class Option:
    """One option of a command: its Python name (the flag is --name-with-dashes), type, default, help and rule."""

    name: str
    kind: type  # int | str | bool
    default: Any
    help: str
    low: int | None = None
    high: int | None = None
    choices: tuple | None = None
    path: bool = False  # a string that names a file or directory

    def check(self, value: Any) -> Any:
        if value is None and self.default is None:
            return None
        if self.kind is bool:
            return check_bool(self.name, value)
        if self.kind is int:
            return check_int(self.name, value, low=self.low, high=self.high)
        if self.choices:
            return check_choice(self.name, value, self.choices)
        return check_path_text(self.name, value) if self.path else _check_text(self.name, value)


SEARCH_OPTIONS = (
    Option("num_samples", int, None, "search-stage trials (default: the file's)", low=1, high=INT_LIMIT),
    Option("max_concurrent", int, None, "trials at once (default: what fits)", low=1, high=INT_LIMIT),
    Option("seed", int, None, "the sampler's seed (default: the file's)", low=0, high=SEED_LIMIT),
    Option("choose_seeds", int, None, "fresh seeds on which the top configurations are chosen among (default: the "
           "file's)", low=1, high=CONFIRM_SEEDS_LIMIT),
    Option("judge_seeds", int, None, "fresh seeds on which the winner and the published point are judged (default: "
           "the file's; 2, the least that gives an interval)", low=2, high=CONFIRM_SEEDS_LIMIT),
    Option("confirm", bool, True, "no choosing or judging: the search stage's best, from one seed, unjudged (Python: "
           "confirm=False)"),
    Option("tracking_uri", str, None, TRACKING_HELP),
    Option("optuna_storage", str, None, "the Optuna study's storage (default: optuna.db beside a SQLite MLflow "
           "store, else in the working directory)"),
    Option("state", str, None, "one place for all of the search's state: a directory (mlflow.db, "
           "mlflow-artifacts/, optuna.db, ray_results/) or object storage (s3://bucket/prefix: Tune's state, "
           "checkpoints, MLflow artifacts; then name the two databases); the flags below override it", path=True),
    Option("storage_path", str, None, "Tune state and checkpoints (a path or s3://...; default: STATE/ray_results, "
           "else ray_results)", path=True),
    Option("budget", str, "auto", "auto: the file's cpu_budget when the Ray cluster has no GPU",
           choices=("auto", "cpu", "full")),
    Option("resume", bool, False, "continue an interrupted search (either stage)"),
    Option("experiment", str, None, "the search's name: its MLflow experiment, Optuna study, Tune folder and "
           "registered model (default: the file's `experiment`), so that one file can be searched twice"),
)

EVAL_OPTIONS = (
    Option("model", str, "minilm", "'minilm' (packaged), a local directory or a hub id", path=True),
    Option("pooler", str, AUTO_POOLER, "auto: the model's own pooling, else SimCSE's cls_before_pooler",
           choices=(AUTO_POOLER, *POOLERS)),
    Option("tasks", str, "stsb-dev", "what to score", choices=("stsb-dev", "sts", "all")),
    Option("batch_size", int, 128, "sentences encoded at once", low=1, high=INT_LIMIT),
    Option("max_len", int, None, "truncate sentences (default: the model's limit)", low=3, high=INT_LIMIT),
    Option("trust_remote_code", bool, False, "let transformers run code shipped with the model"),
    Option("output", str, None, "write the figures as JSON here", path=True),
)

EXPORT_OPTIONS = (
    Option("tracking_uri", str, None, TRACKING_HELP),
    Option("push_to_hub", str, None, "then upload the folder to this Hugging Face Hub repository (OWNER/NAME)"),
    Option("private", bool, False, "with --push-to-hub: create the repository private"),
    Option("loss", str, None, "EXPERIMENT is a comparison (raycse compare): export this loss's tuned winner"),
)

REPORT_OPTIONS = (
    Option("tracking_uri", str, None, TRACKING_HELP),
    Option("optuna_storage", str, None, "default: the storage the search recorded"),
    Option("output_dir", str, "report", "where index.html (and its images, also inline) go", path=True),
)


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError.at(name, f"must be a non-empty string, got {shown(value)}")
    return value


def _checked(options: tuple[Option, ...], values: dict[str, Any]) -> dict[str, Any]:
    by_name = {option.name: option for option in options}
    return {name: by_name[name].check(value) for name, value in values.items()}


# ------------------------------------------------------------------------------------------------- search
def search(space: str | os.PathLike | SearchSpace, *, num_samples: int | None = None,
           max_concurrent: int | None = None, seed: int | None = None, choose_seeds: int | None = None,
           judge_seeds: int | None = None, confirm: bool = True, tracking_uri: str | None = None,
           optuna_storage: str | None = None, storage_path: str | None = None, state: str | None = None,
           budget: str = "auto", resume: bool = False, experiment: str | None = None,
           log: Callable[[str], None] | None = None, _started_at: float | None = None) -> SearchOutcome:
    """Run (or, with resume=True, continue) a search over a space file; returns its `SearchOutcome`.

    The outcome holds the answer: `outcome.winner` (the winning configuration: {"family", "params"}),
    `outcome.verdict` (the answer in one sentence), `outcome.decision` (the choosing and judging seeds' figures;
    `.versus_published` is the winner - published interval on dev; None with confirm=False),
    `outcome.trials` (every trial of every stage; `outcome.trials_dataframe()` as a table), `outcome.best_checkpoint`,
    and `outcome.summary` (the search's summary; its "report" is the report page). The options are the command
    line's (`raycse search --help`) by their Python names; `log` receives the progress lines (default: printed).
    `raycse.load(experiment)` returns the same outcome later.
    """
    import time

    started_at = time.perf_counter() if _started_at is None else _started_at
    space, options = _search_inputs(space, locals())
    from raycse.driver.run import finish, run_search
    from raycse.driver.state import SearchOptions, say

    options = SearchOptions(**options, started_at=started_at)
    outcome = run_search(space, options, log=log or say)  # checks what the search reads (preflight.py) first
    finish(outcome, options.tracking_uri)
    return outcome


def _search_inputs(space, given: dict[str, Any]) -> tuple[SearchSpace, dict[str, Any]]:
    """The space (loaded, its experiment renamed when asked) and the checked options of a search or a plan."""
    import dataclasses

    from raycse.settings.space import SearchSpace, load_space

    values = _checked(SEARCH_OPTIONS, {option.name: given[option.name] for option in SEARCH_OPTIONS})
    experiment = values.pop("experiment")
    if experiment is not None:
        check_name("experiment", experiment)
    if not isinstance(space, SearchSpace):
        if not isinstance(space, (str, os.PathLike)):
            raise ConfigError.at("space", f"must be a space file's path or a SearchSpace, got {shown(space)}")
        space = load_space(space)
    if experiment is not None:
        space = dataclasses.replace(space, experiment=experiment)
    state = values.pop("state")
    layout = state_layout(state, values["tracking_uri"], values["optuna_storage"],
                          values["storage_path"])  # one place for the stores, each flag an override
    named_by = dict(layout.named_by)
    if layout.tracking_uri is None and os.environ.get("MLFLOW_TRACKING_URI"):
        named_by["tracking_uri"] = "$MLFLOW_TRACKING_URI"
    uri = resolve_tracking_uri(layout.tracking_uri, name=named_by["tracking_uri"])  # --resume: preflight.py finds it
    values.update(tracking_uri=uri, optuna_storage=layout.optuna_storage, storage_path=layout.storage_path,
                  state=state, artifact_location=layout.artifacts_for(uri), store_flags=named_by)
    return space, values


COMPARE_OPTIONS = tuple(option for option in SEARCH_OPTIONS
                        if option.name not in ("confirm", "resume", "experiment")) + (
    Option("experiment", str, None, "the comparison's name: its MLflow experiment; each loss's search is the "
           "experiment NAME-LOSS (default: compare-LOSS1-LOSS2...)"),
    Option("output_dir", str, "compare", "where compare_summary.json goes", path=True),
)


def compare(spaces: list[str | os.PathLike | SearchSpace], *, num_samples: int | None = None,
            max_concurrent: int | None = None, seed: int | None = None, choose_seeds: int | None = None,
            judge_seeds: int | None = None, tracking_uri: str | None = None, optuna_storage: str | None = None,
            storage_path: str | None = None, state: str | None = None, budget: str = "auto",
            experiment: str | None = None, output_dir: str = "compare",
            log: Callable[[str], None] | None = None) -> ComparisonOutcome:
    """Compare losses fairly: each space (one loss each) searched with the same budget, then every loss's tuned
    winner and published point judged together on the same fresh seeds, on the seven-task test average, with
    Holm's family-wise error control over every comparison (docs/compare.md). Returns the `ComparisonOutcome`:
    `.summary` (compare_summary.json's contents: the arms' figures and `pairs`, each with its adjusted interval,
    n and verdict), `.searches` (each loss's `SearchOutcome`), `.parent_run_id`. The options are `raycse compare`'s.
    Every space and option is checked before anything starts (a ConfigError otherwise)."""
    from pathlib import Path

    if isinstance(spaces, (str, os.PathLike)) or not isinstance(spaces, (list, tuple)):
        raise ConfigError.at("space", f"must be a list of space files, got {shown(spaces)}")
    given = dict(locals())
    values = _checked(COMPARE_OPTIONS, {option.name: given[option.name] for option in COMPARE_OPTIONS})
    name, out = values.pop("experiment"), values.pop("output_dir")
    loaded, options = [], None
    for space in spaces:
        space, options = _search_inputs(space, {**values, "confirm": True, "resume": False, "experiment": None})
        loaded.append(space)
    from raycse.comparing import check_comparison, label_of, run_comparison
    from raycse.driver.state import SearchOptions, say

    if not loaded:
        raise ConfigError.at("space", "a comparison needs at least two spaces, got 0")
    options = SearchOptions(**options, comparison=True)
    check_comparison(loaded, options)
    name = check_name("experiment", name if name is not None else "compare-" + "-".join(map(label_of, loaded)))
    out_dir = check_writable_dir("output_dir", out)
    return run_comparison(loaded, options, name, Path(out_dir), log=log or say)


def plan(space: str | os.PathLike | SearchSpace, *, step_ms: float | None = None, gpus: int | None = None,
         **options: Any) -> DryRun:
    """What `search(space, **options)` would run, and what it would cost, without running anything: the budget
    chosen, every stage with its trials, seeds and resources, and trial-hours and GPU-hours. `step_ms` is a training
    step's milliseconds (None: a few steps and one evaluation are measured on this machine); `gpus` plans for that
    many GPUs (None: this machine's). No store, folder or Ray cluster is created."""
    from raycse.bench.dry_run import plan_search
    from raycse.settings.checks import check_number

    unknown = sorted(set(options) - {option.name for option in SEARCH_OPTIONS})
    if unknown:
        raise ConfigError.at(unknown[0], f"not an option of a search (options: "
                                         f"{', '.join(o.name for o in SEARCH_OPTIONS)})")
    if step_ms is not None:
        check_number("step_ms", step_ms, low=0.0, strict=True)
    if gpus is not None:
        check_int("gpus", gpus, low=0, high=INT_LIMIT)
    space, values = _search_inputs(space, {**{o.name: o.default for o in SEARCH_OPTIONS}, **options})
    return plan_search(space, values, step_ms=step_ms, gpus=gpus)


# ------------------------------------------------------------------------------------------------- train
def train(*, output_dir: str, model: str = "minilm", loss: str = "simcse", reg: str | None = None,
          pooler: str = "auto", eval_pooler: str | None = None, batch_size: int = 64,
          mini_batch_size: int | None = None, lr: float = 3e-5, weight_decay: float = 0.0,
          max_grad_norm: float = 1.0, epochs: int = 1,
          max_steps: int | None = None, eval_steps: int | None = None, max_len: int = 32, objective: str = "stsb_dev",
          objective_columns: str | None = None, corpus: str = "wiki-sample", sup_data: str | None = None,
          replace_bad_bytes: bool = False, max_sentences: int | None = None, seed: int = 42, workers: int = 1,
          gpus_per_worker: float | None = None, complementary: str | None = None, precision: str = "auto",
          compile: str = "auto", test_eval: bool = True, trust_remote_code: bool = False,
          hparams: dict[str, float] | None = None, resume: bool = False, tracking_uri: str | None = None,
          mlflow: bool = True, **hyperparameters: float) -> TrainResult:
    """Train one encoder with one loss (the body of every search trial); returns its `TrainResult`.

    The settings are `raycse train`'s flags by their Python names (`raycse train --help` says what each does);
    the loss hyperparameters go by the papers' names, as keywords (tau=0.05, m=0.2) or as one mapping
    (hparams={"tau": 0.05}); a name no loss takes is refused. eval_steps=None evaluates every 125 steps, or once at
    the end of a shorter run; gpus_per_worker=None takes a GPU when CUDA is available. The run is recorded in
    MLflow (experiment raycse-train) unless mlflow=False; resume=True continues an interrupted training from
    output_dir/last.
    """
    settings = {name: value for name, value in locals().items()
                if name not in ("output_dir", "resume", "tracking_uri", "mlflow", "hyperparameters")}
    settings.update(hyperparameters)
    config = prepare_training(output_dir=output_dir, resume=resume, settings=settings)
    uri = resolve_tracking_uri(tracking_uri) if check_bool("mlflow", mlflow) else None
    examples = config.open_inputs()  # the data, the model and the objective opened: errors now, not later
    from raycse.losses import build_loss
    from raycse.training.launch import run_training
    from raycse.training.result import TrainResult

    if eval_steps is None and config.max_steps is not None and config.eval_steps == config.max_steps:
        print(f"evaluating at step {config.max_steps}, the run's end: the default interval ({DEFAULT_EVAL_STEPS} "
              "steps) is longer than the run", flush=True)
    if config.complementary is None and build_loss(config.loss, config.reg).needs_complementary:
        print(f"{config.loss} without complementary: the frozen complementary model is a copy of the starting "
              "weights, not the trained SimCSE model the paper uses (raycse search trains one first; pass "
              "complementary=DIR, --complementary DIR, to use yours).", flush=True)
    results = run_training(config, tracking_uri=uri, resume=resume,
                           examples=examples if config.workers == 1 else None)
    return TrainResult.from_results(config.output_dir, results)


def prepare_training(output_dir: str, resume: bool, settings: dict[str, Any]):
    """The validated TrainConfig of a training, its output directory checked (nothing read, nothing written)."""
    import dataclasses

    from raycse.losses import hyperparameter_catalogue
    from raycse.settings.config import TrainConfig

    check_bool("resume", resume)
    fields = {f.name for f in dataclasses.fields(TrainConfig) if f.name != "output_dir"}
    catalogue = hyperparameter_catalogue()
    unknown = sorted(set(settings) - fields - set(catalogue))
    if unknown:
        raise ConfigError.at(unknown[0], f"not a training setting nor a loss hyperparameter (settings: "
                                         f"{', '.join(sorted(fields))}; hyperparameters: {', '.join(catalogue)})")
    if settings.get("eval_steps") is None:  # not given: every 125 steps, or once at the end of a shorter run
        settings.pop("eval_steps", None)
        max_steps = settings.get("max_steps")
        if isinstance(max_steps, int) and not isinstance(max_steps, bool) and 0 < max_steps < DEFAULT_EVAL_STEPS:
            settings["eval_steps"] = max_steps
    hparams = settings.pop("hparams", None) or {}
    if not isinstance(hparams, dict):
        raise ConfigError.at("hparams", f"must be a mapping of hyperparameters to numbers, got {shown(hparams)}")
    hparams = dict(hparams)
    hparams.update({name: settings.pop(name) for name in list(settings) if name in catalogue})
    if settings.get("gpus_per_worker") is None:
        import torch

        settings["gpus_per_worker"] = 1.0 if torch.cuda.is_available() else 0.0
    config = TrainConfig(**settings, hparams=hparams, output_dir=output_dir).validate()
    output = check_writable_dir("output_dir", output_dir)
    if resume:
        if not (output / "last").is_dir():
            raise ConfigError.at("resume", f"{str(output)!r} holds no last/ checkpoint to resume from")
        if (output / "results.json").exists():
            raise ConfigError.at("resume", f"{str(output)!r} holds a finished training (results.json)")
    elif output.is_dir() and any(output.iterdir()):
        raise ConfigError.at("output_dir", f"{str(output)!r} exists and is not empty (pass --resume to continue it)")
    if config.workers > 1 and not os.environ.get("RAY_ADDRESS") and config.workers > (os.cpu_count() or 1):
        raise ConfigError.at("workers", f"{config.workers} workers of one CPU each on a machine with "
                                        f"{os.cpu_count()}: Ray would wait for them forever")
    return config


# ------------------------------------------------------------------------------------------------- evaluate
def evaluate(model: str = "minilm", pooler: str = "auto", tasks: str = "stsb-dev", *,
             batch_size: int = 128, max_len: int | None = None, trust_remote_code: bool = False,
             output: str | None = None) -> dict[str, float]:
    """Score an encoder ('minilm', a local directory such as a search's best checkpoint, or a hub id) the way
    SentEval does: {"stsb_dev": ...} for tasks="stsb-dev", the seven STS tasks and their mean for "sts", all of it
    with SICK-R dev, alignment and uniformity for "all". pooler="auto" pools as the model declares it does (a
    sentence-transformers model's own pooling, a raycse checkpoint's), else as SimCSE evaluates (cls_before_pooler).
    `output`: also write the figures there as JSON."""
    values = _checked(EVAL_OPTIONS, {"model": model, "pooler": pooler, "tasks": tasks, "batch_size": batch_size,
                                     "max_len": max_len, "trust_remote_code": trust_remote_code, "output": output})
    from raycse.evaluation.sts import run_eval
    from raycse.files import write_json_atomic

    if output is not None:
        check_writable_file("output", output)
    pooler = evaluation_pooler(values["model"], pooler, trust_remote_code)
    figures = run_eval(values["model"], pooler=pooler, tasks=tasks, batch_size=batch_size, max_len=max_len,
                       trust_remote_code=trust_remote_code)
    if output is not None:
        write_json_atomic(output, figures)
    return figures


def evaluation_pooler(model: str, pooler: str = "auto", trust_remote_code: bool = False) -> str:
    """The pooler an evaluation of `model` uses: `pooler` itself, or for 'auto' the model's own. The model is
    checked first (its files, that it is a text encoder): a ConfigError naming it otherwise."""
    values = _checked(EVAL_OPTIONS, {"model": model, "pooler": pooler, "trust_remote_code": trust_remote_code})
    model, pooler = values["model"], values["pooler"]  # the cheap checks first, before the model is looked at
    from raycse.encoder.loading import check_loadable
    from raycse.encoder.model import resolve_poolers

    try:
        check_loadable(model, trust_remote_code)
    except ConfigError as err:
        raise ConfigError.at("model", str(err)) from None
    if pooler != AUTO_POOLER:
        return pooler
    return resolve_poolers(model, AUTO_POOLER, None, supervised=False)[1]


# ------------------------------------------------------------------------------------------------- report
def report(experiment: str, *, tracking_uri: str | None = None, optuna_storage: str | None = None,
           output_dir: str = "report") -> str:
    """Write the report page of an experiment's latest search (output_dir/index.html), log it on the search's
    parent run, and return the text `raycse report` prints. Reads the stores, creates neither."""
    from raycse.tracking.stores import check_optuna_storage

    check_name("experiment", experiment)
    values = _checked(REPORT_OPTIONS, {"tracking_uri": tracking_uri, "optuna_storage": optuna_storage,
                                       "output_dir": output_dir})
    uri = resolve_tracking_uri(values["tracking_uri"], must_exist=True)
    if optuna_storage is not None:
        check_optuna_storage("optuna_storage", optuna_storage, must_exist=True)
    out_dir = check_writable_dir("output_dir", output_dir)
    from raycse.reporting import report_experiment
    from raycse.reporting.load import load_search

    record = load_search(uri, experiment, optuna_storage)  # the experiment, its search and study: read, never made
    return report_experiment(uri, experiment, out_dir, optuna_storage, record=record)


# ------------------------------------------------------------------------------------------------- load
def load(experiment: str, tracking_uri: str | None = None) -> SearchOutcome:
    """The outcome of the experiment's latest finished search, as `search` returned it: the same winner, decision,
    verdict, trials and timings, read from the tracking store (default: $MLFLOW_TRACKING_URI, else
    sqlite:///mlflow.db). Reads the store, creates nothing."""
    check_name("experiment", experiment)
    uri = resolve_tracking_uri(tracking_uri, must_exist=True)
    from raycse.driver.loaded import outcome_from_summary
    from raycse.reporting.load import latest_summary
    from raycse.tracking.tracker import Tracker

    tracker = Tracker.existing(uri, experiment)
    parent_run_id, summary = latest_summary(tracker)
    parent = tracker.run(parent_run_id)
    return outcome_from_summary(summary, parent_run_id, parent.info.run_name, parent.data.params)


# ------------------------------------------------------------------------------------------------- status
def status(experiment: str, *, tracking_uri: str | None = None) -> SearchStatus:
    """Where the experiment's latest search stands (its stage, trials done and planned, the best so far, the running
    trials, the time spent and left), read from MLflow while it runs or after; reads the store, creates nothing."""
    check_name("experiment", experiment)
    uri = resolve_tracking_uri(tracking_uri, must_exist=True)
    from raycse.reporting.status import search_status

    return search_status(uri, experiment)


# ------------------------------------------------------------------------------------------------- export
def export(experiment: str, folder: str | os.PathLike, *, tracking_uri: str | None = None,
           push_to_hub: str | None = None, private: bool = False, loss: str | None = None) -> ExportResult:
    """Write the winner of an experiment's latest search to `folder` (new, or empty) as a sentence-transformers
    model folder with its model card (README.md); with `push_to_hub=OWNER/NAME`, upload it too. Returns the
    `ExportResult` (the folder, the parent run, the card) and, when pushed, its `.url`. Reads the store, creates
    none; nothing is written before the store, the experiment and the folder have been checked. With `loss`, the
    experiment is a comparison's (`raycse.compare`) and that loss's tuned winner is exported."""
    from raycse.exporting import check_repo_id, check_target

    check_name("experiment", experiment)
    if not isinstance(folder, (str, os.PathLike)):
        raise ConfigError.at("dir", f"must be a folder's path, got {shown(folder)}")
    values = _checked(EXPORT_OPTIONS, {"tracking_uri": tracking_uri, "push_to_hub": push_to_hub,
                                       "private": private, "loss": loss})
    if values["push_to_hub"] is not None:
        check_repo_id(values["push_to_hub"])
    out_dir = check_writable_dir("dir", os.fspath(folder))
    check_target(out_dir)
    uri = resolve_tracking_uri(values["tracking_uri"], must_exist=True)
    from raycse import exporting

    if values["loss"] is not None:  # a comparison: the loss's own search, an experiment of its own
        from raycse.comparing import comparison_loss_experiment

        experiment = comparison_loss_experiment(uri, experiment, values["loss"])
    result = exporting.export_winner(uri, experiment, out_dir, model_id=values["push_to_hub"])
    if values["push_to_hub"] is not None:
        result.url = exporting.push_to_hub(result.folder, values["push_to_hub"], private=values["private"])
    return result
