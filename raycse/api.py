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
from raycse.tracking.stores import resolve_tracking_uri, state_layout

if TYPE_CHECKING:
    from raycse.driver.outcome import SearchOutcome
    from raycse.export import ExportResult
    from raycse.settings.space import SearchSpace

TRACKING_HELP = "default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db"


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
)

EVAL_OPTIONS = (
    Option("model", str, "minilm", "'minilm' (packaged), a local directory or a hub id", path=True),
    Option("pooler", str, "cls_before_pooler", "cls | cls_before_pooler | avg | avg_first_last | avg_top2"),
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
           budget: str = "auto", resume: bool = False,
           log: Callable[[str], None] | None = None, started_at: float | None = None) -> SearchOutcome:
    """Run (or, with resume=True, continue) a search over a space file; returns its `SearchOutcome`.

    The outcome holds the answer: `outcome.winner` (the winning configuration: {"family", "params"}),
    `outcome.verdict` (the answer in one sentence), `outcome.decision` (raycse/driver/decision.py: the judging
    seeds' figures, `.versus_published` the winner - published interval on dev; None with confirm=False),
    `outcome.trials` (every trial of every stage), `outcome.best_checkpoint`, and `outcome.summary`
    (search_summary.json's contents; its "report" is the report page). The options are the command line's
    (`raycse search --help`) by their Python names; `log` receives the progress lines (default: printed).
    """
    import time

    values = _checked(SEARCH_OPTIONS, {
        "num_samples": num_samples, "max_concurrent": max_concurrent, "seed": seed, "choose_seeds": choose_seeds,
        "judge_seeds": judge_seeds, "confirm": confirm, "tracking_uri": tracking_uri, "optuna_storage": optuna_storage,
        "storage_path": storage_path, "state": state, "budget": budget, "resume": resume})
    from raycse.driver.run import finish, run_search
    from raycse.driver.state import SearchOptions, say
    from raycse.settings.space import SearchSpace, load_space

    started_at = time.perf_counter() if started_at is None else started_at
    if not isinstance(space, SearchSpace):
        if not isinstance(space, (str, os.PathLike)):
            raise ConfigError.at("space", f"must be a space file's path or a SearchSpace, got {shown(space)}")
        space = load_space(space)
    layout = state_layout(values.pop("state"), values["tracking_uri"], values["optuna_storage"],
                          values["storage_path"])  # one place for the stores, each flag an override
    named_by = dict(layout.named_by)
    if layout.tracking_uri is None and os.environ.get("MLFLOW_TRACKING_URI"):
        named_by["tracking_uri"] = "$MLFLOW_TRACKING_URI"
    uri = resolve_tracking_uri(layout.tracking_uri, name=named_by["tracking_uri"])  # --resume: preflight.py finds it
    values.update(tracking_uri=uri, optuna_storage=layout.optuna_storage, storage_path=layout.storage_path)
    options = SearchOptions(**values, state=state, artifact_location=layout.artifacts_for(uri), store_flags=named_by,
                            started_at=started_at)
    outcome = run_search(space, options, log=log or say)  # checks what the search reads (preflight.py) first
    finish(outcome, options.tracking_uri)
    return outcome


