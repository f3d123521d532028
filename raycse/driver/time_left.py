"""How long a stage of a search has left, from what its trials have shown so far (the status line's estimate).

A trial's time runs from its start (its worker's start-up included) to its last evaluation, then to its end:

- its **training**: a running trial's is extrapolated from the pace of its own steps; a trial not started yet
  takes the stage's (the mean of the trials that ran every step, else the running trials' extrapolated);
- its **finishing**: the seven test tasks when it scores them (a judging run on a test seed), else little more
  than its last checkpoint. Finishing is measured on the trials that ended: test scoring is kept from stage to
  stage (the same tasks, the same model), the rest within the stage (a search stage with `test_eval: all` scores
  every trial though none is marked). Before any test scoring has been measured, it is priced at
  TEST_SCORING_EVALS dev evaluations at the pace of the trial's own.

The stage ends when the last of its slots does: the running trials hold their slots, and the trials not started
yet take the first free one, the longest first. The slots are as many as the trials seen running at once.

A stage whose trials ASHA stops early ends sooner than this (every trial is counted to its end); the stages still to
come are not counted. A stage resumed with trials already finished counts only what is left.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# The seven test tasks cost this many dev evaluations: 91.9 s against 11.2 s a dev evaluation (STS-B and SICK-R
# dev) in the judging runs of the CPU main job of 2026-11-26 (all-MiniLM-L6-v2, 2 cores; the recorded timeline is
# benchmarks/results/quick-start-cpu/2026-11-26-cpu2/trials.json). By their sentence pairs it would be 9.4 (18,850
# against 2,000); the test sets repeat more of their sentences, which are encoded once.
TEST_SCORING_EVALS = 8.2


@dataclass
class TrialClock:
    """One trial as the stage's clock sees it (times on the clock of the display)."""

    started: float
    scores_test: bool = False
    last_report: float | None = None
    step: int = 0
    total: int = 0
    first_step: int = 0  # the step of its first evaluation: its evaluation interval
    eval_s: float | None = None  # its dev evaluations' seconds so far, at `eval_step`
    eval_step: int = 0
    ended: float | None = None

    @property
    def eval_pace(self) -> float | None:
        """Seconds of one dev evaluation, from its own timings."""
        if not self.eval_s or not self.first_step or not self.eval_step:
            return None
        return self.eval_s / max(1, round(self.eval_step / self.first_step))

    def training_s(self) -> float | None:
        """Its start to its last evaluation, extrapolated to its last step (None before its first evaluation)."""
        if self.last_report is None or not self.step or not self.total:
            return None
        return (self.last_report - self.started) * max(self.total, self.step) / self.step


@dataclass
class StageClock:
    """The trials of one stage, and what they say of the time it has left. `learned_test` is shared between the
    stages of a search: the test scorings measured so far."""

    planned: int = 0
    planned_tests: int | None = None  # how many of the planned trials score the test tasks (None: not said)
    trials: dict[str, TrialClock] = field(default_factory=dict)
    learned_test: list[float] = field(default_factory=list)
    finishing: list[float] = field(default_factory=list)  # this stage's trials that score no test, measured
    most_at_once: int = 0

    # ------------------------------------------------------------------------------------------ feeding
    def started(self, trial_id: str, now: float, scores_test: bool = False) -> None:
        if trial_id not in self.trials:
            self.trials[trial_id] = TrialClock(started=now, scores_test=scores_test)
        self.most_at_once = max(self.most_at_once, len(self._running()))

    def reported(self, trial_id: str, now: float, step: int | None, total: int | None) -> None:
        trial = self.trials.get(trial_id)
        if trial is None:
            self.started(trial_id, now)
            trial = self.trials[trial_id]
        if step:
            trial.last_report, trial.step, trial.total = now, int(step), int(total or trial.total or step)
            trial.first_step = trial.first_step or int(step)

    def timed(self, trial_id: str, step: int | None, eval_s: float | None) -> None:
        """A trial's cumulative dev-evaluation seconds at `step` (its latest result's timings)."""
        trial = self.trials.get(trial_id)
        if trial is not None and step and eval_s:
            trial.eval_s, trial.eval_step = float(eval_s), int(step)

    def ended(self, trial_id: str, now: float, measured: bool = True) -> None:
        """A trial ended; `measured` False for one that ended before this process saw it run (a resumed stage)."""
        trial = self.trials.setdefault(trial_id, TrialClock(started=now))
        trial.ended = now
        if measured and trial.last_report is not None and trial.step >= trial.total > 0:
            (self.learned_test if trial.scores_test else self.finishing).append(now - trial.last_report)

    # ------------------------------------------------------------------------------------------ estimate
    def remaining(self, now: float) -> float | None:
        """Seconds until the stage's last trial ends; None while nothing prices a trial yet."""
        running = self._running()
        training = self._training_s()
        loads = []
        for trial in running:
            left = self._left(trial, now, training)
            if left is None:
                return None
            loads.append(left)
        pending = self._pending()
        if pending and training is None:
            return None
        slots = max(self.most_at_once, len(running), 1)
        loads += [0.0] * (slots - len(loads))
        for scores in sorted(pending, reverse=True):  # the longest first, each to the first free slot
            finishing = self._finishing(scores, None)
            if finishing is None:
                return None
            index = loads.index(min(loads))
            loads[index] += training + finishing
        return max(loads) if loads else 0.0

    def _running(self) -> list[TrialClock]:
        return [t for t in self.trials.values() if t.ended is None]

    def _pending(self) -> list[bool]:
        """Whether each trial not started yet scores the test tasks."""
        count = max(0, self.planned - len(self.trials))
        tests = 0 if self.planned_tests is None else max(0, self.planned_tests
                                                            - sum(t.scores_test for t in self.trials.values()))
        return [True] * min(tests, count) + [False] * max(0, count - tests)

    def _training_s(self) -> float | None:
        """A trial's training in this stage: the mean of those that ran every step, else of the running ones."""
        done = [t.training_s() for t in self.trials.values() if t.ended is not None and t.total and t.step >= t.total]
        done = [s for s in done if s is not None]
        if not done:
            done = [s for s in (t.training_s() for t in self._running()) if s is not None]
        return sum(done) / len(done) if done else None

    def _finishing(self, scores_test: bool, trial: TrialClock | None) -> float | None:
        """How long a trial takes after its last evaluation: measured, else priced (test scoring) or nothing."""
        if scores_test:
            if self.learned_test:
                return sum(self.learned_test) / len(self.learned_test)
            paces = [p for p in (t.eval_pace for t in ([trial] if trial else []) + list(self.trials.values())) if p]
            return TEST_SCORING_EVALS * paces[0] if paces else None
        return sum(self.finishing) / len(self.finishing) if self.finishing else 0.0

    def _left(self, trial: TrialClock, now: float, training: float | None) -> float | None:
        finishing = self._finishing(trial.scores_test, trial)
        if finishing is None:
            return None
        if trial.last_report is None:  # starting: the stage's training, less what it has had
            return None if training is None else max(0.0, training - (now - trial.started)) + finishing
        if trial.step < trial.total:
            pace = (trial.last_report - trial.started) / trial.step
            return max(0.0, pace * (trial.total - trial.step) - (now - trial.last_report)) + finishing
        return max(0.0, finishing - (now - trial.last_report))  # finishing now
