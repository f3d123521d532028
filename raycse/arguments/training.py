"""A training's arguments: its settings turned into a validated TrainConfig, its output directory checked
(`prepare_training`, nothing read, nothing written), then its inputs opened and the training run (`start_training`)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_bool, check_writable_dir
from raycse.settings.config import TrainConfig

if TYPE_CHECKING:
    from raycse.training.result import TrainResult

DEFAULT_EVAL_STEPS = TrainConfig.eval_steps  # the interval a training evaluates at when none is given
# The settings whose default `raycse.train` works out when the training starts (None there), not TrainConfig's
TRAIN_DERIVED_DEFAULTS = {
    "eval_steps": f"every {DEFAULT_EVAL_STEPS} steps, or once at the end of a shorter run",
    "gpus_per_worker": "one GPU a worker when CUDA is available, else none"}


def prepare_training(output_dir: str, resume: bool, settings: dict[str, Any]) -> TrainConfig:
    """The validated TrainConfig of a training, its output directory checked (nothing read, nothing written), every
    local file and folder it names by its absolute path."""
    import dataclasses

    from raycse.losses import hyperparameter_catalogue

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
    _check_output_dir(output_dir, resume)
    if config.workers > 1 and not os.environ.get("RAY_ADDRESS") and config.workers > (os.cpu_count() or 1):
        raise ConfigError.at("workers", f"{config.workers} workers of one CPU each on a machine with "
                                        f"{os.cpu_count()}: Ray would wait for them forever")
    return config.with_absolute_paths()  # Ray Train's workers run in a working directory of their own


def _check_output_dir(output_dir: str, resume: bool) -> None:
    output = check_writable_dir("output_dir", output_dir)
    if resume:
        if not (output / "last").is_dir():
            raise ConfigError.at("resume", f"{str(output)!r} holds no last/ checkpoint to resume from")
        if (output / "results.json").exists():
            raise ConfigError.at("resume", f"{str(output)!r} holds a finished training (results.json)")
    elif output.is_dir() and any(output.iterdir()):
        raise ConfigError.at("output_dir", f"{str(output)!r} exists and is not empty (pass --resume to continue it)")


def start_training(config: TrainConfig, tracking_uri: str | None, mlflow: bool, resume: bool,
                   default_interval: bool) -> TrainResult:
    """Check the store (with mlflow=True), open the training's inputs (the data, the model and the objective: errors
    now, not later), say what a user may not expect, and run it (`default_interval`: no eval_steps was given)."""
    from raycse.tracking.stores import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri) if check_bool("mlflow", mlflow) else None
    examples = config.open_inputs()
    from raycse.losses import build_loss
    from raycse.training.launch import run_training
    from raycse.training.result import TrainResult

    if default_interval and config.max_steps is not None and config.eval_steps == config.max_steps:
        print(f"evaluating at step {config.max_steps}, the run's end: the default interval ({DEFAULT_EVAL_STEPS} "
              "steps) is longer than the run", flush=True)
    if config.complementary is None and build_loss(config.loss, config.reg).needs_complementary:
        print(f"{config.loss} without complementary: the frozen complementary model is a copy of the starting "
              "weights, not the trained SimCSE model the paper uses (raycse search trains one first; pass "
              "complementary=DIR, --complementary DIR, to use yours).", flush=True)
    results = run_training(config, tracking_uri=uri, resume=resume,
                           examples=examples if config.workers == 1 else None)
    return TrainResult.from_results(config.output_dir, results)
