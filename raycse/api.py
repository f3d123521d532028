"""raycse from Python: a search, a training and an evaluation, each one call that returns what the command prints.

The command line is a thin layer over these functions, and both check each option by the same rule (the option tables,
TrainConfig's fields): all a function was given is checked (raycse/arguments/) before it starts anything, a mistake a
`raycse.ConfigError` naming the option. Heavy libraries are imported inside the functions: `import raycse` is cheap.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raycse.arguments.evaluation import evaluation_inputs, evaluation_pooler  # noqa: F401 - the command line's
from raycse.arguments.finished import export_inputs, report_inputs, store_of
from raycse.arguments.search import compare_inputs, plan_inputs
from raycse.arguments.search import search_inputs as _search_inputs
from raycse.arguments.training import TRAIN_DERIVED_DEFAULTS, prepare_training, start_training
from raycse.settings.config import TrainConfig
from raycse.settings.docstrings import with_option_docs, with_setting_docs
from raycse.settings.options import (  # noqa: F401 - Option, TRACKING_HELP: the command line makes its flags of them
    COMPARE_OPTIONS,
    EVAL_OPTIONS,
    EXPORT_OPTIONS,
    REPORT_OPTIONS,
    SEARCH_OPTIONS,
    TRACKING_HELP,
    Option,
)
from raycse.tracking.stores import resolve_tracking_uri  # noqa: F401 - the command line's

if TYPE_CHECKING:
    from raycse.comparing import ComparisonOutcome
    from raycse.driver.outcome import SearchOutcome
    from raycse.exporting import ExportResult
    from raycse.planning.compare_plan import ComparePlan
    from raycse.planning.dry_run import DryRun
    from raycse.reporting.status import SearchStatus
    from raycse.settings.space import SearchSpace
    from raycse.training.result import TrainResult


@with_option_docs(SEARCH_OPTIONS)
def search(space: str | os.PathLike | SearchSpace, *, num_samples: int | None = None, max_concurrent: int | None = None,
           seed: int | None = None, choose_seeds: int | None = None, judge_seeds: int | None = None,
           confirm: bool = True, tracking_uri: str | None = None, optuna_storage: str | None = None,
           storage_path: str | None = None, state: str | None = None, budget: str = "auto", resume: bool = False,
           keep_checkpoints: bool = False, experiment: str | None = None, warm_workers: bool = True,
           log: Callable[[str], None] | None = None, _started_at: float | None = None) -> SearchOutcome:
    """Run (or, with resume=True, continue) a search over a space file: `raycse search`.

    Args:
        space:
            A space file: its path, a shipped one's name ('focal'; `raycse spaces`) or a `SearchSpace`. Required.
        <the options of SEARCH_OPTIONS, each with its meaning, allowed values and default>
        log:
            Receives each progress line. Default: None (printed).
        _started_at:
            The command line's start (time.perf_counter()), counted in the timings. Default: None (this call's).

    Returns:
        The `SearchOutcome`: `.winner` ({"family", "params"}), `.verdict` (the answer in one sentence), `.decision`
        (the choosing and judging seeds' figures, None with confirm=False: `.decision.versus_published` is winner −
        published on the seven-task test average over the judging seeds; `.decision.versus_published_dev`, on dev,
        never judged), `.trials` (`.trials_dataframe()`), `.best_checkpoint`, `.summary`; `raycse.load` gives it back.

    Raises:
        ConfigError: An argument or the space file is wrong, before anything is written or started.

    Example:

        .. testcode::

            import raycse

            outcome = raycse.search("focal", num_samples=1, confirm=False)
            print(outcome.verdict)
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


