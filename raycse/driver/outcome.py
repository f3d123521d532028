"""The typed records a search produces: its trials, the untouched model's scores, and the outcome that the command
line prints, the summary file holds and the Python API returns."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from raycse.judging.confirmation_plan import JUDGED_WORDS, TEST
from raycse.judging.decision import Decision
from raycse.judging.ranking import Ranked
from raycse.records import DIVERGED, DIVERGED_KEY, FINAL, FINISHED, STEP, STOPPED, TOTAL_STEPS


def reached_last_step(last: dict) -> bool:
    """Whether a trial's last result is its final report or an evaluation at its last step.

    ASHA decides at every rung, and a rung can fall on a trial's last step (the CPU budget's 16 steps: rungs at 8
    and 16): a trial it stops there has run every step it was to run, so it finished, whatever ASHA thought of it."""
    total = last.get(TOTAL_STEPS)
    return bool(last.get(FINAL)) or (bool(total) and int(last.get(STEP) or 0) >= int(total))


def ended_status(last: dict) -> str:
    """How a trial that ended without an error ended, from its last result: diverged, finished (it reached its last
    step) or stopped early by ASHA. The one rule behind the MLflow tag, the answer's table and the Optuna state."""
    if last.get(DIVERGED_KEY):
        return DIVERGED
    return FINISHED if reached_last_step(last) else STOPPED


@dataclass
class TrialRecord:
    """One Tune trial of any stage, as the answer needs it."""

    trial_id: str
    stage: str
    family: str
    params: dict[str, Any]
    seed: int
    config_key: str
    best_objective: float | None
    best_step: int
    steps: int
    status: str
    checkpoint: str | None  # the trial's best model directory (a path, or a URI on remote storage)
    test: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    ended_at: float = 0.0  # the wall-clock time (time.time()) of the trial's last result
    optuna_number: int | None = None  # the trial's number in the persistent Optuna study (search stage only)
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, objective) of every evaluation
    started_at: float = 0.0  # the wall-clock time (time.time()) of the trial's first result less its own time
    process_id: int | None = None  # the process that trained it (a warm worker serves trials of every stage)


@dataclass
class Baseline:
    """The untouched model: its objective with each evaluation pooler the trials use (`eval_pooler` the headline)
    and, unless the test tasks are off, its seven test tasks with that pooler (one evaluation: no seed); and the
    process that scored it (None: figures read from a cache)."""

    objective: float
    eval_pooler: str
    by_pooler: dict[str, dict[str, float]]
    test: dict[str, float] = field(default_factory=dict)
    process_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Baseline:
        return cls(objective=values["objective"], eval_pooler=values["eval_pooler"], by_pooler=values["by_pooler"],
                   test=values.get("test") or {}, process_id=values.get("process_id"))


@dataclass
class SearchOutcome:
    """What a search answers: its trials, the decision (raycse/judging/decision.py) and where it was recorded.

    `configurations` maps every configuration key the answer names (the ranked ones, the published point) to its
    loss family and parameters. `decision` is None when no confirmation stage ran (--no-confirm): then the answer
    is the search stage's first-ranked configuration, from one seed, and nothing judges it.
    """

    experiment: str
    name: str
    parent_run_id: str
    budget: str
    objective: str
    baseline: Baseline
    trials: list[TrialRecord]
    ranking: list[Ranked]
    winner_key: str | None
    published_key: str | None
    configurations: dict[str, dict[str, Any]]
    decision: Decision | None
    verdict: str
    timings: dict[str, float]
    registered_run: TrialRecord | None = None  # the run whose checkpoint was registered (see RecordStage)
    model_version: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def winner(self) -> dict[str, Any] | None:
        """The winner's family and parameters."""
        return self.configurations.get(self.winner_key) if self.winner_key else None

    @property
    def best_checkpoint(self) -> str | None:
        return self.registered_run.checkpoint if self.registered_run else None

    def __repr__(self) -> str:
        """One line headlined by the answer's own figures: the winner on the judged figure (the seven-task test
        average over its judging seeds) and winner − published with its judgment, the untouched model on the same
        figure. The dev objective chose and is not shown; without judging, the one search trial it comes from."""
        winner = self.winner
        said = "no winner" if winner is None else f"winner {winner['family']} " + " ".join(
            f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
            for name, value in winner["params"].items())
        untouched = f"untouched model {self.objective} {self.baseline.objective:.2f}"
        if self.decision is not None and self.winner_key is not None:
            said += self._judged()
            if self.decision.judged_on == TEST and self.baseline.test.get("avg") is not None:
                untouched = f"untouched model {self.baseline.test['avg']:.2f}"
        elif winner is not None:
            run = next((t for t in self.trials if t.config_key == self.winner_key and t.best_objective is not None),
                       None)
            if run is not None:
                said += f": {self.objective} {run.best_objective:.2f} (its one search trial, not judged)"
        return (f"<SearchOutcome {self.experiment!r} ({self.budget} budget, {len(self.trials)} trials): {said}; "
                f"{untouched}>")

    def _judged(self) -> str:
        """`: 79.56 (n=1) on the seven-task test average; winner − published +0.17 (n=1, unjudged)`."""
        decision = self.decision
        figure, versus = decision.winner_test, decision.versus_published
        text = ""
        if figure is not None:
            std = "" if figure.std is None else f" ± {figure.std:.2f}"
            on = JUDGED_WORDS.get(decision.judged_on, "the judged figure")
            text += f": {figure.mean:.2f}{std} (n={figure.n}) on {on}"
        if versus is not None and self.winner_key != self.published_key:
            word = ("unjudged" if versus.low is None else "beats" if decision.beats_published
                    else "below" if decision.below_published else "level")
            interval = "" if versus.low is None else f" [{versus.low:+.2f}, {versus.high:+.2f}]"
            text += f"; winner − published {versus.mean:+.2f}{interval} (n={versus.n}, {word})"
        return text

    def trials_dataframe(self):
        """One row per trial of every stage: trial_id, stage, family, seed, status, objective (its best development
        figure), best_step, steps, config_key, optuna_number, one params_<name> column per parameter, and test_<task>
        for the test figures its checkpoint has. A pandas DataFrame."""
        import pandas as pd

        rows = []
        for t in self.trials:
            rows.append({"trial_id": t.trial_id, "stage": t.stage, "family": t.family, "seed": t.seed,
                         "status": t.status, "objective": t.best_objective, "best_step": t.best_step,
                         "steps": t.steps, "config_key": t.config_key, "optuna_number": t.optuna_number,
                         **{f"params_{name}": value for name, value in t.params.items()},
                         **{f"test_{task}": value for task, value in t.test.items()}})
        return pd.DataFrame(rows)
