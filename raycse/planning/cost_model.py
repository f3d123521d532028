"""What a search costs: its wall clock, GPU-hours and peak disk, built from named terms whose figures each state
where they came from (raycse/planning/cost_figures.py). Pure: figures in, seconds and bytes out, so that the model can
be checked against recorded runs (tests/test_costs.py) without running anything.

A trial's seconds are the sum of its terms:

- start-up: for the first trial of each slot of a Tune run, a new process: Tune's own trial process, and with it (or,
  under --no-warm-workers, in it) a worker's interpreter, imports, model load and CUDA context unless a warm worker
  of the search has them already; a reused one's few tenths of a second after it (Tune reuses its workers); plus
  the compile, when the trial compiles;
- training: its steps at the step time with the plan's trials sharing each GPU;
- evaluations: one of the objective every `eval_steps` and at the last step, and the seven test tasks when the file
  asks for them (a trial that runs to its end under `test_eval: all`; a judging run on a test seed);
- checkpoints: a write of `best/` and `last/` (and Tune's copy of them) at each evaluation; under the trainer's
  cadence (raycse.training.checkpoints: CHECKPOINT_SHARE), at the first evaluation and the last, and between them at
  most that share of the trial's other seconds.

A stage's wall clock lays its trials on its slots in order, each on the first free slot, as Tune does, and ends with
its last trial: the next stage waits for it (a barrier). The search stage starts beside the untouched model's scoring,
which holds one slot (a first run; a score kept from an earlier run costs nothing). ASHA stops, in expectation,
1 - 1/reduction_factor of the trials that reach each rung; a stopped trial is not scored on the test tasks.

The judging stage is one Tune run per look; a look's block runs with the chance that the looks before it did not
stop (raycse/planning/judging_runs.py). The expected wall clock weighs each block by that chance; the maximum is the
fixed design's, every block run, and no trial stopped early by ASHA.

wall clock = setup + tokenising the corpus + the stages + recording and the report.
GPU-hours = wall clock x the GPUs planned: the GPUs are held from the search's start to its end.
Peak disk: the checkpoints ray_results/ keeps (`best/` of a trial that ended; its `last/` too with --keep-checkpoints),
the trials running (`best/`, `last/` in their folder and Tune's copy of both), and the registered model.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

# What a checkpoint holds, in copies of the model's float32 weights: best/ (the weights), last/ (the weights and
# Adam's two moments), and what is written at each evaluation (both, then Tune's copy of both to its storage).
BEST_COPIES, LAST_COPIES = 1, 3
WRITE_COPIES = 2 * (BEST_COPIES + LAST_COPIES)
# What a finished search's folder keeps, measured: the CPU main job of 2026-11-26, 364 MB a search trial ASHA stopped
# (best/ and last/) and 92 MB any other (best/) with all-MiniLM-L6-v2's 91 MB of weights.
DISK_RECORD = "benchmarks/results/quick-start-cpu/2026-11-26-cpu2/disk.txt"
# Which ended trials keep last/ beside best/: none (a search deletes it when a trial ends), all (--keep-checkpoints),
# or those ASHA stopped (what the search of DISK_RECORD did, before it deleted them).
KEEP_LAST = ("none", "all", "stopped")


@dataclass(frozen=True)
class Figure:
    """One input of the model: its value (seconds, unless said) and where it came from."""

    value: float
    source: str


@dataclass(frozen=True)
class Rates:
    """The per-unit figures of a plan: a step at the planned sharing, an evaluation of the objective and of the seven
    test tasks, a worker's start-up (new, reused), a compile, a checkpoint write, and the driver's own phases."""

    step: Figure
    dev_eval: Figure
    test: Figure
    cold_start: Figure
    warm_start: Figure
    compile: Figure
    checkpoint: Figure
    setup: Figure
    tokenize: Figure
    finish: Figure
    checkpoint_share: float | None = None  # the cadence's cap on checkpoints' share of a trial (None: every eval)


@dataclass(frozen=True)
class Trial:
    """One trial's work: its steps and evaluations, whether it scores the test tasks, and whether ASHA stopped it."""

    steps: int
    evals: int
    tests: bool = False
    stopped: bool = False
    checkpoints: bool = True  # False: a task that writes none (the untouched model's scoring)

    def seconds(self, rates: Rates, cold: bool) -> float:
        start = (rates.cold_start if cold else rates.warm_start).value + (rates.compile.value if self.steps else 0.0)
        work = self.steps * rates.step.value + self.evals * rates.dev_eval.value + (rates.test.value if self.tests
                                                                                    else 0.0)
        return start + work + self.checkpoint_seconds(rates, work)

    def checkpoint_seconds(self, rates: Rates, work: float) -> float:
        """A write at every evaluation; under a cadence (rates.checkpoint_share), the first and the last, and
        between them at most that share of the trial's other seconds."""
        if not self.checkpoints:
            return 0.0
        every = self.evals * rates.checkpoint.value
        if rates.checkpoint_share is None:
            return every
        return min(every, min(self.evals, 2) * rates.checkpoint.value + rates.checkpoint_share * work)

    def kept_copies(self, keep_last: str) -> int:
        """What ray_results/ keeps of it once it ended, in copies of the weights: best/, and last/ where `keep_last`
        says (KEEP_LAST)."""
        kept = keep_last == "all" or (keep_last == "stopped" and self.stopped)
        return BEST_COPIES + (LAST_COPIES if kept and self.checkpoints else 0)


