"""Setup: Ray (shipping users' own losses to its workers), the budget and the plan, the MLflow parent run (tagged with
the SHA-256 of each user's loss file), this driver session on it (raycse/tracking/sessions.py: its start, its process,
the command line that continues it) and the Optuna study's storage; what the check downloaded (a corpus named by its
URL) is kept in the search's folder (raycse.data.downloads).

Resume: the parent run is found by the search's storage location (a tag), its children left RUNNING by the killed
driver are marked KILLED until their trials resume under them, and the run is RUNNING again; a new search refuses an
existing Tune experiment or study.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from raycse.data.downloads import current as current_downloads
from raycse.driver import layout
from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState
from raycse.driver.tune.pacing import set_snapshot_period
from raycse.driver.tune.search_workers import search_workers
from raycse.errors import ConfigError
from raycse.records import BUDGET_TAG, PATH_TAG, SEARCH_TAG, loss_hash_tag
from raycse.tracking import sessions
from raycse.tracking.tracker import Tracker


class SetupStage(Stage):
    name = "setup"
    produces = ("name", "storage", "search_path", "cluster", "budget", "space", "optuna_storage", "tracker",
                "parent_run_id", "session")

    def run(self, state: SearchState) -> None:
        import optuna
        import ray

        from raycse.training.ray_runtime import start_ray

        _quiet_tune()
        options, loaded = state.options, state.loaded_space
        state.name = layout.experiment_dir_name(loaded.experiment)
        state.storage = (options.storage_path if "://" in options.storage_path
                         else str(Path(options.storage_path).expanduser().resolve()))
        state.search_path = f"{state.storage.rstrip('/')}/{state.name}"  # also an s3:// or gs:// URI on a cluster
        downloads, folder = current_downloads(), layout.downloads_folder(state.storage, loaded.experiment)
        if downloads is not None and folder is not None:  # what the check downloaded, kept for a resumed run
            downloads.keep_in(folder)
        # the search was checked before this stage (preflight.py): new, or one to resume. The MLflow store opens
        # while Ray starts (importing MLflow and opening a SQLite store take a CPU-bound 2-3 s, Ray's start mostly
        # waits for its processes)
        with ThreadPoolExecutor(1, thread_name_prefix="raycse-tracking") as opening:
            tracker = opening.submit(Tracker, options.tracking_uri, loaded.experiment,
                                     artifact_location=options.artifact_location)
            start_ray(ship=[source.ship for source in loaded.loss_sources()])
            state.tracker = tracker.result()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        state.cluster = ray.cluster_resources()
        state.budget = options.budget if options.budget != "auto" else layout.auto_budget(state.cluster)
        space = state.space = layout.space_to_run(loaded, options, state.budget, state.cluster)
        budgeted = loaded.with_budget(state.budget)
        if budgeted.resources.auto_gpus and (share := layout.gpu_share(budgeted, state.cluster)) is not None:
            state.log(f"gpus_per_worker: auto gives {share.why}.")
        search_workers(state).start_ahead(space.resources.gpus_per_worker,  # they import while the set-up goes on
                                          layout.max_concurrent(space, state.cluster))
        set_snapshot_period(state.storage, space.num_samples)
        if state.budget == "cpu":
            confirm, judged = space.confirm, ")."
            if confirm is not None:
                on_test = confirm.judging_seeds_on_test
                judged = (f"; the winner and the published point judged on {confirm.judge_seeds} fresh seeds"
                          + (f", {on_test} of them scored on the test tasks" if on_test < confirm.judge_seeds
                             and space.test_eval.scores_any else "") + ").")
            state.log(f"No GPU in the Ray cluster: using the CPU budget of {loaded.path} "
                      f"({space.num_samples} trials, batch {space.base.batch_size}, {space.base.max_steps or 'all'} "
                      f"steps, the objective every {space.base.eval_steps} steps{judged}")
        state.optuna_storage = options.optuna_storage or layout.default_optuna_storage(options.tracking_uri)
        state.parent_run_id = _open_parent_run(state)
        state.session = sessions.open_session(state.tracker, state.parent_run_id, state.clock.started_epoch(),
                                              resume_command())


def resume_command() -> str | None:
    """The command line that continues this search (its own, with --resume), or None: a search the Python API or a
    comparison started, which the command line does not continue that way."""
    import shlex

    from raycse.training.stop_signals import command_line

    argv = command_line()
    if not argv or argv[0] != "search":
        return None
    return shlex.join(["raycse", *argv, *([] if "--resume" in argv else ["--resume"])])


def _quiet_tune() -> None:
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # its reporter prints tables even at verbose=0
    logging.getLogger("ray.tune").setLevel(logging.WARNING)


def _left_open_words(runs: int) -> str:
    """What becomes of the trial runs a stopped search left RUNNING, as the resume says it: each goes on under its
    own MLflow run when its trial resumes (the callback reopens it: raycse.driver.tune.callback), KILLED until then;
    one whose trial Tune had not recorded is deleted instead (raycse.driver.tune.runner.drop_lost_runs says so)."""
    return (f"{runs} trial run(s) the stopped search left open go on under the same MLflow run(s) as their trials "
            "resume (KILLED until then; one whose trial Tune had not recorded is deleted, as its stage then says)")


def _open_parent_run(state: SearchState) -> str:
    tracker, space, options = state.tracker, state.space, state.options
    if options.resume:  # the parent run is found by the search's storage location, kept as a tag
        parent_run_id = tracker.find_run(PATH_TAG, state.search_path)
        if parent_run_id is None:
            raise ConfigError(f"--resume: no MLflow parent run for {state.search_path!r} in {options.tracking_uri} "
                              "(pass the --tracking-uri the search started with)")
        left_open = tracker.mark_orphans_killed(parent_run_id)
        tracker.reopen_run(parent_run_id)
        state.log(f"Resuming search {state.name!r} (MLflow parent run {parent_run_id}"
                  + (f"; {_left_open_words(left_open)}" if left_open else "") + ").")
        return parent_run_id
    layout.check_new_study(state.optuna_storage, space.experiment)
    parent_run_id = tracker.start_run(state.name, tags={
        SEARCH_TAG: state.name, PATH_TAG: state.search_path, BUDGET_TAG: state.budget,
        **{loss_hash_tag(source.name): source.sha256 for source in space.loss_sources()}})
    tracker.log_artifact(parent_run_id, space.path)
    confirm = space.confirm
    tracker.log_params(parent_run_id, {
        "space_file": os.path.basename(space.path), "num_samples": space.num_samples, "budget": state.budget,
        "seed": space.seed, "scheduler": space.scheduler["name"], "objective": space.base.objective,
        # without a confirmation stage: the search stage's best, one configuration, no further seeds
        "confirm_top_k": confirm.top_k if confirm else 1, "choose_seeds": confirm.choose_seeds if confirm else 0,
        "judge_seeds": confirm.judge_seeds if confirm else 0,
        "optuna_storage": state.optuna_storage, "study_name": space.experiment})
    return parent_run_id
