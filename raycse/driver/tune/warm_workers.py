"""Warm workers: the processes that train a search's trials live as long as the search, across its stages.

Tune runs each trial in an actor of its own, and each stage of a search (the search, choosing, judging: one Tune
experiment each) starts its actors anew, so without these every stage would start a new process per slot, each
importing torch and transformers (about 6 CPU-seconds) and, on a GPU, making its CUDA context (13-17 s a trial
measured on an H100, a third of a search's trial time). Here Tune's trial actor (raycse.driver.tune.trial) is a light
proxy: it asks the search's pool (`WarmPool`, an actor the driver starts) for an idle worker on its own node and
GPU, hands it the training (`TrialJob`), and passes each of its reports to Tune. The pool starts a worker only when
none is idle, so a search starts about as many as it runs trials at once.

The handshake keeps Tune's semantics: a worker waits at each report until Tune has taken it (`tune.report` copies
the checkpoint before the worker writes the next one), and a trial Tune stops (ASHA; the end of a search) stops its
worker there. A worker whose proxy is gone without a word (a killed process, a lost node) finds that out at its next
report and stops. A worker that fails (a killed process) fails its trial, which Tune retries as before; the pool
then starts a new one. Resources are the proxy's: Tune reserves the trial's CPUs and GPU share for it, and the
worker (no resources of its own, on the proxy's node) trains on the GPU Ray gave the proxy, with as many threads.
The untouched model's scoring and the test stage's run on the same workers (`call`, from raycse.driver.tune.scoring).
The pool and its workers end with the search or with the driver that owns them; the pool, the actor that keeps them,
is raycse/driver/tune/search_workers.py.
"""
from __future__ import annotations

import dataclasses
import gc
import math
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from raycse.records import TRIAL_PROCESS
from raycse.settings.config import TrainConfig
from raycse.training.ray_runtime import tune_unwind_wait_s

REPORT, END, FAILED = "report", "end", "failed"
OWNER_CHECK_S = 5.0  # how often a worker waiting for Tune to take its report checks that the trial's proxy lives
WORKER_THREADS = 4  # a worker's concurrent calls: `next` waits while `cancel` arrives


@dataclasses.dataclass(frozen=True)
class TrialJob:
    """One trial's training, as Tune's trial actor hands it to the process that trains.

    Attributes:
        config: the trial's TrainConfig (its output_dir already holds a restored checkpoint when `resume`).
        resume: continue from output_dir's last/.
        shared_tokens: [the Ray object reference of the training data's token ids] (raycse.data.tokens), or None.
        least_interval_s: the least seconds between two of the trial's Tune checkpoints (driver/tune/pacing.py).
        loss_sources: the users' own losses the trial may train (checked where it trains).
        resume_from: where the checkpoint restored into output_dir lives on Tune's storage (named in the line that
            sets it aside when it cannot be read), or None.
    """

    config: TrainConfig
    resume: bool
    shared_tokens: list | None
    least_interval_s: float
    loss_sources: tuple = ()
    resume_from: str | None = None


class TrialFailed(RuntimeError):
    """The training of a trial failed in its warm worker; the message holds the worker's traceback."""


class _Stopped(BaseException):
    """Unwinds a worker's training once Tune has stopped its trial (a BaseException, as the SystemExit with which
    Tune stops a trial in its own process: the trainer's own handlers let it through)."""


def run_job(job: TrialJob, report: Callable[[dict, str | None], None], worker_start_s: float = 0.0) -> None:
    """Train `job` in this process, each report stamped with this process's id.

    Args:
        job: the trial's training.
        report: called as `report(metrics, checkpoint_dir)` at each evaluation and once at the end.
        worker_start_s: the seconds the trial waited for this process (its start-up figure).

    Example:
        >>> run_job(TrialJob(config, resume=False, shared_tokens=None, least_interval_s=0.0), print)  # doctest: +SKIP
    """
    from raycse.driver.tune.trial_training import train_and_report

    check_own_losses(job.loss_sources)
    pid = os.getpid()

    def stamped(metrics: dict, checkpoint_dir: str | None) -> None:
        report({**metrics, TRIAL_PROCESS: pid}, checkpoint_dir)

    train_and_report(job.config, stamped, job.resume, worker_start_s, _tokens(job.shared_tokens),
                     job.least_interval_s, resume_from=job.resume_from)


