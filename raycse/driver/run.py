"""The conductor of `raycse search`: the stages of a search, in order, each timed.

    setup      Ray, the budget and the plan, the MLflow parent run, the Optuna study's storage
    baseline   the untouched model's objective, scored as a Ray task beside the first trials
    tokenize   the training data tokenised once for every trial
    stage0     DCLR only, when no complementary model is given: the SimCSE model DCLR trials use
    search     Tune trials sampled by Optuna (the published point first), early-stopped by ASHA: they rank
    choose     the top-K configurations on fresh seeds: the best mean there is the winner
    judge      the winner and the published point on further fresh seeds, which alone judge them
    test       judging checkpoints still without test figures scored on the seven STS test tasks
    record     the decision (raycse/judging/decision.py), the summary, MLflow, the registered model
    report     the report page

Every trial is a Tune trial (raycse.driver.tune.trial.run_trial) recorded as an MLflow child run by a Tune callback in
the driver. `--resume` continues whichever stage was interrupted: finished trials are never trained again,
unfinished ones continue from their last evaluation. The driver knows nothing of loss internals: a trial is a
TrainConfig.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

from raycse.data.downloads import once_per_search
from raycse.driver import layout, progress
from raycse.driver.outcome import SearchOutcome
from raycse.driver.preflight import check_search
from raycse.driver.stages.base import Stage
from raycse.driver.stages.baseline import BaselineStage
from raycse.driver.stages.choose import ChooseStage
from raycse.driver.stages.judge import JudgeStage
from raycse.driver.stages.record import RecordStage
from raycse.driver.stages.report import ReportStage
from raycse.driver.stages.search import SearchStage
from raycse.driver.stages.setup import SetupStage
from raycse.driver.stages.stage0 import Stage0
from raycse.driver.stages.test import TestStage
from raycse.driver.stages.tokenize import TokenizeStage
from raycse.driver.state import PhaseClock, SearchOptions, SearchState, say
from raycse.driver.summary import SUMMARY_FILE
from raycse.settings.space import SearchSpace
from raycse.tracking import sessions
from raycse.tracking.tracker import Tracker

ANSWER = "outcome"  # what the stage that records the answer produces
STAGE_ORDER: tuple[Stage, ...] = (SetupStage(), BaselineStage(), TokenizeStage(), Stage0(), SearchStage(),
                                  ChooseStage(), JudgeStage(), TestStage(), RecordStage(), ReportStage())


def check_order(stages: tuple[Stage, ...]) -> None:
    """Every stage's needs are produced by an earlier stage (a programming error otherwise, caught before Ray)."""
    produced: set[str] = set()
    for stage in stages:
        missing = [need for need in stage.needs if need not in produced]
        if missing:
            raise RuntimeError(f"stage {stage.name!r} needs {', '.join(missing)}, which no earlier stage produces")
        produced.update(stage.produces)


def run_search(space: SearchSpace, options: SearchOptions, log=say) -> SearchOutcome:
    """Run (or resume) every stage of a search; the space given is left as it is. Everything the search will read
    is checked first (preflight.py), before Ray starts or a store or a file is created."""
    return run_stages(space, options, log).outcome


def run_stages(space: SearchSpace, options: SearchOptions, log=say) -> SearchState:
    """`run_search`, returning the search's whole state (its clock included: benchmarks/scale.py reads it).

    What the stages so far made (the imports of Ray, Tune, MLflow, Optuna, matplotlib: several hundred thousand
    objects) is frozen out of the garbage collector's full passes at each stage's start (`frozen_between_stages`):
    Python's full collections otherwise scanned it again each time it had grown by a quarter, 2.1 s of a tiny
    search's 25 s on 2 CPU cores (8 during the imports and the set-up, 3 in the report).
    """
    check_order(STAGE_ORDER)
    # a corpus named by its URL is downloaded once: by the check, then kept for the stages (and a resumed run)
    with once_per_search(layout.downloads_folder(options.storage_path, space.experiment)):
        check_search(space, options)
        state = SearchState(loaded_space=space, options=options, log=log)
        state.clock = PhaseClock(options.started_at)
        try:
            with progress.displayed(options.started_at) as status, frozen_between_stages() as freeze:
                for stage in STAGE_ORDER:
                    if stage.applies(state):
                        freeze()
                        status.stage(stage.name)
                        with state.clock.phase(stage.name):
                            stage.run(state)
                        if ANSWER in stage.produces:  # the time spent stops at the answer (tracking/sessions.py)
                            state.clock.answered()
        except BaseException as err:
            _record_ending(state, err)
            raise
        finally:
            state.close()
    state.outcome.timings = state.outcome.summary["timings"] = state.timings()
    return state


def _record_ending(state: SearchState, err: BaseException) -> None:
    """How this session ended without an answer, on the parent run (once there is one): stopped by a signal (Ctrl-C
    included), or failed; `raycse status` reads it, and `--resume` continues from it. A store that cannot take it
    leaves the run as a killed driver leaves it, the error that ended the session unmasked."""
    if state.session is None or state.tracker is None:
        return
    import signal

    from raycse.errors import first_line
    from raycse.training import stop_signals

    signum = getattr(err, "signum", None) or stop_signals.received()
    stopped = signum is not None or isinstance(err, KeyboardInterrupt)
    try:
        if stopped:
            sessions.record_ending(state.tracker, state.parent_run_id, state.session, sessions.STOPPED,
                                   signal=signal.Signals(signum or signal.SIGINT).name)
        else:
            sessions.record_ending(state.tracker, state.parent_run_id, state.session, sessions.FAILED,
                                   reason=f"{type(err).__name__}: {first_line(err)}")
    except Exception:  # noqa: BLE001 - the session's own error is the one to report
        pass


@contextlib.contextmanager
def frozen_between_stages() -> Iterator[Callable[[], None]]:
    """Yields `freeze()`, which moves every object so far out of the garbage collector's full passes (`gc.freeze`);
    everything it froze is given back to the collector when the context ends, garbage made meanwhile included. In
    a process where something is frozen already (a program that froze its own objects before a search, a pre-forking
    server), that freeze is the program's: `freeze()` then does nothing, and nothing is given back.

    Returns:
        a context manager yielding `freeze()`.

    Example:
        >>> import gc
        >>> with frozen_between_stages() as freeze:
        ...     freeze()
        ...     assert gc.get_freeze_count() > 0
        >>> gc.get_freeze_count()
        0
    """
    ours = gc.get_freeze_count() == 0
    try:
        yield gc.freeze if ours else lambda: None
    finally:
        if ours:
            gc.unfreeze()


def finish(outcome: SearchOutcome, tracking_uri: str) -> None:
    """After the answer is printed: the timings and the final summary on the parent run, which then ends."""
    tracker = Tracker(tracking_uri, outcome.experiment)
    tracker.log_metrics(outcome.parent_run_id, outcome.timings)
    tracker.log_dict(outcome.parent_run_id, outcome.summary, SUMMARY_FILE)
    tracker.end_run(outcome.parent_run_id, "FINISHED")
