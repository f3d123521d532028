"""A search's and a comparison's arguments, checked and resolved: the space files loaded, the options checked by
their tables (raycse/settings/options.py), the stores named (`state_layout`: one place, each flag an override)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from raycse.errors import ConfigError, shown
from raycse.settings.checks import check_name, check_writable_dir
from raycse.settings.options import COMPARE_OPTIONS, SEARCH_OPTIONS, checked
from raycse.tracking.stores import resolve_tracking_uri, state_layout

if TYPE_CHECKING:
    from pathlib import Path

    from raycse.driver.state import SearchOptions
    from raycse.settings.space import SearchSpace


def search_inputs(space, given: dict[str, Any]) -> tuple[SearchSpace, dict[str, Any]]:
    """The space (loaded, its experiment renamed when asked) and the checked options of a search or a plan."""
    import dataclasses

    from raycse.settings.budgets import FULL
    from raycse.settings.space import SearchSpace, load_space

    values = checked(SEARCH_OPTIONS, {option.name: given[option.name] for option in SEARCH_OPTIONS})
    experiment = values.pop("experiment")
    if experiment is not None:
        check_name("experiment", experiment)
    if not isinstance(space, SearchSpace):
        if not isinstance(space, (str, os.PathLike)):
            raise ConfigError.at("space", f"must be a space file's path or a SearchSpace, got {shown(space)}")
        space = load_space(space)
    if experiment is not None:
        space = dataclasses.replace(space, experiment=experiment)
    if values["budget"] not in ("auto", FULL):  # a budget the file states none of (the paper's): refused now
        space.budget_section(values["budget"])
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


def compare_inputs(spaces: Any, given: dict[str, Any]) -> tuple[list[SearchSpace], SearchOptions, str, Path]:
    """A comparison's spaces (loaded), its searches' options, its name and its output directory, all checked."""
    from pathlib import Path

    if isinstance(spaces, (str, os.PathLike)) or not isinstance(spaces, (list, tuple)):
        raise ConfigError.at("space", f"must be a list of space files, got {shown(spaces)}")
    values = checked(COMPARE_OPTIONS, {option.name: given[option.name] for option in COMPARE_OPTIONS})
    name, out, resume = values.pop("experiment"), values.pop("output_dir"), values.pop("resume")
    loaded, options = [], None
    for space in spaces:
        space, options = search_inputs(space, {**values, "confirm": True, "resume": False, "experiment": None})
        loaded.append(space)
    from raycse.comparing import check_comparison, label_of
    from raycse.driver.state import SearchOptions

    if not loaded:
        raise ConfigError.at("space", "a comparison needs at least two spaces, got 0")
    options = SearchOptions(**{**options, "resume": resume}, comparison=True)
    check_comparison(loaded, options)
    name = check_name("experiment", name if name is not None else "compare-" + "-".join(map(label_of, loaded)))
    return loaded, options, name, Path(check_writable_dir("output_dir", out))


def plan_inputs(space: Any, step_ms: Any, gpus: Any, options: dict[str, Any]) -> tuple[SearchSpace, dict[str, Any]]:
    """A plan's arguments: the step time and GPUs checked, then the space and the search's options (defaults for
    those not given)."""
    from raycse.settings.checks import INT_LIMIT, check_int, check_number

    unknown = sorted(set(options) - {option.name for option in SEARCH_OPTIONS})
    if unknown:
        raise ConfigError.at(unknown[0], f"not an option of a search (options: "
                                         f"{', '.join(o.name for o in SEARCH_OPTIONS)})")
    if step_ms is not None:
        check_number("step_ms", step_ms, low=0.0, strict=True)
    if gpus is not None:
        check_int("gpus", gpus, low=0, high=INT_LIMIT)
    return search_inputs(space, {**{o.name: o.default for o in SEARCH_OPTIONS}, **options})