def check_own_losses(sources) -> None:
    """Each user's loss the trial trains is importable on this node, from the file the search started with."""
    if sources:
        from raycse.losses.own import check_shipped

        for source in sources:
            check_shipped(source)


def _tokens(shared: list | None):
    if not shared:
        return None
    import ray

    return ray.get(shared[0])


# ------------------------------------------------------------------------------------------ Tune's side
def train_on_warm_worker(pool, job: TrialJob, report: Callable[[dict, str | None], None],
                         worker_start_s: float) -> None:
    """Train `job` on an idle warm worker of `pool` on this node and GPU, passing each of its reports to `report`
    (which is `tune.report`'s caller: a stopped trial leaves it by SystemExit, and its worker stops too).

    Args:
        pool: the search's `WarmPool` actor.
        job: the trial's training.
        report: called as `report(metrics, checkpoint_dir)`, in this process, for each report of the worker.
        worker_start_s: the seconds this trial's own process took to start; the wait for the worker is added.
    """
    import ray

    context = ray.get_runtime_context()
    clock = time.perf_counter()
    worker = ready_worker(pool, context)
    ended = False
    try:
        ray.get(worker.start.remote(job, worker_start_s + time.perf_counter() - clock, trial_threads(context),
                                    context.get_actor_id()))
        while True:
            kind, payload, checkpoint_dir = ray.get(worker.next.remote())
            if kind == END:
                ended = True
                return
            if kind == FAILED:
                ended = True
                raise TrialFailed(payload)
            report(payload, checkpoint_dir)
    except ray.exceptions.RayActorError:
        ended = True
        pool.forget.remote(worker)
        raise
    finally:
        if not ended:  # Tune stopped the trial (SystemExit from tune.report): its worker stops at that report
            try:
                ray.get(worker.cancel.remote(), timeout=cancel_wait_s())
            except (ray.exceptions.RayError, TimeoutError):
                pass


def cancel_wait_s() -> float:
    """How long a stopped trial waits for its worker to unwind: half of Tune's wait before it reuses the trial's
    process, so that Tune outwaits it (a worker still unwinding then is not idle: the next trial takes another)."""
    return tune_unwind_wait_s() / 2


