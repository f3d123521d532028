"""What the stages of a search share: the options it was started with, and what each stage has produced so far.

A stage reads the fields its `needs` names and writes those its `produces` names (stages/base.py); the conductor
checks, before the search starts, that every need is produced by an earlier stage.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycse.driver.outcome import Baseline, SearchOutcome, TrialRecord
from raycse.judging.ranking import Ranked
from raycse.settings.space import SearchSpace

if TYPE_CHECKING:
    from raycse.tracking.sessions import Session
    from raycse.tracking.tracker import Tracker


def say(message: str) -> None:
    """The search's progress lines (a module function: Tune pickles the callback that holds it)."""
    print(message, flush=True)


@dataclass(frozen=True)
class BenchmarkHook:
    """What the benchmarks change in a search, in one place (`SearchOptions.benchmark`): none of it is a flag.

    benchmarks/search_quality.py compares sampling strategies with `sampler` (a name of
    raycse.sampling.samplers.SAMPLERS, over the space file's `search.sampler`), `grid` (Tune's grid over
    {param: [values]}, every combination once, no searcher), `scheduler` ("asha" | "fifo"), `grace_evals` (ASHA's
    grace period in evaluations) and `max_total_steps` (the search stage stops once its trials took this many steps
    in all). benchmarks/scale.py measures the driver at scale with `trial_stand_in`: an object whose
    `.trainable(space, context)` gives the Tune function every trial runs instead of training
    (benchmarks/simulated_trial.py, which replays a dev curve).
    """

    sampler: str | None = None
    grid: dict[str, list] | None = None
    scheduler: str | None = None
    grace_evals: int | None = None
    max_total_steps: int | None = None
    trial_stand_in: Any = None


@dataclass
class SearchOptions:
    """What the command line (or the Python API) asks of a search beyond its space file."""

    tracking_uri: str
    storage_path: str
    resume: bool = False
    keep_checkpoints: bool = False  # a trial that ended keeps its last/ (training state) too, not only its best/
    num_samples: int | None = None
    max_concurrent: int | None = None
    seed: int | None = None
    budget: str = "auto"  # auto | cpu | full
    choose_seeds: int | None = None  # override the space's search.confirm.choose_seeds
    judge_seeds: int | None = None  # ... and judge_seeds
    confirm: bool = True  # False: no choosing and judging (--no-confirm): the search stage's best, unjudged
    optuna_storage: str | None = None
    state: str | None = None  # --state: the one place the stores above were derived from (None: each its own)
    artifact_location: str | None = None  # MLflow's artifacts for a new experiment (None: MLflow's or the server's)
    store_flags: dict[str, str] = field(default_factory=dict)  # which flag named each store, for error messages
    started_at: float = field(default_factory=time.perf_counter)  # the command's start: time_total_s runs from it
    # What only the benchmarks ask of a search (none of it is a flag or an API argument)
    benchmark: BenchmarkHook = field(default_factory=BenchmarkHook)
    # One loss of `raycse compare`: judging on fixed seeds (one look, no early stop: the comparison's family is
    # judged at once), every judging seed scored on the test tasks (the judged figure of every comparison).
    comparison: bool = False
    # Trials train in warm workers that live across the search's stages (raycse/driver/tune/warm_workers.py); False
    # trains each in Tune's own trial process, started anew by each stage (benchmarks compare the two)
    warm_workers: bool = True


class PhaseClock:
    """Wall-clock seconds by phase, contiguous from the command's start: the phases up to the answer add up to the
    total (`total`: to the answer, once `answered`; the phases after it, the report page's, are `after_answer`).
    Also the driver process's CPU seconds by phase (all its threads: Tune's loop, Ray's, MLflow's), in
    `cpu_seconds`."""

    def __init__(self, started_at: float):
        self.started_at = self.mark = started_at
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.answered_at: float | None = None
        self.after_answer: list[str] = []  # the phases that ran after the answer

    def answered(self) -> None:
        """The answer is recorded: the time spent stops here (the phases after it are counted apart)."""
        self.answered_at = self.mark

    def started_epoch(self) -> float:
        """The command's start in seconds since the epoch (what a session records)."""
        return time.time() - (time.perf_counter() - self.started_at)

    @contextlib.contextmanager
    def phase(self, name: str):
        from raycse.records import phase_key

        cpu = time.process_time()
        if self.answered_at is not None and name not in self.after_answer:
            self.after_answer.append(name)
        try:
            yield
        finally:
            now = time.perf_counter()
            key = phase_key(name)
            self.seconds[key] = self.seconds.get(key, 0.0) + now - self.mark
            self.cpu_seconds[key] = self.cpu_seconds.get(key, 0.0) + time.process_time() - cpu
            self.mark = now

    def total(self) -> float:
        """This session's seconds from the command's start to the answer (to now, before it)."""
        return (time.perf_counter() if self.answered_at is None else self.answered_at) - self.started_at


@dataclass
class PendingBaseline:
    """The untouched model being scored by a Ray task beside the first trials; `result()` waits for it."""

    eval_pooler: str
    reference: Any  # the Ray object reference of `scoring.score_untouched` (or of its cached figures)
    cache_key: str | None = None  # where the figures, once scored, are kept for the next search (none: not kept)

    def result(self) -> Baseline:
        import ray

        scores = dict(ray.get(self.reference))
        process_id = scores.pop("process_id", None)  # none for figures read from a cache
        if self.cache_key is not None:
            from raycse.evaluation import untouched_cache

            untouched_cache.store(self.cache_key, scores)
        return Baseline(objective=scores["by_pooler"][self.eval_pooler]["objective"], eval_pooler=self.eval_pooler,
                        by_pooler=scores["by_pooler"], test=scores["test"], process_id=process_id)