@with_option_docs(COMPARE_OPTIONS)
def compare(spaces: list[str | os.PathLike | SearchSpace], *, num_samples: int | None = None,
            max_concurrent: int | None = None, seed: int | None = None, choose_seeds: int | None = None,
            judge_seeds: int | None = None, tracking_uri: str | None = None, optuna_storage: str | None = None,
            storage_path: str | None = None, state: str | None = None, budget: str = "auto", warm_workers: bool = True,
            keep_checkpoints: bool = False, resume: bool = False, experiment: str | None = None,
            output_dir: str = "compare", dry_run: bool = False,
            log: Callable[[str], None] | None = None) -> ComparisonOutcome | ComparePlan:
    """Compare losses fairly (`raycse compare`, docs/compare.md): each loss searched with the same budget, then the
    tuned winners and published points judged on the same fresh seeds, with Holm's family-wise error control.

    Args:
        spaces:
            The losses' space files (one loss each, at least two), each as `search` takes a space. Required.
        <the options of COMPARE_OPTIONS, each with its meaning, allowed values and default>
        log:
            Receives each progress line. Default: None (printed).

    Returns:
        The `ComparisonOutcome`: `.summary` (compare_summary.json's contents: the arms' figures and the `pairs`,
        each with its adjusted interval, n and verdict), `.searches` (each loss's `SearchOutcome`), `.pairs`; with
        dry_run=True, the `ComparePlan`: `.searches` (each loss's `DryRun`), `.wall_seconds()`, `.gpu_hours()`.

    Raises:
        ConfigError: A space or an option is wrong, or the spaces cannot be compared, before anything starts.

    Example:

        .. testcode::

            import raycse

            outcome = raycse.compare(["simcse", "focal"], num_samples=1, judge_seeds=2)
            for pair in outcome.summary["pairs"]:
                print(pair["a"], "-", pair["b"], pair["verdict"])
    """
    loaded, options, name, out_dir = compare_inputs(spaces, dict(locals()))
    from raycse.comparing import run_comparison
    from raycse.planning.compare_plan import plan_comparison
    return (plan_comparison(loaded, options, name, log=log) if dry_run  # its plan and cost, nothing run (--dry-run)
            else run_comparison(loaded, options, name, out_dir, log=log))


def plan(space: str | os.PathLike | SearchSpace, *, step_ms: float | None = None, gpus: int | None = None,
         **options: Any) -> DryRun:
    """What `search(space, **options)` would run, and what it would cost, without running anything (`raycse search
    --dry-run`): no store, folder or Ray cluster is created.

    Args:
        space:
            The space file, as `search` takes it: a path, a shipped space's name or a `SearchSpace`. Required.
        step_ms:
            A trial's step in ms (> 0), GPUs shared as planned. Default: None (its shape's record, or measured).
        gpus:
            Plan for this many GPUs, an integer >= 0. Default: None (this machine's).
        **options:
            The search's options, as `search` takes them (num_samples, budget, ...). Default: `search`'s defaults.

    Returns:
        The `DryRun`: `.budget`, `.stages`, `.trials`, `.wall_hours`, `.gpu_hours`, `.disk_bytes`, `.cost` (the model).

    Raises:
        ConfigError: An argument or the space file is wrong, an option is not a search's, or a GPU plan has no step.

    Example:

        .. testcode::

            import raycse

            plan = raycse.plan("focal", step_ms=150, gpus=1)
            print(plan.budget, plan.trials, "trials", round(plan.gpu_hours, 2), "GPU-hours")
    """
    from raycse.planning.dry_run import plan_search  # a CPU shape with no record: measured here, said as it goes
    return plan_search(*plan_inputs(space, step_ms, gpus, options), step_ms=step_ms, gpus=gpus)