def slot_seconds(trials: list[Trial], slots: int, rates: Rates, beside: float = 0.0) -> tuple[float, float]:
    """(the wall clock of one Tune run, its trials' seconds summed): each trial on the first free slot, a new worker
    for a slot's first trial. `beside`: a task that holds one slot from the start (it is not a worker Tune reuses)."""
    slots = max(1, min(slots, len(trials) + (1 if beside else 0)))
    free, warm = [0.0] * slots, [False] * slots
    free[0] = beside
    busy = 0.0
    for trial in trials:
        slot = min(range(slots), key=lambda s: (free[s], not warm[s]))
        seconds = trial.seconds(rates, cold=not warm[slot])
        free[slot] += seconds
        warm[slot] = True
        busy += seconds
    return max(free), busy


@dataclass
class Block:
    """One Tune run of a stage: its trials as expected (ASHA's stops) and at most (none stopped), and the chance it
    runs at all (a judging look's)."""

    expected: list[Trial]
    most: list[Trial]
    reach: float = 1.0


@dataclass
class StageCost:
    """A stage's Tune runs, in order, and the task beside its first one."""

    name: str
    blocks: list[Block]
    beside: Trial | None = None

    def seconds(self, rates: Rates, slots: int, expected: bool = True) -> tuple[float, float]:
        """(wall clock, trial-seconds): expected, or at most."""
        wall = busy = 0.0
        for number, block in enumerate(self.blocks):
            trials = block.expected if expected else block.most
            if not trials:
                continue
            beside = self.beside.seconds(rates, cold=True) if self.beside is not None and number == 0 else 0.0
            w, b = slot_seconds(trials, slots, rates, beside)
            weight = block.reach if expected else 1.0
            wall, busy = wall + weight * w, busy + weight * b
        return wall, busy

    def runs(self, expected: bool = True) -> float:
        return sum((block.reach * len(block.expected)) if expected else len(block.most) for block in self.blocks)


