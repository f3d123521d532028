"""How a search is laid out on its cluster before it runs: its budget, the space it runs (`space_to_run`: the
budget and the command line's overrides applied), the trials' resources and concurrency, and the persistent Optuna
study (the sampler: raycse/sampling/samplers.py; the scheduler: raycse/driver/tune/newest_first.py). Pure decisions
on the space and the cluster, plus the study's storage and the search's downloads folder."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError
from raycse.judging.confirmation_plan import ConfirmPlan
from raycse.settings.gpu_share import HUB_SHAPES, ShareChoice, shape_of, trials_per_gpu
from raycse.settings.space import SearchSpace


def experiment_dir_name(experiment: str) -> str:
    """The search's name on disk (Tune's experiment directory): the experiment, made path-safe."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-") or "raycse"


def downloads_folder(storage_path: str, experiment: str) -> Path | None:
    """Where a search keeps what it downloaded (a corpus named by its URL: raycse.data.downloads), for its later
    stages and a resumed run: its own folder's downloads/ on a local storage path; None on remote storage (an
    s3:// URI), where a download stays in the driver's memory for one run."""
    if "://" in storage_path:
        return None
    from raycse.data.downloads import DOWNLOADS_DIR

    return Path(storage_path).expanduser().resolve() / experiment_dir_name(experiment) / DOWNLOADS_DIR


def auto_budget(cluster: dict) -> str:
    """'full' where there is a GPU to use, else the file's CPU budget (never the paper's: its model and corpus are
    downloaded, and it runs only when named, `--budget paper`).

    A cluster that autoscales GPU workers from zero shows no GPU until a trial asks for one, so a driver that
    joined an existing cluster (RAY_ADDRESS, as `ray job submit` sets) counts as having GPUs; pass
    `--budget cpu` for a CPU-only cluster.
    """
    if cluster.get("GPU", 0) > 0 or os.environ.get("RAY_ADDRESS"):
        return "full"
    return "cpu"


def space_to_run(space: SearchSpace, options, budget: str, cluster: dict | None = None) -> SearchSpace:
    """The space the search runs: the budget applied (`SearchSpace.with_budget`: the file's own for 'full', else
    its section of that name), then the command line's overrides (flags win), and `gpus_per_worker: auto` made a
    number for ``cluster`` (Ray's resources: `gpu_share`; None: not known, taken to have GPUs)."""
    budgeted = space.with_budget(budget)
    changes: dict[str, Any] = {}
    if budgeted.resources.auto_gpus:
        share = gpu_share(budgeted, cluster)
        changes["resources"] = dataclasses.replace(budgeted.resources,
                                                   gpus_per_worker=share.gpus_per_worker if share else 0.0)
    for name in ("num_samples", "max_concurrent", "seed"):
        if getattr(options, name) is not None:
            changes[name] = getattr(options, name)
    hook = options.benchmark
    if hook.scheduler is not None:
        changes["scheduler"] = {**budgeted.scheduler, "name": hook.scheduler}
    if hook.grace_evals is not None:
        changes["scheduler"] = {**changes.get("scheduler", budgeted.scheduler), "grace_evals": hook.grace_evals}
    if not options.confirm:
        changes["confirm"] = None
    else:
        seeds = {name: getattr(options, name) for name in ("choose_seeds", "judge_seeds")
                 if getattr(options, name) is not None}
        if seeds:
            changes["confirm"] = dataclasses.replace(budgeted.confirm or ConfirmPlan(), **seeds)
        confirm = changes.get("confirm", budgeted.confirm)
        if getattr(options, "comparison", False) and confirm is not None:  # one loss of `raycse compare`
            changes["confirm"] = dataclasses.replace(confirm, test_seeds=None, looks=(confirm.judge_seeds,))
    return dataclasses.replace(budgeted, **changes)


AUTOSCALING_MOST = 4  # trials a GPU at most while a cluster shows no GPU node: the fixed share before `auto`


