"""The arguments of the functions that read a finished (or running) search: the experiment's name, the store
(which must exist: these functions create none) and, for a report or an export, where the output goes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_name, check_writable_dir
from raycse.settings.options import EXPORT_OPTIONS, REPORT_OPTIONS, checked
from raycse.tracking.stores import resolve_tracking_uri


def store_of(experiment: str, tracking_uri: str | None) -> str:
    """The store of a search read back, checked to exist (the experiment's name checked first)."""
    check_name("experiment", experiment)
    return resolve_tracking_uri(tracking_uri, must_exist=True)


def report_inputs(experiment: str, tracking_uri: Any, optuna_storage: Any, output_dir: Any) -> tuple[str, Path]:
    """A report's store and output directory, every argument checked."""
    from raycse.tracking.stores import check_optuna_storage

    check_name("experiment", experiment)
    values = checked(REPORT_OPTIONS, {"tracking_uri": tracking_uri, "optuna_storage": optuna_storage,
                                      "output_dir": output_dir})
    uri = resolve_tracking_uri(values["tracking_uri"], must_exist=True)
    if optuna_storage is not None:
        check_optuna_storage("optuna_storage", optuna_storage, must_exist=True)
    return uri, check_writable_dir("output_dir", output_dir)


def export_inputs(experiment: str, folder: Any, given: dict[str, Any]) -> tuple[str, str, Path, dict[str, Any]]:
    """An export's store, the experiment whose winner it exports (with `loss`, that loss's search of the comparison
    `experiment`), its folder (new or empty) and its checked options."""
    from raycse.exporting import check_repo_id, check_target

    check_name("experiment", experiment)
    if not isinstance(folder, (str, os.PathLike)):
        raise ConfigError.at("dir", f"must be a folder's path, got {shown(folder)}")
    values = checked(EXPORT_OPTIONS, {option.name: given[option.name] for option in EXPORT_OPTIONS})
    if values["push_to_hub"] is not None:
        check_repo_id(values["push_to_hub"])
    out_dir = check_writable_dir("dir", os.fspath(folder))
    check_target(out_dir)
    uri = resolve_tracking_uri(values["tracking_uri"], must_exist=True)
    if values["loss"] is not None:  # a comparison: the loss's own search, an experiment of its own
        from raycse.comparing import comparison_loss_experiment

        experiment = comparison_loss_experiment(uri, experiment, values["loss"])
    return uri, experiment, out_dir, values
