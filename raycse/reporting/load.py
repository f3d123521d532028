"""Reading a search back: its summary, its trials' rows and its Optuna study, through the Tracker.

Everything comes from what `raycse search` recorded: the experiment's latest parent run (tag `raycse.search`) and
its `search_summary.json` artifact, its child runs (the step-indexed metric `objective`: the search table's best
values and steps, and the dev curves of every stage), and the search's own
Optuna study, loaded from the storage the summary names - never rebuilt from MLflow parameters, so conditional
spaces, log scales and the loss family are exactly as the search declared them. A report can be made at any time
after a search, on any machine that reaches both stores, and from a copy of the search's folder: the paths the
summary recorded are read under the folder's present place (raycse.tracking.relocation). Reading never creates a
store.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycse.errors import ConfigError, first_line
from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    CONFIG_KEY_TAG,
    OBJECTIVE,
    RAY_TRIAL_ID,
    SEARCH,
    SEARCH_TAG,
    SEED_TAG,
    STAGE_TAG,
    STATUS_TAG,
    TRIAL_TAG,
)
from raycse.reporting.tables import TrialRow, best_of_history
from raycse.tracking.tracker import Tracker

if TYPE_CHECKING:
    import optuna

SUMMARY_ARTIFACT = "search_summary.json"
BAR_SWITCH = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"  # read by MLflow at each download


@dataclass
class SearchRecord:
    """Everything a report reads about one search."""

    experiment: str
    parent_run_id: str
    summary: dict
    study: optuna.Study
    optuna_storage: str
    rows: list[TrialRow]
    curves: list[DevCurve] = field(default_factory=list)


@dataclass
class DevCurve:
    """One child run's objective at each evaluation, with what a reader hovering it wants to know."""

    trial_id: str
    stage: str  # stage0 | search | confirm
    family: str
    params: dict[str, Any]  # the searched parameters of its family
    seed: int | None
    status: str
    points: list[tuple[int, float]]  # (training step, objective)
    optuna_number: int | None = None  # search stage only


def load_search(tracking_uri: str, experiment: str, optuna_storage: str | None = None) -> SearchRecord:
    """The experiment's latest search: its summary, its child runs' table and its Optuna study."""
    tracker = Tracker.existing(tracking_uri, experiment)
    parent_run_id, summary = latest_summary(tracker)
    storage = optuna_storage or summary["optuna_storage"]
    study = load_study(summary["study_name"], storage)
    rows, curves = trials_from_runs(tracker, parent_run_id, summary)
    numbers = {t.user_attrs[RAY_TRIAL_ID]: t.number for t in study.trials if RAY_TRIAL_ID in t.user_attrs}
    for trial in [*rows, *(curve for curve in curves if curve.stage == SEARCH)]:
        trial.optuna_number = numbers.get(trial.trial_id)
    return SearchRecord(experiment=experiment, parent_run_id=parent_run_id, summary=summary, study=study,
                        optuna_storage=storage, rows=rows, curves=curves)


def latest_summary(tracker: Tracker) -> tuple[str, dict]:
    """The experiment's latest search: its parent run's id and its search_summary.json (`raycse report`,
    `raycse export`), its paths (the Optuna storage, the checkpoints) read where the search's folder is now."""
    parent_run_id = _latest_parent_run(tracker)
    return parent_run_id, recorded_summary(tracker, parent_run_id)


def recorded_summary(tracker: Tracker, parent_run_id: str) -> dict:
    """The search_summary.json of a search's parent run, its paths read where the search's folder is now.

    Returns:
        the summary's contents (a ConfigError when the run has none: the search did not finish).

    Example:
        summary = recorded_summary(Tracker.existing(uri, "raycse-focal"), parent_run_id)
    """
    return tracker.relocation.values(read_summary(tracker, parent_run_id))


def _latest_parent_run(tracker: Tracker) -> str:
    parents = tracker.runs(f"tags.`{SEARCH_TAG}` LIKE '%'", max_results=1, order_by=["attributes.start_time DESC"])
    if not parents:
        raise ConfigError(f"experiment {tracker.experiment!r} has no search parent run (a run tagged {SEARCH_TAG}): "
                          f"was it written by `raycse search`?")
    return parents[0].info.run_id