@with_setting_docs(TRAIN_DERIVED_DEFAULTS)
def train(*, output_dir: str, model: str = TrainConfig.model, loss: str = TrainConfig.loss,
          reg: str | None = TrainConfig.reg, pooler: str = TrainConfig.pooler,
          eval_pooler: str | None = TrainConfig.eval_pooler, batch_size: int = TrainConfig.batch_size,
          mini_batch_size: int | None = TrainConfig.mini_batch_size, lr: float = TrainConfig.lr,
          weight_decay: float = TrainConfig.weight_decay, max_grad_norm: float = TrainConfig.max_grad_norm,
          epochs: int = TrainConfig.epochs, max_steps: int | None = TrainConfig.max_steps,
          eval_steps: int | None = None, max_len: int = TrainConfig.max_len, objective: str = TrainConfig.objective,
          objective_columns: str | None = TrainConfig.objective_columns, corpus: str = TrainConfig.corpus,
          sup_data: str | None = TrainConfig.sup_data, replace_bad_bytes: bool = TrainConfig.replace_bad_bytes,
          max_sentences: int | None = TrainConfig.max_sentences, seed: int = TrainConfig.seed,
          workers: int = TrainConfig.workers, gpus_per_worker: float | None = None,
          complementary: str | None = TrainConfig.complementary, precision: str = TrainConfig.precision,
          compile: str = TrainConfig.compile, test_eval: bool = TrainConfig.test_eval,
          trust_remote_code: bool = TrainConfig.trust_remote_code, hparams: dict[str, float] | None = None,
          resume: bool = False, tracking_uri: str | None = None, mlflow: bool = True,
          **hyperparameters: float) -> TrainResult:
    """Train one encoder with one loss, the body of every search trial: `raycse train`.

    Args:
        output_dir:
            Where best/, last/ and results.json go: a new or empty directory (resume=True: the training's). Required.
        <the settings of TrainConfig (raycse/settings/config.py), each with its meaning, allowed values, default>
        hparams:
            The loss hyperparameters as one mapping ({"tau": 0.05}; `lambda`, a Python keyword, goes here).
            Default: None (the keywords alone).
        resume:
            Continue an interrupted training from output_dir/last. Default: False.
        tracking_uri:
            The run's MLflow store (experiment raycse-train). Default: None ($MLFLOW_TRACKING_URI, else mlflow.db).
        mlflow:
            Record the run in MLflow. Default: True.
        **hyperparameters:
            The loss hyperparameters by the papers' names (tau=0.05, m=0.2; `raycse losses` lists each loss's).
            Default: each paper's published value.

    Returns:
        The `TrainResult`: `.best_checkpoint` (output_dir/best), `.best_objective` at `.best_step`, `.scores` (the
        seven STS test tasks and their mean, unless test_eval=False), `.dev_curve` and `.results` (results.json).

    Raises:
        ConfigError: A setting, a hyperparameter or a file they name is wrong, or output_dir is not empty.

    Example:

        .. testcode::

            import raycse

            result = raycse.train(output_dir="runs/focal", loss="focal", tau=0.05, m=0.3, batch_size=8,
                                  max_steps=1, test_eval=False, mlflow=False)
            print(result.best_objective, result.best_checkpoint)
    """
    settings = {name: value for name, value in locals().items()
                if name not in ("output_dir", "resume", "tracking_uri", "mlflow", "hyperparameters")}
    settings.update(hyperparameters)
    config = prepare_training(output_dir=output_dir, resume=resume, settings=settings)
    return start_training(config, tracking_uri, mlflow, resume, default_interval=eval_steps is None)


@with_option_docs(EVAL_OPTIONS)
def evaluate(model: str = "minilm", pooler: str = "auto", tasks: str = "stsb-dev", *, batch_size: int = 128,
             max_len: int | None = None, trust_remote_code: bool = False, output: str | None = None) -> dict[str,
             float]:
    """Score an encoder the way SentEval does (Spearman x 100): `raycse eval`.

    Args:
        <the options of EVAL_OPTIONS, each with its meaning, allowed values and default>

    Returns:
        The figures by name: {"stsb_dev": ...}; for tasks="sts" the seven STS test tasks and their mean "avg"; for
        "all" these with SICK-R dev, alignment and uniformity.

    Raises:
        ConfigError: An argument is wrong, or the model is no text encoder, before anything is scored or written.

    Example:

        .. testcode::

            import raycse

            figures = raycse.evaluate("minilm")
            print(f"STS-B dev: {figures['stsb_dev']:.2f}")
    """
    model, pooler = evaluation_inputs(locals())
    from raycse.evaluation.sts import run_eval
    from raycse.files import write_json_atomic

    figures = run_eval(model, pooler=pooler, tasks=tasks, batch_size=batch_size, max_len=max_len,
                       trust_remote_code=trust_remote_code)
    if output is not None:
        write_json_atomic(output, figures)
    return figures


@with_option_docs(REPORT_OPTIONS)
def report(experiment: str, *, tracking_uri: str | None = None, optuna_storage: str | None = None,
           output_dir: str = "report") -> str:
    """Write the report page of an experiment's latest search (output_dir/index.html) and log it on the search's
    parent run: `raycse report`. Reads the stores and creates neither.

    Args:
        experiment:
            The search's name (its space file's `experiment`, or search's experiment=...). Required.
        <the options of REPORT_OPTIONS, each with its meaning, allowed values and default>

    Returns:
        The text `raycse report` prints: the search's tables, its verdict and the page's path.

    Raises:
        ConfigError: An argument is wrong, or the store, the search or its Optuna study is not there.

    Example:

        .. testcode::

            import raycse

            print(raycse.report("raycse-focal"))  # after raycse.search("focal"): writes report/index.html
    """
    uri, out_dir = report_inputs(experiment, tracking_uri, optuna_storage, output_dir)
    from raycse.reporting import report_experiment
    from raycse.reporting.load import load_search

    record = load_search(uri, experiment, optuna_storage)  # the experiment, its search and study: read, never made
    return report_experiment(uri, experiment, out_dir, optuna_storage, record=record)


