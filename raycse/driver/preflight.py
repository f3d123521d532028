"""What a search checks before it starts anything: the last of the validation, done before Ray, a store or a file.

`run_search` calls `check_search` first, so that its setup stage only ever sees input that can run:

  inputs      every configuration the search can sample (each corner of every family's space, under the file's
              own budget, its CPU budget and the budget named by --budget) has its model, objective and training
              data opened far enough to know they are usable: the data decodes and holds a batch of the largest
              batch size searched, the run is long enough to be evaluated (TrainConfig.open_inputs, each file read
              once). The paper's budget is opened only when it is the one to run: its model and corpus download
  names       the experiment's directory under the storage path is a path the file system takes
  storage     the storage path is a directory that exists or can be created, and holds a search exactly when
              --resume says it does
  stores      the MLflow tracking URI and the Optuna storage are well-formed addresses, and each store is what it
              should be, asked read-only: a SQLite file is absent, empty, or a SQLite database holding no table or
              its kind's (MLflow's, Optuna's); a tracking server answers /health; a database server accepts a
              connection and holds its kind's tables or none. --resume finds the store and the search's parent run
              in it; a new search finds no study of its name (read without creating the file; a storage that is not
              a SQLite file is asked again by the setup stage)
  resources   on a local Ray (no RAY_ADDRESS), one trial fits this machine: its CPUs and GPUs, which Ray would
              otherwise wait for forever

Nothing here opens a store for writing, starts Ray or creates a file or a directory.
"""
from __future__ import annotations

import os
import sys

from raycse.driver import layout
from raycse.driver.state import SearchOptions
from raycse.errors import ConfigError, shown
from raycse.settings.budgets import BUDGETS
from raycse.settings.checks import check_path_text, check_writable_dir
from raycse.settings.space import SearchSpace
from raycse.tracking.stores import check_optuna_storage, check_tracking_uri, probe_store, study_names

TUNER_STATE = "tuner.pkl"  # what a Tune experiment directory holds once its search has started (Tuner.can_restore)


def check_search(space: SearchSpace, options: SearchOptions) -> None:
    """Every check of a search that needs nothing started; a ConfigError naming the culprit otherwise."""
    search_path = _check_storage(space, options)  # the cheap checks first
    _check_stores(space, options, search_path)
    _check_resources(space, options)
    open_space_inputs(space, options.budget)


def open_space_inputs(space: SearchSpace, budget: str = "auto") -> None:
    """Open the inputs of every corner of the space under each budget `budget` may run (`auto`: the file's own and
    its CPU budget, as today's cluster decides; a named budget: that one too): what its trials will read."""
    cache: dict = {}
    runs = {"cpu", budget}
    variants = [(space, "")] + [(space.with_budget(name), f"{section}: ") for name, section in BUDGETS.items()
                                if name in runs and getattr(space, section)]
    for variant, prefix in variants:
        for family, corner, config in variant.corners():
            try:
                config.open_inputs(cache)
            except ConfigError as err:
                culprit = ", ".join(f"{k}={shown(v)}" for k, v in corner.items()) or "the fixed settings"
                raise ConfigError(f"{space.path}: {prefix}{family} at {culprit}: {err}") from None


def search_location(space: SearchSpace, options: SearchOptions) -> tuple[str, bool]:
    """The search's path (storage/experiment, the storage path checked) and whether a search has started there (its
    Tune state is there: `--resume` continues it). Reads only.

    Returns:
        (the search's path, whether a search is there).

    Example:
        path, started = search_location(space, options)
    """
    name = layout.experiment_dir_name(space.experiment)
    storage, flag = options.storage_path, options.store_flags.get("storage_path", "storage_path")
    if "://" in storage:  # s3://, gs://: Tune itself says whether it can restore
        from ray import tune

        search_path = f"{storage.rstrip('/')}/{name}"
        return search_path, tune.Tuner.can_restore(search_path)
    local = check_writable_dir(flag, storage).resolve()
    search_path = str(local / name)
    check_path_text(flag, search_path)
    return search_path, (local / name / TUNER_STATE).is_file()


