"""What `raycse.train` returns: one training's figures, typed."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# results.json's figures that are not scores of the best checkpoint
_NOT_SCORES = {"best_objective", "sentences_per_s", "train_seconds", "wall_seconds", "test_eval_seconds"}


@dataclass(frozen=True)
class TrainResult:
    """One training's outcome.

    output_dir       the training's folder: best/, last/ and results.json
    best_checkpoint  output_dir/best, the checkpoint the objective chose (a Hugging Face model folder)
    objective        what chose it: stsb_dev, sts_dev_avg or a development file's path
    best_objective   its figure there (Spearman x 100), at step `best_step` of the `steps` trained
    scores           the best checkpoint's figures by name: the seven STS test tasks, their mean "avg", SICK-R dev,
                     alignment and uniformity (empty when test_eval=False)
    dev_curve        the objective at every evaluation: [{"step": ..., "objective": ..., ...}]
    sentences_per_s  training throughput over the whole batch (all workers)
    wall_seconds     the training's wall-clock time, its test evaluation included
    results          results.json's whole contents (the settings, the poolers, where the time went, ...)
    """

    output_dir: Path
    objective: str
    best_objective: float
    best_step: int
    steps: int
    scores: dict[str, float]
    dev_curve: list[dict[str, Any]]
    sentences_per_s: float
    wall_seconds: float
    results: dict[str, Any] = field(repr=False)

    @property
    def best_checkpoint(self) -> Path:
        return self.output_dir / "best"

    @classmethod
    def from_results(cls, output_dir: str | Path, results: dict[str, Any]) -> TrainResult:
        scores = {name: value for name, value in results.items()
                  if isinstance(value, float) and name not in _NOT_SCORES}
        return cls(output_dir=Path(output_dir).expanduser(), objective=results["objective"],
                   best_objective=results["best_objective"], best_step=results["best_step"], steps=results["steps"],
                   scores=scores, dev_curve=list(results.get("dev_curve") or []),
                   sentences_per_s=results.get("sentences_per_s", 0.0),
                   wall_seconds=results.get("wall_seconds", 0.0), results=results)
