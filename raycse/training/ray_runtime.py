"""Ray, the one way raycse uses it: join the cluster named by RAY_ADDRESS, else start a local one; and the Ray Train
TorchTrainer that a multi-worker training (`raycse train --workers W`, a search trial of W workers) runs on."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

from raycse.errors import ConfigError

# The Ray this process started (its GCS address: a new cluster has a new one) and what it ships to its workers.
_started: tuple[str, frozenset[str]] | None = None

# Ray's settings for the local Ray raycse starts (RayConfig, read from the environment by the processes `ray.init`
# starts; a cluster joined keeps its own). By default a raylet starts one idle worker per CPU when its first driver
# connects; raycse's trials, warm workers and pool each start a process of their own with their own options, so those
# sat idle until Ray ended them: 0.7 CPU-seconds of a 2-core machine at every start, one process per CPU of a GPU node.
LOCAL_RAY_SETTINGS = {"RAY_prestart_worker_first_driver": "0"}

# How long Tune waits for a stopped trial's function to return before it reuses the trial's actor for the next trial
# (Tune's TUNE_FUNCTION_THREAD_TIMEOUT_S; its default, 2 s, is shorter than a stopped trial may take to unwind: a
# trial on a warm worker returns once its worker has stopped, raycse.driver.tune.warm_workers). Past that wait Tune
# fails the next trial ("Could not re-use actor"), which then counted against its configuration: seen on 2 busy cores.
TRIAL_UNWIND_WAIT_S = 60
TUNE_UNWIND_WAIT_ENV = "TUNE_FUNCTION_THREAD_TIMEOUT_S"  # Tune's setting of that wait


def tune_unwind_wait_s() -> float:
    """Tune's wait for a stopped trial in this process: the user's TUNE_FUNCTION_THREAD_TIMEOUT_S, else raycse's
    (a Ray worker of raycse's has one or the other, `_worker_settings`)."""
    try:
        return float(os.environ.get(TUNE_UNWIND_WAIT_ENV, TRIAL_UNWIND_WAIT_S))
    except ValueError:  # not a number: Tune itself then fails, with its own message
        return float(TRIAL_UNWIND_WAIT_S)


def start_ray(ship: Iterable[str] = ()) -> bool:
    """Start (or join) Ray unless it already runs with what it must ship; True if this call started it.

    The workers get three settings (`_worker_settings`): tokenizers' own thread pool off (a DataLoader worker forked
    after the parent used it would warn and disable it anyway), Hugging Face's offline mode as the driver has it
    (default online: users have networks; tests and CI set HF_HUB_OFFLINE=1), and Tune's wait for a stopped trial
    (`TRIAL_UNWIND_WAIT_S`, unless the user set TUNE_FUNCTION_THREAD_TIMEOUT_S). A local Ray's workers inherit them
    from the environment Ray starts in; a joined cluster's through the job's runtime environment, which Ray sets up
    in each new worker process by a Python process of its own first (setup_worker.py: 0.2 CPU-seconds a worker,
    measured on 2 cores), so a local Ray gets no runtime environment unless it ships users' losses.

    ``ship``: the files and folders of users' own losses (raycse.losses.own.LossSource.ship), which the job's runtime
    environment carries to every node (`py_modules`), so that a trial imports them on a node where they are not
    installed. A Ray this process started without one of them is started again with it; a Ray someone else started
    must already ship them (a ConfigError says how, before anything is written).
    """
    import ray

    from raycse.training.stop_signals import ray_starting

    global _started
    wanted = {str(path) for path in ship}
    if ray.is_initialized():
        ours = _started is not None and _started[0] == ray.get_runtime_context().gcs_address
        if wanted <= (_started[1] if ours else _shipped_by_job(wanted)):
            return False
        if not ours:
            raise ConfigError(f"Ray was started before raycse without shipping {', '.join(sorted(wanted))} to its "
                              "workers: ray.shutdown() first (raycse then starts it with them), or start it with "
                              f"ray.init(runtime_env={{'py_modules': {sorted(wanted)!r}}})")
        wanted |= _started[1]
        ray.shutdown()  # raycse started it without these losses: again, with them
    address, settings = os.environ.get("RAY_ADDRESS"), _worker_settings()
    env: dict = {"env_vars": settings} if address else {}
    if wanted:
        env["py_modules"] = sorted(wanted)
    # Ray's processes ignore a hangup; raycse's SIGTERM handler, not Ray's, stops the command
    with ray_starting(), _environment(LOCAL_RAY_SETTINGS, forced={} if address else settings):
        ray.init(address=address, include_dashboard=False, log_to_driver=False, runtime_env=env or None)
    _started = (ray.get_runtime_context().gcs_address, frozenset(wanted))
    return True


def _worker_settings() -> dict[str, str]:
    """The environment raycse's code needs in every Ray worker of a search or a training (`start_ray`)."""
    return {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"),
            TUNE_UNWIND_WAIT_ENV: os.environ.get(TUNE_UNWIND_WAIT_ENV, str(TRIAL_UNWIND_WAIT_S))}


@contextlib.contextmanager
def _environment(settings: dict[str, str], forced: dict[str, str]) -> Iterator[None]:
    """`settings` and `forced` in this process's environment while Ray starts its processes (which inherit them):
    the user's own value of one of `settings` wins, `forced` replace theirs; afterwards the environment is as it was."""
    before = {name: os.environ.get(name) for name in (*settings, *forced)}
    os.environ.update({name: value for name, value in settings.items() if name not in os.environ})
    os.environ.update(forced)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _shipped_by_job(wanted: set[str]) -> set[str]:
    """Which of `wanted` the running job (started by someone else) ships: its py_modules are content-addressed URIs,
    compared with those of the files and folders wanted (Ray's own naming, a private function of Ray 2.60)."""
    if not wanted:
        return set()
    import ray
    from ray._private.runtime_env.packaging import get_uri_for_directory, get_uri_for_file

    uris = set(ray.get_runtime_context().runtime_env.get("py_modules") or [])
    return {path for path in wanted if (get_uri_for_directory(path, include_gitignore=True)
                                        if os.path.isdir(path) else get_uri_for_file(path)) in uris}


def torch_trainer(worker_loop, config, cpus_per_worker: float, storage_path: str, name: str,
                  callbacks: list | None = None, resume_from_checkpoint=None, resume: bool = False):
    """Ray Train (V2) TorchTrainer running `worker_loop` on `config.workers` workers (a TrainConfig; torch.distributed
    set up; the trainer sums gradients itself, see `step_runner.sum_gradients_across_workers`)."""
    import ray.train
    from ray.train.torch import TorchTrainer

    per_worker = {"CPU": cpus_per_worker}
    if config.gpus_per_worker:
        per_worker["GPU"] = config.gpus_per_worker
    return TorchTrainer(
        worker_loop,
        train_loop_config={"config": config.to_dict(), "resume": resume},
        scaling_config=ray.train.ScalingConfig(num_workers=config.workers, use_gpu=bool(config.gpus_per_worker),
                                               resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(name=name, storage_path=storage_path, callbacks=callbacks or [],
                                       failure_config=ray.train.FailureConfig(max_failures=2)),
        resume_from_checkpoint=resume_from_checkpoint,
    )


def fit_stopping_in_order(trainer):
    """`trainer.fit()` (a TorchTrainer's) from a command's main thread, stopped as a search stops: the first SIGINT,
    SIGTERM or SIGHUP aborts the run (Ray Train's controller ends its workers), then `Stopped` (a KeyboardInterrupt)
    is raised, so that `raycse train --workers W` ends with 130, 143 or 129 and one line, and `--resume` continues
    from the last checkpoint; a second signal stops at once (raycse/training/stop_signals.py).

    Ray Train (2.60) installs a SIGINT handler of its own when fit runs in a main thread, which aborted the run and
    let the command go on to read results that were never written. It installs it in one method, given the run's
    controller: here that method keeps the controller instead, for raycse's handler to abort.

    Returns:
        what `fit()` returns (its `Result`).

    Example:
        result = fit_stopping_in_order(torch_trainer(loop, config, cpus_per_worker=1, storage_path=tmp, name="train"))
    """
    from raycse.training import stop_signals

    controllers: list = []
    trainer._register_sigint_handler = controllers.append  # Ray Train's own Ctrl-C handler, not installed

    def abort() -> None:
        for controller in controllers:
            controller.abort.remote()

    failed = None
    with stop_signals.kept(), stop_signals.graceful(abort) as stop:
        try:
            result = trainer.fit()
        except Exception as err:  # noqa: BLE001 - an aborted run fails with its controller: raised below if no stop
            failed, result = err, None
    if stop.signum is not None:
        raise stop_signals.Stopped(stop.signum)
    if failed is not None:
        raise failed
    return result

