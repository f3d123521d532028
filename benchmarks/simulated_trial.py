"""A stand-in for a trial's training, to measure the search driver at scale without training (benchmarks/scale.py).

`SimulatedTrials` goes where raycse's training would (`SearchOptions.trial_stand_in`): every trial of the search
then runs `simulated_trial` in its Ray worker, which does what `raycse.driver.tune.trial.run_trial` does around the
training — the replay check against MLflow, Tune checkpoints at the trial's pace, resuming from one — and in place
of the training replays a dev curve, one evaluation every `eval_interval_s` seconds, with the keys a real
evaluation reports (so that the driver's callback writes to MLflow what it writes for a real trial). The worker
imports Ray and raycse's run vocabulary only: no torch, so a laptop can hold dozens of such workers.

The curve comes from any object with `curve(params, seed) -> [(step, objective), ...]`: `ParametricCurve` here (a
smooth made-up landscape), or a surrogate of a recorded landscape (benchmarks/landscapes/) with the same method.
Each trial also writes when it started and when it "trained" to `timeline_dir`, from which the benchmark
measures how many trials really trained at once (a trial waits in `tune.report` until the driver takes its
result: a slow driver shows as slots that wait, not train).
"""
from __future__ import annotations

import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import cloudpickle

from raycse.records import (
    TRIAL_CHECKPOINT,
    TRIAL_COMPILE,
    TRIAL_EVAL,
    TRIAL_STARTUP,
    TRIAL_TRAIN,
)

WORST = -100.0  # raycse.evaluation.sts.DevObjective.worst, without importing the evaluation (and torch) in the worker
PROGRESS_FILE = "simulated.json"
# This file lives outside the package, loaded by path (benchmarks/scale.py, the tests): Ray's workers could not import
# it by name, so its functions and classes travel by value with the trials that use them.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True)
class ParametricCurve:
    """A smooth landscape with one peak: a trial's objective rises from `start` towards its configuration's final
    value, start + gain x exp(-d^2 / 2 width^2), where d is the distance to `optimum` (in log units for positive
    values, else relative to the optimum's size); plus seed noise, the same for the same configuration and seed."""

    steps: tuple[int, ...]
    optimum: dict[str, float] = field(default_factory=dict)
    start: float = 80.0
    gain: float = 7.0
    width: float = 1.0
    noise: float = 0.3

    def final(self, params: dict[str, Any]) -> float:
        distance = 0.0
        for name, best in self.optimum.items():
            value = params.get(name)
            if not isinstance(value, (int, float)):
                continue
            if value > 0 and best > 0:
                distance += math.log(value / best) ** 2
            else:
                distance += ((value - best) / (abs(best) + 1e-3)) ** 2
        return self.start + self.gain * math.exp(-distance / (2 * self.width ** 2))

    def curve(self, params: dict[str, Any], seed: int) -> list[tuple[int, float]]:
        rng = random.Random(f"{seed}|{sorted(params.items())}")
        final, last = self.final(params), self.steps[-1]
        return [(step, self.start + (final - self.start) * (1 - math.exp(-3 * step / last)) + rng.gauss(0, self.noise))
                for step in self.steps]


@dataclass(frozen=True)
class SimulatedTrials:
    """What every trial of a search runs instead of training: `curve`'s points, one every `eval_interval_s`."""

    curve: Any  # an object with curve(params, seed) -> [(step, objective), ...]
    eval_interval_s: float = 1.0
    checkpoint_bytes: int = 4096  # the size of the stand-in's best/ (Tune copies every reported checkpoint)
    timeline_dir: str | None = None  # where each trial writes {trial_id, start, training intervals}

    def trainable(self, plan, context):
        """The Tune function for a stage's plan (SearchOptions.trial_stand_in's contract)."""
        from ray import tune

        base = plan.base
        return tune.with_parameters(simulated_trial, trials=self, context=context, base_seed=base.seed,
                                    objective=base.objective, sentences_per_eval=base.batch_size * base.eval_steps)


def simulated_trial(tune_config: dict, trials: SimulatedTrials, context, base_seed: int, objective: str,
                    sentences_per_eval: int) -> None:
    """One simulated trial in its Ray worker: the replay check, then the curve with a checkpoint at every point."""
    from ray import tune

    from raycse.driver.tune.pacing import CheckpointPace
    from raycse.driver.tune.replay import replayed_result
    from raycse.driver.tune.trial_result import evaluation_result, final_result

    started = time.time()
    trial_id = tune.get_context().get_trial_id()
    replay = replayed_result(context, trial_id)
    if replay is not None:
        tune.report(replay)
        return
    spec = tune_config.get("raycse_trial")  # a fixed trial (confirmation); a search trial is its sampled values
    sampled, seed = (dict(tune_config), base_seed) if spec is None else (dict(spec["sampled"]), int(spec["seed"]))
    points = trials.curve.curve(sampled, seed)
    done = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as saved:
            done = json.loads((Path(saved) / "last" / PROGRESS_FILE).read_text())["evaluations"]
    best, best_step = WORST, 0
    for step, value in points[:done]:
        if value > best:
            best, best_step = value, step
    timings = {TRIAL_STARTUP: 0.0, TRIAL_COMPILE: 0.0, TRIAL_TRAIN: 0.0, TRIAL_EVAL: 0.0, TRIAL_CHECKPOINT: 0.0}
    training: list[tuple[float, float]] = []  # when it "trained" (slept): the slot did useful work
    pace = CheckpointPace(getattr(context, "checkpoint_every_s", 0.0))
    for index in range(done, len(points)):
        began = time.time()
        time.sleep(trials.eval_interval_s)
        training.append((began, time.time()))
        _write_timeline(trials.timeline_dir, trial_id, started, training)
        step, value = points[index]
        if value > best:
            best, best_step = value, step
        timings[TRIAL_TRAIN] += trials.eval_interval_s
        metrics = evaluation_result(step=step, total_steps=points[-1][0], objective=value, best_objective=best,
                                    best_step=best_step, train_loss=1.0 / (1.0 + step),
                                    sentences_per_s=sentences_per_eval / trials.eval_interval_s,
                                    timings=dict(timings), extra={objective: value})
        if pace.due():
            _report(trials, metrics, index + 1, final=False)
            pace.handed()
        else:
            tune.report(metrics)
    final = final_result(steps=points[-1][0] if points else 0, best_objective=best, best_step=best_step,
                         timings=timings)
    _report(trials, final, len(points), final=True)


def _report(trials: SimulatedTrials, metrics: dict, evaluations: int, final: bool) -> None:
    """tune.report with a checkpoint: best/ (a file of checkpoint_bytes) and, until the end, last/ (the progress)."""
    from ray import tune

    with tempfile.TemporaryDirectory(prefix="raycse-simulated-") as directory:
        (Path(directory) / "best").mkdir()
        (Path(directory) / "best" / "model.bin").write_bytes(b"\0" * trials.checkpoint_bytes)
        if not final:
            (Path(directory) / "last").mkdir()
            (Path(directory) / "last" / PROGRESS_FILE).write_text(json.dumps({"evaluations": evaluations}))
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))


def _write_timeline(timeline_dir: str | None, trial_id: str, started: float, training: list) -> None:
    """{trial_id, pid, start, training: [[began, ended], ...]}, rewritten after every evaluation (a stopped trial's
    thread may never run another line); pid: the Ray worker (Tune reuses workers)."""
    if not timeline_dir:
        return
    path = Path(timeline_dir) / f"{trial_id}.json"
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps({"trial_id": trial_id, "pid": os.getpid(), "start": started, "training": training}))
    os.replace(staging, path)