def load(experiment: str, tracking_uri: str | None = None) -> SearchOutcome:
    """The outcome of the experiment's latest finished search, as `search` returned it. Reads the store only.

    Args:
        experiment:
            The search's name (its space file's `experiment`, or search's experiment=...). Required.
        tracking_uri:
            The MLflow store the search recorded in. Default: None ($MLFLOW_TRACKING_URI, else sqlite:///mlflow.db).

    Returns:
        The `SearchOutcome` `search` returned (`.decision.versus_published`: on the seven-task test average over
        the judging seeds, not on dev: that is `.decision.versus_published_dev`).

    Raises:
        ConfigError: The store or the experiment is not there, or it holds no finished search.

    Example:

        .. testcode::

            import raycse

            outcome = raycse.load("raycse-focal")  # after raycse.search("focal")
            print(outcome.verdict)
            print(outcome.trials_dataframe()[["trial_id", "stage", "objective"]])
    """
    uri = store_of(experiment, tracking_uri)
    from raycse.driver.loaded import outcome_from_summary
    from raycse.reporting.load import latest_summary
    from raycse.tracking.tracker import Tracker

    tracker = Tracker.existing(uri, experiment)
    parent_run_id, summary = latest_summary(tracker)
    parent = tracker.run(parent_run_id)
    return outcome_from_summary(summary, parent_run_id, parent.info.run_name, parent.data.params)


def status(experiment: str, *, tracking_uri: str | None = None) -> SearchStatus:
    """Where the experiment's latest search stands, read from MLflow while it runs or after: `raycse status`.

    Args:
        experiment:
            The search's name (its space file's `experiment`, or search's experiment=...). Required.
        tracking_uri:
            The MLflow store the search records in. Default: None ($MLFLOW_TRACKING_URI, else sqlite:///mlflow.db).

    Returns:
        The `SearchStatus`: `.stage`, `.done`/`.planned` trials by stage, `.leading` (the finished search trials'
        best dev objective), `.choosing`, `.winner`, `.answer_lines`, `.running`, `.spent_s`, `.left_s`, `.ended`.

    Raises:
        ConfigError: The store or the experiment is not there, or it holds no search yet.

    Example:

        .. testcode::

            import raycse

            now = raycse.status("raycse-focal")  # while (or after) raycse.search("focal") runs
            print(now.stage, now.done, now.leading)
    """
    uri = store_of(experiment, tracking_uri)
    from raycse.reporting.status import search_status

    return search_status(uri, experiment)


@with_option_docs(EXPORT_OPTIONS)
def export(experiment: str, folder: str | os.PathLike, *, tracking_uri: str | None = None,
           push_to_hub: str | None = None, private: bool = False, loss: str | None = None) -> ExportResult:
    """Write the winner of an experiment's latest search to a folder, a sentence-transformers model with its model
    card (README.md), and upload it when asked: `raycse export`. Reads the store; writes nothing before it checks.

    Args:
        experiment:
            The search's name (its space file's `experiment`, or search's experiment=...), or with `loss` a
            comparison's. Required.
        folder:
            Where the model goes: a new or empty folder. Required.
        <the options of EXPORT_OPTIONS, each with its meaning, allowed values and default>

    Returns:
        The `ExportResult`: `.folder`, `.parent_run_id` (the search's), `.card` (the model card), `.url` if pushed.

    Raises:
        ConfigError: An argument is wrong, the folder is not empty, or the store, the search or its winner is gone.

    Example:

        .. testcode::

            import raycse

            result = raycse.export("raycse-focal", "focal-model")  # after raycse.search("focal")
            print(result.folder)
    """
    uri, experiment, out_dir, values = export_inputs(experiment, folder, locals())
    from raycse import exporting

    result = exporting.export_winner(uri, experiment, out_dir, model_id=values["push_to_hub"])
    if values["push_to_hub"] is not None:
        result.url = exporting.push_to_hub(result.folder, values["push_to_hub"], private=values["private"])
    return result