@dataclass
class SearchCost:
    """The model of one search: its rates, slots and GPUs, its stages and its model's weights (bytes, or None)."""

    rates: Rates
    slots: int
    gpus: int
    stages: list[StageCost] = field(default_factory=list)
    weight_bytes: int | None = None
    keep_last: str = "none"  # one of KEEP_LAST

    def as_ran(self, trials: dict[str, int]) -> SearchCost:
        """The model fed the trials each named stage ran: its first `n` in its order (the judging stage's looks in
        turn, the winner's seeds before the published point's), every Tune run that ran certain to have run."""
        stages = []
        for stage in self.stages:
            left, blocks = trials.get(stage.name), []
            for block in stage.blocks:
                if left is None:
                    blocks.append(block)
                    continue
                take, left = min(left, len(block.most)), left - min(left, len(block.most))
                if take:
                    blocks.append(Block(block.expected[:take], block.most[:take], 1.0))
            stages.append(StageCost(stage.name, blocks, stage.beside))
        return dataclasses.replace(self, stages=stages)

    def fixed_seconds(self) -> float:
        return self.rates.setup.value + self.rates.tokenize.value + self.rates.finish.value

    def wall_seconds(self, expected: bool = True) -> float:
        return self.fixed_seconds() + sum(stage.seconds(self.rates, self.slots, expected)[0] for stage in self.stages)

    def gpu_hours(self, expected: bool = True) -> float:
        return self.wall_seconds(expected) * self.gpus / 3600

    def peak_disk_bytes(self) -> int | None:
        """The most the search's checkpoints hold at once, in ray_results/ and the trials' temporary folders: at the
        end of each Tune run, what every ended trial keeps, with a slot's worth of trials still writing (best/, last/
        and Tune's copy of them); every judging look counted."""
        if self.weight_bytes is None:
            return None
        kept, peak = 0, 0
        for trials in self._runs():
            kept += sum(trial.kept_copies(self.keep_last) for trial in trials)
            peak = max(peak, kept + min(self.slots, len(trials)) * (WRITE_COPIES - BEST_COPIES))
        return max(peak, kept + BEST_COPIES) * self.weight_bytes

    def end_disk_bytes(self) -> int | None:
        """What ray_results/ and the registered model keep once the search ended (every judging look counted)."""
        if self.weight_bytes is None:
            return None
        kept = sum(trial.kept_copies(self.keep_last) for trials in self._runs() for trial in trials)
        return (kept + BEST_COPIES) * self.weight_bytes

    def _runs(self) -> list[list[Trial]]:
        return [block.expected or block.most for stage in self.stages for block in stage.blocks]


def asha_trials(count: int, steps: int, eval_steps: int, rungs: list[int], reduction_factor: float,
                tests: bool) -> list[Trial]:
    """`count` search trials under ASHA's expected stops: trial i passes rung j when i is a multiple of rf^(j+1) (the
    first trial passes them all: a rung with no result before it lets it on), so 1/rf of the trials that reach a rung
    go on. A trial stopped at a rung ran to the first evaluation at or after it."""
    trials = []
    for i in range(count):
        stop = next((rung for j, rung in enumerate(rungs) if i % round(reduction_factor ** (j + 1))), None)
        if stop is None:
            trials.append(Trial(steps, evals_of(steps, eval_steps), tests))
        else:
            ran = min(steps, math.ceil(stop / eval_steps) * eval_steps)
            trials.append(Trial(ran, evals_of(ran, eval_steps), False, stopped=True))
    return trials


def evals_of(steps: int, eval_steps: int) -> int:
    """Evaluations of a training of `steps`: every `eval_steps`, and at the last step."""
    return max(1, math.ceil(steps / eval_steps))


def asha_rungs(steps: int, grace_steps: int, reduction_factor: float, max_t: int) -> list[int]:
    """The rungs a trial of `steps` meets: grace x rf^j below max_t, reached by an evaluation (one at or after it)."""
    rungs, rung = [], grace_steps
    while rung < max_t and rung <= steps:
        rungs.append(rung)
        rung = int(rung * reduction_factor)
    return rungs


def duration(seconds: float) -> str:
    """Seconds as a person reads them: seconds, minutes, hours, or days past a day.

    Example:
        >>> duration(90), duration(5400), duration(20 * 3600), duration(36 * 3600), duration(4310.9 * 3600)
        ('90 s', '90.0 min', '20.0 h', '1.5 days', '179.6 days')
    """
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 86400 else f"{seconds / 86400:.1f} days"