@dataclass
class SearchState:
    """The blackboard of one search: set up by `setup`, then filled in stage by stage."""

    loaded_space: SearchSpace  # the space file as loaded (never changed)
    options: SearchOptions
    log: Callable[[str], None] = say

    # setup
    name: str = ""  # the search's name: the Tune experiment's directory, the parent run's name
    storage: str = ""  # where Tune keeps state and checkpoints (an absolute path or a URI)
    search_path: str = ""  # storage/name: the search stage's Tune experiment
    cluster: dict[str, float] = field(default_factory=dict)  # Ray's cluster resources
    budget: str = ""  # "cpu" | "full"
    space: SearchSpace | None = None  # the space with the budget and the command line's overrides applied
    optuna_storage: str = ""
    tracker: Tracker | None = None
    parent_run_id: str = ""

    # the stages' products
    baseline: Baseline | PendingBaseline | None = None
    shared_tokens: Any = None  # the training data's token ids (raycse.data.tokens), or None: trials tokenise
    searched: list[TrialRecord] | None = None
    ranking: list[Ranked] | None = None  # the search stage's top_k configurations, on a common footing
    choose_runs: list[TrialRecord] | None = None  # the choosing block's runs (none when top_k is 1)
    winner_key: str | None = None
    judge_runs: list[TrialRecord] | None = None  # the judging block's runs: the winner and the published point
    outcome: SearchOutcome | None = None
    clock: PhaseClock | None = None  # set by the conductor
    session: Session | None = None  # this driver session, as the parent run records it (set up with it)
    workers: Any = None  # the search's warm workers (raycse.driver.tune.search_workers), once a stage asks
    _shared_token_ref: Any = None

    def shared_token_ref(self) -> list | None:
        """[the Ray object reference of `shared_tokens`], put in the object store once for every stage; or None."""
        if self.shared_tokens is None:
            return None
        if self._shared_token_ref is None:
            import ray

            self._shared_token_ref = [ray.put(self.shared_tokens)]
        return self._shared_token_ref

    def close(self) -> None:
        """End what the search started for its trials (its warm workers)."""
        if self.workers is not None:
            self.workers.close()

    def timings(self) -> dict[str, float]:
        """Where the time went so far: the time spent (raycse/tracking/sessions.py: the sessions before this one, and
        this one's phases to the answer), the trials' own seconds summed, how busy the slots were, and the phases
        after the answer."""
        from raycse.driver.concurrency import search_concurrency
        from raycse.driver.layout import max_concurrent
        from raycse.records import (
            CHOOSE,
            CONCURRENT_SLOTS,
            EARLIER_SESSIONS,
            JUDGE,
            SEARCH,
            SEARCH_MEAN_RUNNING,
            SEARCH_MEAN_RUNNING_STARTING,
            SEARCH_SLOT_USE,
            SLOT_UTILISATION,
            TOTAL_TIME,
            TRIAL_EVAL,
            TRIAL_TIMING_KEYS,
            TRIAL_TRAIN,
            after_answer_key,
            phase_key,
        )

        trials = [*(self.searched or []), *(self.choose_runs or []), *(self.judge_runs or [])]
        sums = {key: sum(t.timings.get(key, 0.0) for t in trials) for key in TRIAL_TIMING_KEYS}
        slots = max_concurrent(self.space, self.cluster)
        after = {phase_key(name): after_answer_key(name) for name in self.clock.after_answer}
        phases = {key: seconds for key, seconds in self.clock.seconds.items() if key not in after}
        earlier = self.session.earlier_s if self.session is not None else 0.0
        busy_window = sum(phases.get(phase_key(stage), 0.0) for stage in (SEARCH, CHOOSE, JUDGE)) * slots
        # A resumed search's trial sums hold its earlier sessions' work too, its phases this session's only: capped
        busy = sums[TRIAL_TRAIN] + sums[TRIAL_EVAL]
        running = search_concurrency([(t.started_at, t.ended_at) for t in self.searched or []], slots)
        measured = {key: running[name] for key, name in ((SEARCH_MEAN_RUNNING, "mean_running"),
                                                         (SEARCH_MEAN_RUNNING_STARTING, "mean_running_starting"),
                                                         (SEARCH_SLOT_USE, "slot_use")) if name in running}
        after_answer = {name: self.clock.seconds[key] for key, name in after.items() if key in self.clock.seconds}
        return {**({EARLIER_SESSIONS: earlier} if earlier else {}), **phases, **sums,
                SLOT_UTILISATION: min(1.0, busy / busy_window) if busy_window else 0.0, CONCURRENT_SLOTS: float(slots),
                **measured, **after_answer, TOTAL_TIME: earlier + self.clock.total()}

    def finished_baseline(self) -> Baseline:
        """The untouched model's score, waiting for its Ray task the first time it is asked for (then logged on the
        parent run, and kept there as a tag for --resume)."""
        if isinstance(self.baseline, PendingBaseline):
            from raycse.records import BASELINE_OBJECTIVE, BASELINE_TAG

            baseline = self.baseline = self.baseline.result()
            others = "".join(f"; {pooler}: {scores['objective']:.2f}" for pooler, scores in baseline.by_pooler.items()
                             if pooler != baseline.eval_pooler)
            self.log(f"baseline (the untouched model, pooler {baseline.eval_pooler}): objective "
                     f"{baseline.objective:.2f}{others}")
            self.tracker.log_metrics(self.parent_run_id, {BASELINE_OBJECTIVE: baseline.objective})
            self.tracker.set_tags(self.parent_run_id, {BASELINE_TAG: json.dumps(baseline.to_dict())})
        return self.baseline