def _check_storage(space: SearchSpace, options: SearchOptions) -> str:
    """The storage path, and whether a search is there; returns the search's path (storage/experiment)."""
    search_path, exists = search_location(space, options)
    if options.resume and not exists:
        raise ConfigError.at("resume", f"no search to resume at {search_path!r}")
    if not options.resume and exists:
        raise ConfigError(f"a search already exists at {search_path!r}: pass --resume to continue it, or a new "
                          "--storage-path / experiment name")
    return search_path


def _check_stores(space: SearchSpace, options: SearchOptions, search_path: str) -> None:
    flags = options.store_flags
    tracking_flag = flags.get("tracking_uri", "tracking_uri")
    check_tracking_uri(tracking_flag, options.tracking_uri, must_exist=options.resume)
    probe_store(tracking_flag, options.tracking_uri, "experiments")
    storage = options.optuna_storage or layout.default_optuna_storage(options.tracking_uri)
    optuna_flag = flags.get("optuna_storage", "optuna_storage") if options.optuna_storage else tracking_flag
    check_optuna_storage(optuna_flag, storage)
    probe_store(optuna_flag, storage, "studies")
    if options.resume:
        from raycse.records import PATH_TAG
        from raycse.tracking.tracker import Tracker

        tracker = Tracker.existing(options.tracking_uri, space.experiment)  # creates nothing
        if tracker.find_run(PATH_TAG, search_path) is None:
            raise ConfigError.at("resume", f"no MLflow parent run for {search_path!r} in {options.tracking_uri} "
                                           "(pass the --tracking-uri the search started with)")
        return
    names = study_names(storage)
    if names is not None and space.experiment in names:
        raise ConfigError(f"an Optuna study {space.experiment!r} already exists in {storage}: resume its search with "
                          f"--resume, delete it (optuna delete-study --study-name {space.experiment} --storage "
                          f"{storage}), or pass another --optuna-storage")


def local_ray_resources(gpus: float, cpus: float) -> tuple[float, float]:
    """The GPUs and CPUs a local Ray will advertise: this machine's, unless Ray's own RAY_OVERRIDE_RESOURCES (JSON,
    e.g. '{"GPU": 1}': fake GPUs on a machine without one, as benchmarks/gpu_suite.sh --rehearse uses) says
    otherwise. An unreadable value is left for Ray to refuse."""
    import json

    try:
        override = json.loads(os.environ.get("RAY_OVERRIDE_RESOURCES") or "{}")
    except ValueError:
        return gpus, cpus
    if not isinstance(override, dict):
        return gpus, cpus
    return override.get("GPU", gpus), override.get("CPU", cpus)


def _check_resources(space: SearchSpace, options: SearchOptions) -> None:
    """On a local Ray, a trial that asks for more than this machine has would wait forever for it."""
    ray = sys.modules.get("ray")
    if os.environ.get("RAY_ADDRESS") or (ray is not None and ray.is_initialized()):
        return  # a cluster (perhaps autoscaling), or a Ray this process started: its resources are its own to know
    import torch

    gpus, cpus = torch.cuda.device_count(), os.cpu_count() or 1
    gpus, cpus = local_ray_resources(gpus, cpus)
    budget = options.budget if options.budget != "auto" else layout.auto_budget({"GPU": gpus})
    to_run = layout.space_to_run(space, options, budget, {"GPU": gpus, "CPU": cpus})
    res = to_run.resources
    section = BUDGETS.get(budget)
    key = f"{section}.resources" if section and "resources" in (getattr(space, section) or {}) else "resources"
    for kind, per_worker, here in (("GPU", res.gpus_per_worker, gpus), ("CPU", res.cpus_per_worker, cpus)):
        if per_worker * res.workers > here:
            hint = (" (pass --budget cpu, or --budget auto)" if kind == "GPU" and options.budget not in ("auto", "cpu")
                    else "")
            raise ConfigError(f"{space.path}: {key}.{kind.lower()}s_per_worker ({per_worker:g}) x workers "
                              f"({res.workers}): a trial asks for {per_worker * res.workers:g} {kind}(s) and this "
                              f"machine has {here}: Ray would wait for them forever{hint}")

