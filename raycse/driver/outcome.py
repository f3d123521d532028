"""The typed records a search produces: its trials, the untouched model's score, the confirmed configurations and
the outcome that the command line prints, the summary file holds and the Python API returns."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from raycse import stats


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


@dataclass
class Baseline:
    """The untouched model's objective with each evaluation pooler the trials use; `eval_pooler` is the headline."""

    objective: float
    eval_pooler: str
    by_pooler: dict[str, dict[str, float]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Baseline:
        return cls(objective=values["objective"], eval_pooler=values["eval_pooler"], by_pooler=values["by_pooler"])


@dataclass
class PlannedConfig:
    """One configuration of the confirmation plan: which seeds it is judged on, and which of them still need a run
    (the plan is kept on the parent run, so a resumed search continues the same plan)."""

    config_key: str
    sampled: dict[str, Any]  # as the search algorithm samples it (see SearchSpace.sampled_of)
    search_rank: int | None  # its rank among the search's configurations (None: the published point, unranked)
    is_published: bool
    seeds: list[int]
    seeds_to_run: list[int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PlannedConfig:
        return cls(**values)


@dataclass
class ConfirmedConfig:
    """A configuration of the confirmation stage: its best objective at every seed, and how it compares."""

    config_key: str
    family: str
    params: dict[str, Any]
    is_published: bool
    search_rank: int | None
    seeds: list[int]
    values: list[float]
    runs: list[TrialRecord]
    summary: stats.Summary | None
    diff_to_published: stats.PairedInterval | None = None


@dataclass
class SearchOutcome:
    """What a search answers: the records above, the verdict, and where the answer was written."""

    experiment: str
    name: str
    parent_run_id: str
    budget: str
    objective: str
    baseline: Baseline
    trials: list[TrialRecord]
    confirmation: list[ConfirmedConfig]
    winner: ConfirmedConfig | None
    verdict: str
    winner_test: dict[str, stats.Summary]
    seed_noise_std: float | None
    timings: dict[str, float]
    best_checkpoint: str | None = None
    model_version: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
