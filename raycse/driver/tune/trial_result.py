"""The Tune results a trial reports, in the shape the driver reads: one per evaluation and a last one.

The real trial (driver/trial.py) and the scale benchmark's stand-in (benchmarks/simulated_trial.py) both build their
results here, so the stand-in cannot drift from what the scheduler, the searcher and the MLflow callback consume.
No torch and no Ray: the stand-in's workers import only Ray and this.
"""
from __future__ import annotations

from typing import Any

from raycse.records import (
    BEST_OBJECTIVE,
    BEST_STEP,
    FINAL,
    OBJECTIVE,
    SENTENCES_PER_S,
    STEP,
    TOTAL_STEPS,
    TRAIN_LOSS,
)


def evaluation_result(*, step: int, total_steps: int, objective: float, best_objective: float, best_step: int,
                      train_loss: float, sentences_per_s: float, timings: dict[str, float],
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One evaluation: the objective (ASHA's and Optuna's value), the best so far, the training figures, the
    trial's cumulative timings, and `extra` (the objective's parts, the loss's diagnostics)."""
    return {STEP: step, TOTAL_STEPS: total_steps, OBJECTIVE: objective, BEST_OBJECTIVE: best_objective,
            BEST_STEP: best_step, TRAIN_LOSS: train_loss, SENTENCES_PER_S: sentences_per_s, **(extra or {}),
            **timings}


def final_result(*, steps: int, best_objective: float, best_step: int, timings: dict[str, float]) -> dict[str, Any]:
    """The last report of a finished trial: its best objective as the objective, so that a trial is judged by its
    best checkpoint (the one the trainer kept), and `final: 1`."""
    return {**timings, STEP: steps, OBJECTIVE: best_objective, BEST_OBJECTIVE: best_objective,
            BEST_STEP: best_step, FINAL: 1}