def gpu_share(space: SearchSpace, cluster: dict | None) -> ShareChoice | None:
    """How many of the plan's trials share a GPU under `gpus_per_worker: auto` (`trials_per_gpu`), or None where
    they get no GPU: a cluster without one, unless the driver joined it (RAY_ADDRESS: it may add GPU nodes when a
    trial asks, as `auto_budget` reads it; then at most `AUTOSCALING_MOST` a GPU). The CPUs beside each GPU bound
    the share, where the cluster shows both.

    Example:
        >>> from raycse.settings.space import load_space
        >>> gpu_share(load_space("focal"), {"GPU": 1.0, "CPU": 16.0}).trials  # MiniLM, batch 64, 2 CPUs a trial
        8
    """
    gpus = None if cluster is None else cluster.get("GPU", 0)
    if gpus == 0 and not os.environ.get("RAY_ADDRESS"):
        return None
    res, base = space.resources, space.base
    if res.workers > 1:
        return ShareChoice(1, f"one GPU a worker: a trial of {res.workers} workers never shares one (no record of it)")
    most = None
    if gpus and cluster.get("CPU") and res.cpus_per_worker:
        most = max(1, int(cluster["CPU"] / gpus // res.cpus_per_worker))
    elif gpus == 0:
        # GPU nodes not started yet (an autoscaling cluster): the CPUs beside each GPU are unknown, and a finer share
        # than its CPUs feed would pack some GPUs full and leave others idle on a node of several
        most = AUTOSCALING_MOST
    return trials_per_gpu(model_shape(base.model), base.batch_size, base.max_len, most)


def model_shape(model: str) -> str | None:
    """The model's name in `SHAPES`, read from its config.json (nothing loaded); None for a hub id not in
    `HUB_SHAPES` or a configuration of another shape."""
    if model in HUB_SHAPES:
        return HUB_SHAPES[model]
    from raycse.encoder.loading import resolve_model_path

    try:
        config = json.loads((Path(resolve_model_path(model)) / "config.json").read_text())
    except (OSError, ValueError, ConfigError):
        return None
    return shape_of(config.get("hidden_size"), config.get("num_hidden_layers")) if isinstance(config, dict) else None


def needs_stage0(space: SearchSpace) -> bool:
    """Whether a family needs a complementary model (DCLR) and none was given: stage 0 trains one."""
    from raycse.losses import build_loss

    return space.base.complementary is None and any(
        build_loss(family.loss, family.reg).needs_complementary for family in space.families.values())


# SimCSE's own recipe (Gao et al., 2021; its run_unsup_example.sh: batch 64, lr 3e-5, 1 epoch, STS-B dev every 125
# steps, tau 0.05): the recipe of the complementary model DCLR uses (DCLR's README: princeton-nlp's released
# unsup-simcse-bert-base-uncased), which stage 0 trains at the search's scale.
SIMCSE_BATCH, SIMCSE_LR, SIMCSE_EPOCHS, SIMCSE_EVAL_STEPS, SIMCSE_OBJECTIVE = 64, 3e-5, 1, 125, "stsb_dev"


def stage0_space(space: SearchSpace) -> SearchSpace:
    """The space stage 0 trains its one SimCSE model in: SimCSE's own recipe, not the DCLR family's (DCLR trains
    with batch 128, 3 epochs and the two-task dev objective; its complementary model is a SimCSE model trained on
    SimCSE's recipe), at the search's scale:

    - the default loss (SimCSE) at its published tau, lr 3e-5, 1 epoch, STS-B dev as the objective;
    - batch 64, or the search's own batch where that is smaller (the CPU budget's 16: a demonstration's scale);
    - where the search caps its steps (`max_steps`), stage 0 reads as many sentences as one epoch of the search's
      trials does (the paper budget's 23,436 steps of 3 epochs at batch 128 give 15,624 at batch 64, SimCSE's own
      epoch of wiki1m; the CPU budget's 16 at batch 16 give 16); else its one epoch of the corpus;
    - it is scored every 125 steps (SimCSE's), or as often as the search scores, in sentences, where that is more
      often (the bundled corpus's 186 steps at batch 64 would be scored once at 125).

    Example:
        >>> from raycse.settings.space import load_space
        >>> base = stage0_space(load_space("dclr").with_budget("paper")).base
        >>> base.batch_size, base.lr, base.epochs, base.max_steps, base.eval_steps, base.objective
        (64, 3e-05, 1, 15624, 125, 'stsb_dev')
        >>> base = stage0_space(load_space("dclr").with_budget("cpu")).base
        >>> base.batch_size, base.max_steps, base.eval_steps
        (16, 16, 8)
    """
    from raycse.losses import DEFAULT_LOSS

    base = space.base
    rows_a_step = base.batch_size * base.workers  # sentences a step of the search reads (its global batch)
    batch = max(1, min(SIMCSE_BATCH, rows_a_step) // base.workers)
    rows_a_stage0_step = batch * base.workers
    max_steps = None
    if base.max_steps is not None:
        max_steps = max(1, base.max_steps * rows_a_step // max(1, base.epochs) // rows_a_stage0_step)
    eval_steps = max(1, min(SIMCSE_EVAL_STEPS, base.eval_steps * rows_a_step // rows_a_stage0_step))
    mini = base.mini_batch_size if base.mini_batch_size and batch % base.mini_batch_size == 0 and \
        base.mini_batch_size < batch else None
    default = dataclasses.replace(next(iter(space.families.values())), loss=DEFAULT_LOSS, reg=None, space={},
                                  published={}, sources=())
    recipe = dataclasses.replace(base, hparams={}, batch_size=batch, mini_batch_size=mini, lr=SIMCSE_LR,
                                 epochs=SIMCSE_EPOCHS, max_steps=max_steps, eval_steps=eval_steps,
                                 objective=SIMCSE_OBJECTIVE, objective_columns=None)
    return dataclasses.replace(space, families={DEFAULT_LOSS: default}, base=recipe)


# ---------------------------------------------------------------------------------------- resources
def trial_resources(space: SearchSpace):
    """What one trial asks Ray for: a worker's CPUs (and GPU share), or a placement group of W workers."""
    from ray import tune

    res = space.resources
    worker = {"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if res.gpus_per_worker else {})}
    if res.workers == 1:
        return worker
    # the Tune function itself only waits on the TorchTrainer: it holds no CPU of its own
    return tune.PlacementGroupFactory([{"CPU": 0}] + [worker] * res.workers)


def max_concurrent(space: SearchSpace, cluster: dict) -> int:
    """Trials at once: the file's setting, else as many as the cluster's CPUs and GPUs hold (at most num_samples)."""
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


# ------------------------------------------------------------------------------------------ the study
def default_optuna_storage(tracking_uri: str) -> str:
    """`optuna.db` beside a SQLite MLflow store, else in the working directory (absolute: trials run elsewhere)."""
    folder = Path.cwd()
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri[len("sqlite:///"):]).parent
    return f"sqlite:///{(folder / 'optuna.db').resolve()}"


_CREATED_MEANWHILE = ("already exists", "duplicate key value")  # PostgreSQL's words, MySQL's


def optuna_rdb_storage(url: str):
    """Optuna's storage at `url`; a SQLite file in write-ahead-log mode (raycse.tracking.sqlite_wal: a commit no
    longer waits for the disk), waiting up to a minute for another search's write lock.

    Creating the storage creates its tables when the database has none: two searches that start together on one new
    SQLite file take turns (a lock beside the file); on a database server (PostgreSQL, MySQL) the one that loses the
    race gets a duplicate-key error, and tries again, now finding the tables."""
    import optuna

    from raycse.files import sqlite_creation_lock
    from raycse.tracking import sqlite_wal

    engine_kwargs = sqlite_wal.engine_kwargs(url)
    for attempt in range(5):
        try:
            with sqlite_creation_lock(url):
                return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        except Exception as err:  # SQLAlchemy's IntegrityError or ProgrammingError, by driver
            if attempt == 4 or not any(marker in str(err) for marker in _CREATED_MEANWHILE):
                raise
            time.sleep(0.5 * (attempt + 1))


def check_new_study(optuna_storage: str, study_name: str) -> None:
    """A new search refuses to write into an existing study (its trials would mix with another search's)."""
    import optuna

    try:
        names = optuna.get_all_study_names(storage=optuna_rdb_storage(optuna_storage))
    except Exception as err:  # noqa: BLE001 - Optuna raises several types for a bad URL or an unreadable file
        raise ConfigError(f"--optuna-storage: cannot open {optuna_storage!r}: {str(err).splitlines()[0]}") from None
    if study_name in names:
        raise ConfigError(f"an Optuna study {study_name!r} already exists in {optuna_storage}: resume its search with "
                          f"--resume, delete it (optuna delete-study --study-name {study_name} --storage "
                          f"{optuna_storage}), or pass another --optuna-storage")