def read_summary(tracker: Tracker, run_id: str) -> dict:
    """The search_summary.json of the search whose parent run is `run_id`, as it was written (its paths as
    recorded).

    Args:
        tracker: the experiment's Tracker.
        run_id: the search's parent run.

    Returns:
        The summary's contents.

    Raises:
        ConfigError: the run has no summary (its search did not finish, or predates summaries).

    Example:
        >>> read_summary(Tracker.existing("sqlite:///mlflow.db", "raycse-focal"), run_id)["budget"]  # doctest: +SKIP
        'cpu'
    """
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp, _no_progress_bar():
        try:
            path = tracker.download_artifact(run_id, SUMMARY_ARTIFACT, tmp)
        except (MlflowException, OSError) as err:
            raise ConfigError(f"the latest search of {tracker.experiment!r} (parent run {run_id}) has no "
                              f"{SUMMARY_ARTIFACT} artifact: the search did not finish, or predates reports "
                              f"({err})") from None
        return json.loads(Path(path).read_text())


@contextlib.contextmanager
def _no_progress_bar():
    """No tqdm "Downloading artifacts" bar while the summary is read: MLflow draws one for every download unless
    $MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR says not to, and `raycse.load()` or a report reads one small file (the
    command line says it for the whole process; a user's own setting is kept)."""
    if BAR_SWITCH in os.environ:
        yield
        return
    os.environ[BAR_SWITCH] = "false"
    try:
        yield
    finally:
        os.environ.pop(BAR_SWITCH, None)


def load_study(study_name: str, storage: str) -> optuna.Study:
    """The search's own study; a one-line ConfigError naming the storage or study when either is missing."""
    import optuna
    import sqlalchemy.exc

    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
        # checked first: Optuna would create an empty database file at a wrong path
        raise ConfigError(f"Optuna storage {storage} does not exist (pass --optuna-storage if the study was moved)")
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        names = ", ".join(optuna.get_all_study_names(storage)) or "none"
        raise ConfigError(f"no Optuna study {study_name!r} in {storage} (studies: {names})") from None
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, RuntimeError, ValueError) as err:
        raise ConfigError(f"cannot open Optuna storage {storage}: {first_line(err)}") from None


def trials_from_runs(tracker: Tracker, parent_run_id: str, summary: dict) -> tuple[list[TrialRow], list[DevCurve]]:
    """The search table (best value and best step straight from each search run's `objective` history) and the
    dev curves of every child run that logged one."""
    searched = summary.get("searched_params") or {}
    published_key = (summary.get("published") or {}).get("config_key")
    rows, curves = [], []
    for run in tracker.child_runs(parent_run_id):
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        history = tracker.metric_history(run.info.run_id, OBJECTIVE)
        family = params.get("loss_family", "-")
        trial_id, status = tags.get(TRIAL_TAG, run.info.run_name), tags.get(STATUS_TAG, run.info.status.lower())
        seed = int(tags[SEED_TAG]) if tags.get(SEED_TAG, "").isdigit() else None
        values = {name: _param_value(params[name]) for name in searched.get(family, []) if name in params}
        if history:
            curves.append(DevCurve(trial_id=trial_id, stage=tags.get(STAGE_TAG, "-"), family=family, params=values,
                                   seed=seed, status=status, points=history))
        if tags.get(STAGE_TAG) != SEARCH:
            continue
        best = best_of_history(history)
        if best is not None:
            best_objective, best_step = best
        else:  # a run that logged only its summary metrics
            best_objective = metrics.get(BEST_OBJECTIVE)
            best_step = int(metrics[BEST_STEP]) if BEST_STEP in metrics else None
        rows.append(TrialRow(
            trial_id=trial_id, family=family, params=values, best_objective=best_objective, best_step=best_step,
            last_step=history[-1][0] if history else None, status=status, seed=seed,
            is_published=published_key is not None and tags.get(CONFIG_KEY_TAG) == published_key))
    curves.sort(key=lambda c: ({"stage0": 0, SEARCH: 1}.get(c.stage, 2), c.trial_id))
    return rows, curves


def _param_value(text: str) -> Any:
    """MLflow keeps parameters as strings: give numbers back their type so they print at 4 digits."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