def trial_threads(context) -> int:
    """The threads a trial trains with: what torch would take in this process, which Ray started with the trial's
    CPUs (OMP_NUM_THREADS: the user's, else as many as the CPUs, at least one). The worker, which has no CPUs of its
    own, takes the same, so that a trial computes exactly as it would in Tune's own process: an evaluation of a
    nearly collapsed model can rank its pairs differently with another number of threads.

    Args:
        context: Ray's runtime context of the trial's (or the scoring task's) process.

    Returns:
        The number of torch threads.

    Example:
        >>> trial_threads(ray.get_runtime_context())  # in a process Ray started with 2 CPUs  # doctest: +SKIP
        2
    """
    given = os.environ.get("OMP_NUM_THREADS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return max(1, math.floor(context.get_assigned_resources().get("CPU", 1.0)))


def ready_worker(pool, context, get: Callable | None = None):
    """An idle worker of `pool` for this process's node and GPU, started (its imports done); one lost while idle is
    forgotten and another taken.

    Args:
        pool: the search's `WarmPool` actor.
        context: Ray's runtime context of this process (its node id, the GPU ids Ray gave it).
        get: how to wait for a Ray object (default `ray.get`).

    Returns:
        The worker's actor handle, taken from the pool: the caller's until it goes back.

    Example:
        >>> worker = ready_worker(pool, ray.get_runtime_context())  # doctest: +SKIP
    """
    import ray

    get = get or ray.get
    node, devices = context.get_node_id(), ",".join(context.get_accelerator_ids().get("GPU", [])) or None
    for attempt in range(2):
        worker = get(pool.acquire.remote(node, devices))
        try:
            get(worker.__ray_ready__.remote())
            return worker
        except ray.exceptions.RayActorError:
            pool.forget.remote(worker)
            if attempt:
                raise


# ------------------------------------------------------------------------------------------ the worker
class WarmWorker:
    """A process that trains one trial at a time, for any stage of the search (a Ray actor of `WarmPool`'s)."""

    def __init__(self, pool, key: tuple, devices: str | None):
        if devices is not None:  # the GPU Ray gave the trials this worker serves (it has no resources of its own)
            os.environ["CUDA_VISIBLE_DEVICES"] = devices
        import torch

        # once, here: torch, transformers and its model code, the trainer, the trial's reporting
        import raycse.driver.tune.trial_training
        import raycse.training.trainer  # noqa: F401

        if devices is not None and torch.cuda.is_available():
            torch.zeros(1, device="cuda")  # the CUDA context, made once (a second or so on an H100)
        gc.collect()
        gc.freeze()  # the imports' 400,000 objects: out of each later collection (0.2 s a trial, `_release_memory`)
        self._pool, self._key = pool, key
        self._thread: threading.Thread | None = None

    def start(self, job: TrialJob, worker_start_s: float, threads: int, owner: str) -> None:
        """Start training `job` (in a thread of this process, with `threads` threads); its reports come out of
        `next`."""
        import torch

        torch.set_num_threads(threads)
        self._messages: queue.SimpleQueue = queue.SimpleQueue()
        self._taken, self._awaiting, self._owner = threading.Semaphore(0), False, owner
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._train, args=(job, worker_start_s), daemon=True)
        self._thread.start()

    def call(self, function: Callable, args: tuple, threads: int) -> Any:
        """`function(*args)` in this process, with `threads` threads; then back to the pool, idle."""
        import ray
        import torch

        torch.set_num_threads(threads)
        try:
            return function(*args)
        finally:
            _release_memory()
            ray.get(self._pool.release.remote(self._key, ray.get_runtime_context().current_actor))

    def next(self) -> tuple[str, Any, str | None]:
        """The next message of the training: (REPORT, metrics, checkpoint_dir), (END, None, None) or (FAILED,
        traceback, None). Calling it again says the previous report was taken: only then does the training go on."""
        if self._awaiting:
            self._taken.release()
        message = self._messages.get()
        self._awaiting = message[0] == REPORT
        return message

    def cancel(self) -> None:
        """Stop the training at its report (Tune stopped the trial); returns once it has unwound."""
        self._stopped.set()
        self._taken.release()
        if self._thread is not None:
            self._thread.join(cancel_wait_s())

    def _train(self, job: TrialJob, worker_start_s: float) -> None:
        import ray

        message: tuple | None = (END, None, None)
        try:
            run_job(job, self._report, worker_start_s)
        except _Stopped:
            message = None
        except Exception:  # noqa: BLE001 - the trial fails, as it would in Tune's own process; the worker lives on
            message = (FAILED, traceback.format_exc(), None)
        finally:
            _release_memory()
            # idle in the pool before the trial's proxy hears of the end: the next trial finds this worker
            ray.get(self._pool.release.remote(self._key, ray.get_runtime_context().current_actor))
            if message is not None:
                self._messages.put(message)

    def _report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        if self._stopped.is_set():
            raise _Stopped
        self._messages.put((REPORT, metrics, checkpoint_dir))
        while not self._taken.acquire(timeout=OWNER_CHECK_S):
            if not _alive(self._owner):  # the trial's proxy died (a kill, a lost node): nobody takes reports
                raise _Stopped
        if self._stopped.is_set():
            raise _Stopped


def _alive(actor_id: str) -> bool:
    """Whether an actor lives, from Ray's actor table (`ray._private.state`: Ray's public state API would need the
    dashboard, which raycse does not start)."""
    from ray._private.state import actors

    try:
        return actors(actor_id=actor_id).get("State") != "DEAD"
    except Exception:  # noqa: BLE001 - the table unreachable: assume it lives, and ask again later
        return True


def _release_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # other trials share the GPU