# ------------------------------------------------------------------------------------------------- train
def train(*, output_dir: str, resume: bool = False, tracking_uri: str | None = None, mlflow: bool = True,
          **settings: Any) -> dict:
    """Train one encoder with one loss (the body of every search trial); returns results.json's contents.

    `settings` are `raycse train`'s flags by their Python names: TrainConfig's fields (model, loss, reg, batch_size,
    lr, max_steps, corpus, sup_data, seed, workers, ...) and the loss hyperparameters by the papers' names (tau, m,
    pos_ratio, lambda, phi, k, ...); `hparams={...}` gives the latter as one mapping. The run is recorded in MLflow
    (experiment raycse-train) unless mlflow=False; resume=True continues an interrupted training from
    output_dir/last.
    """
    config = prepare_training(output_dir=output_dir, resume=resume, settings=settings)
    uri = resolve_tracking_uri(tracking_uri) if check_bool("mlflow", mlflow) else None
    examples = config.open_inputs()  # the data, the model and the objective opened: errors now, not later
    from raycse.training.launch import run_training

    if config.loss == "dclr" and config.complementary is None:
        print("DCLR without complementary: the frozen complementary model is a copy of the starting weights, not the "
              "trained SimCSE model the paper uses (raycse search trains one first; pass complementary=DIR, "
              "--complementary DIR, to use yours).", flush=True)
    return run_training(config, tracking_uri=uri, resume=resume, examples=examples if config.workers == 1 else None)


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
def evaluate(model: str = "minilm", pooler: str = "cls_before_pooler", tasks: str = "stsb-dev", *,
             batch_size: int = 128, max_len: int | None = None, trust_remote_code: bool = False,
             output: str | None = None) -> dict[str, float]:
    """Score an encoder ('minilm', a local directory such as a search's best checkpoint, or a hub id) the way
    SentEval does: {"stsb_dev": ...} for tasks="stsb-dev", the seven STS tasks and their mean for "sts", all of it
    with SICK-R dev, alignment and uniformity for "all". `output`: also write the figures there as JSON."""
    values = _checked(EVAL_OPTIONS, {"model": model, "pooler": pooler, "tasks": tasks, "batch_size": batch_size,
                                     "max_len": max_len, "trust_remote_code": trust_remote_code, "output": output})
    from raycse.encoder.loading import check_loadable
    from raycse.encoder.model import POOLERS
    from raycse.evaluation.sts import run_eval
    from raycse.files import write_json_atomic

    if pooler not in POOLERS:
        raise ConfigError.at("pooler", f"unknown pooler {shown(pooler)} (choose from {', '.join(POOLERS)})")
    if output is not None:
        check_writable_file("output", output)
    try:
        check_loadable(model, trust_remote_code)
    except ConfigError as err:
        raise ConfigError.at("model", str(err)) from None
    figures = run_eval(values["model"], pooler=pooler, tasks=tasks, batch_size=batch_size, max_len=max_len,
                       trust_remote_code=trust_remote_code)
    if output is not None:
        write_json_atomic(output, figures)
    return figures


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
    from raycse.report import report_experiment
    from raycse.report.load import load_search

    record = load_search(uri, experiment, optuna_storage)  # the experiment, its search and study: read, never made
    return report_experiment(uri, experiment, out_dir, optuna_storage, record=record)


# ------------------------------------------------------------------------------------------------- export
def export(experiment: str, folder: str | os.PathLike, *, tracking_uri: str | None = None,
           push_to_hub: str | None = None, private: bool = False) -> ExportResult:
    """Write the winner of an experiment's latest search to `folder` (new, or empty) as a sentence-transformers
    model folder with its model card (README.md); with `push_to_hub=OWNER/NAME`, upload it too. Returns the
    `ExportResult` (the folder, the parent run, the card) and, when pushed, its `.url`. Reads the store, creates
    none; nothing is written before the store, the experiment and the folder have been checked."""
    from raycse.export import check_repo_id, check_target

    check_name("experiment", experiment)
    if not isinstance(folder, (str, os.PathLike)):
        raise ConfigError.at("dir", f"must be a folder's path, got {shown(folder)}")
    values = _checked(EXPORT_OPTIONS, {"tracking_uri": tracking_uri, "push_to_hub": push_to_hub,
                                       "private": private})
    if values["push_to_hub"] is not None:
        check_repo_id(values["push_to_hub"])
    out_dir = check_writable_dir("dir", os.fspath(folder))
    check_target(out_dir)
    uri = resolve_tracking_uri(values["tracking_uri"], must_exist=True)
    from raycse import export as exporting  # (the module; this function's parameter is named push_to_hub)

    result = exporting.export_winner(uri, experiment, out_dir, model_id=values["push_to_hub"])
    if values["push_to_hub"] is not None:
        result.url = exporting.push_to_hub(result.folder, values["push_to_hub"], private=values["private"])
    return result
