"""The typed records a search produces: its trials, the untouched model's scores, and the outcome that the command
line prints, the summary file holds and the Python API returns."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from raycse.judging.decision import Decision
from raycse.judging.ranking import Ranked


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


@dataclass
class Baseline:
    """The untouched model: its objective with each evaluation pooler the trials use (`eval_pooler` the headline)
    and, unless the test tasks are off, its seven test tasks with that pooler (one evaluation: no seed)."""

    objective: float
    eval_pooler: str
    by_pooler: dict[str, dict[str, float]]
    test: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Baseline:
        return cls(objective=values["objective"], eval_pooler=values["eval_pooler"], by_pooler=values["by_pooler"],
                   test=values.get("test") or {})


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
        winner = self.winner
        said = "no winner" if winner is None else f"winner {winner['family']} " + " ".join(
            f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
            for name, value in winner["params"].items())
        judged = self.decision.config(self.winner_key).judge if self.decision and self.winner_key else None
        if judged is not None and judged.dev is not None:
            std = "" if judged.dev.std is None else f" ± {judged.dev.std:.2f}"
            said += f": {self.objective} {judged.dev.mean:.2f}{std} (n={judged.n})"
        return (f"<SearchOutcome {self.experiment!r} ({self.budget} budget, {len(self.trials)} trials): {said}; "
                f"untouched model {self.baseline.objective:.2f}>")

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
