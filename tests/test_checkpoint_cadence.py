"""Checkpoints sized by what they cost: last/ written at a cadence that keeps checkpoints within 5% of a trial's time
(raycse/training/checkpoints.py), and a trial that has ended keeping only its best/ (raycse/driver/tune/
checkpoint_retention.py) unless the search keeps checkpoints (--keep-checkpoints).

The rule is checked on a clock moved by hand; the trainer with a cadence goes on after a kill from its last last/; a
real Tune experiment's checkpoints lose or keep their last/ as the driver's callback is told, for a trial that ran
every step and for one a stopping rule stopped (as ASHA does); and one search at the papers' settings with the
stand-ins (BERT's shape with random weights, batch 64, max length 32, the synthetic wiki1m corpus, an evaluation
every 125 steps; the tiny BERT, two evaluations a trial) records its checkpoint seconds, leaves only best/ behind, and
its answer is exported and reported. What share of a trial checkpoints take is a speed figure, measured by
benchmarks/checkpoint_cadence.py (and printed here with -s), never asserted on a test's clock: on a loaded machine
it moves with whatever else runs.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from raycse.training.checkpoints import CHECKPOINT_SHARE, CheckpointCadence


class Clock:
    """The cadence's clock, moved by hand: the rule's arithmetic, without waiting."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_last_is_written_first_then_once_twenty_times_what_checkpoints_cost_has_passed():
    clock = Clock()
    cadence = CheckpointCadence(clock=clock)
    assert cadence.due()  # the first evaluation writes it, and times it
    cadence.writing_last()
    cadence.spent(0.5)  # the write
    cadence.spent(0.25)  # and its copy to Tune's storage: 0.75 s in all
    clock.now += 0.75 / CHECKPOINT_SHARE - 0.01
    assert 1 / CHECKPOINT_SHARE == 20 and not cadence.due()
    clock.now += 0.01
    assert cadence.due()
    cadence.writing_last()  # a new interval, measured from this write's own cost
    cadence.spent(0.1)
    clock.now += 2.0
    assert cadence.due()


def test_best_written_meanwhile_counts_and_the_pacing_floor_holds():
    clock = Clock()
    cadence = CheckpointCadence(least_interval_s=30.0, clock=clock)
    cadence.writing_last()
    cadence.spent(0.5)
    clock.now += 15.0
    cadence.spent(0.5)  # best/ improved: 1 s spent in 15 s, more than 5%
    clock.now += 5.0
    assert not cadence.due()  # 1 s in 20 s: not yet more than 20 times
    clock.now += 5.0
    assert not cadence.due()  # 25 s: cheap enough, but the search's pacing asks for 30 s between checkpoints
    clock.now += 5.0
    assert cadence.due()


def test_keep_checkpoints_is_an_option_of_search_and_compare():
    from raycse.cli import build_parser
    from raycse.errors import ConfigError
    from raycse.settings.options import COMPARE_OPTIONS, SEARCH_OPTIONS, checked

    for command in ("search", "compare"):
        args = build_parser().parse_args([command, "--space", "focal", "--keep-checkpoints"])
        assert args.keep_checkpoints is True
    assert build_parser().parse_args(["search", "--space", "focal"]).keep_checkpoints is False
    for options in (SEARCH_OPTIONS, COMPARE_OPTIONS):
        assert checked(options, {"keep_checkpoints": True}) == {"keep_checkpoints": True}
        with pytest.raises(ConfigError, match="keep_checkpoints"):
            checked(options, {"keep_checkpoints": "yes"})


# ------------------------------------------------------------------------------------------ the trainer
class Killed(Exception):
    pass


@pytest.mark.slow  # three short trainings
def test_a_training_with_a_cadence_goes_on_from_its_last_last(tiny_bert_dir, tmp_path):
    from raycse.settings.config import TrainConfig
    from raycse.training.trainer import train

    def config(name: str) -> TrainConfig:
        return TrainConfig(model=str(tiny_bert_dir), loss="simcse", batch_size=8, lr=1e-3, max_steps=8, eval_steps=2,
                           max_sentences=64, seed=3, test_eval=False, output_dir=str(tmp_path / name)).validate()

    whole = train(config("whole"))
    written = []

    def kill_at_step_6(report):
        written.append((report.step, report.checkpoint is not None))
        if report.step == 6:
            raise Killed

    # an interval no evaluation reaches: last/ at the first evaluation only (and at the last step, not reached)
    with pytest.raises(Killed):
        train(config("killed"), on_eval=kill_at_step_6, cadence=CheckpointCadence(least_interval_s=1e9))
    assert written == [(2, True), (4, False), (6, False)]
    resumed_reports = []
    resumed = train(config("killed"), on_eval=resumed_reports.append, resume=True,
                    cadence=CheckpointCadence(least_interval_s=1e9))
    # steps 3-6 trained again from step 2's last/; the last step writes last/ whatever the cadence
    assert [(r.step, r.checkpoint is not None) for r in resumed_reports] == [(4, True), (6, False), (8, True)]
    assert resumed["dev_curve"] == whole["dev_curve"] and resumed["best_step"] == whole["best_step"]


# ------------------------------------------------------------------ the driver's callback on a real Tune run
def _two_checkpoints(config):
    """Reports as a trial does: two evaluations, each handing Tune a checkpoint of best/ and last/ (the second at the
    last step), then its final result; a trial stopped after its first evaluation hands over one."""
    from ray import tune

    from raycse.driver.tune.trial_result import evaluation_result, final_result

    for step in (1, 2):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("best", "last"):
                Path(folder, name).mkdir()
                Path(folder, name, "weights").write_bytes(b"\0" * 1000)
            tune.report(evaluation_result(step=step, total_steps=2, objective=float(step), best_objective=float(step),
                                          best_step=step, train_loss=1.0, sentences_per_s=1.0, timings={}),
                        checkpoint=tune.Checkpoint.from_directory(folder))
    tune.report(final_result(steps=2, best_objective=2.0, best_step=2, timings={}))


@pytest.mark.slow
@pytest.mark.parametrize("ended, keep", [("finished", False), ("stopped", False), ("finished", True)])
def test_a_trial_that_ended_keeps_only_its_best_unless_the_search_keeps_checkpoints(tmp_path, local_ray,
                                                                                   tiny_bert_dir, ended, keep):
    """Stopped: by a stopping rule after its first evaluation, as ASHA stops a trial (Tune's decision STOP)."""
    from ray import tune

    from raycse.driver.tune.callback import MlflowSearchCallback
    from raycse.settings.space import load_space
    from raycse.tracking.tracker import Tracker

    space_file = tmp_path / "space.yaml"
    space_file.write_text(f"experiment: kept\nmodel: {tiny_bert_dir}\nloss: simcse\n"
                          "space: {tau: {type: uniform, low: 0.03, high: 0.1}}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = Tracker(uri, "kept").start_run("kept")
    callback = MlflowSearchCallback(uri, "kept", parent, load_space(space_file), log=print, keep_checkpoints=keep)
    (result,) = tune.Tuner(_two_checkpoints, param_space={"tau": 0.05}, run_config=tune.RunConfig(
        name="kept", storage_path=str(tmp_path / "ray"), callbacks=[callback], verbose=0,
        stop={"step": 1} if ended == "stopped" else None,
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1))).fit()
    (trial,) = [folder for folder in (tmp_path / "ray" / "kept").iterdir() if folder.is_dir()]
    newest = "checkpoint_000000" if ended == "stopped" else "checkpoint_000001"
    assert [p.name for p in trial.glob("checkpoint_*")] == [newest]  # Tune's own: one kept
    kept = sorted(p.name for p in Path(result.checkpoint.path).iterdir())
    assert kept == (["best", "last"] if keep else ["best"])
    run = Tracker(uri, "kept").run(callback.run_ids[result.metrics["trial_id"]])
    assert run.info.status == "FINISHED"  # recorded first, then deleted


# ------------------------------------------------------------------------ one search at the papers' settings
STEPS, EVAL_STEPS = 250, 125  # the papers' interval between evaluations
SPACE = """\
experiment: cadence
model: {model}
loss: focal
corpus: synthetic-wiki1m
train: {{batch_size: 64, max_len: 32, max_steps: {steps}, eval_steps: {eval_steps}, max_sentences: {sentences},
         lr: 1.0e-4}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: 2, seed: 0, test_eval: none, scheduler: {{name: fifo}}}}
resources: {{workers: 1, cpus_per_worker: 2}}
"""


@pytest.fixture(scope="module")
def cadence_search(tiny_bert_dir, few_sts_pairs, tmp_path_factory):
    """Two trials, one at a time: the first in a new worker, the second in the same one."""
    import ray

    from raycse.driver.run import run_search
    from raycse.driver.state import SearchOptions
    from raycse.evaluation.tasks import STS_DATA_ENV
    from raycse.settings.space import load_space

    folder = tmp_path_factory.mktemp("cadence")
    (folder / "cadence.yaml").write_text(SPACE.format(model=tiny_bert_dir, steps=STEPS, eval_steps=EVAL_STEPS,
                                                      sentences=64 * STEPS))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv(STS_DATA_ENV, str(few_sts_pairs))  # 64 pairs a task: the steps dominate, as on a GPU
        options = SearchOptions(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}", storage_path=str(folder / "ray"),
                                confirm=False, budget="full", max_concurrent=1)
        ray.shutdown()  # the one-CPU runtime of the tests above, if they ran: the search starts its own
        try:
            outcome = run_search(load_space(folder / "cadence.yaml"), options, log=lambda line: None)
        finally:
            ray.shutdown()
    return {"folder": folder, "outcome": outcome, "uri": options.tracking_uri}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_trial_records_the_seconds_its_checkpoints_took(cadence_search):
    from raycse.records import TRIAL_CHECKPOINT, TRIAL_TRAIN

    trials = cadence_search["outcome"].trials
    assert [t.steps for t in trials] == [STEPS, STEPS]
    for trial in trials:
        wall = trial.ended_at - trial.started_at
        checkpoint_s = trial.timings[TRIAL_CHECKPOINT]
        print(f"trial {trial.trial_id} ({trial.status}): checkpoints {checkpoint_s:.3f} s of {wall:.2f} s, "
              f"{checkpoint_s / wall:.1%} (the cadence's share between two writes: {CHECKPOINT_SHARE:.0%})")
        # best/ and last/ at both evaluations (the first and the last always write): time spent, within the trial
        assert 0 < checkpoint_s < wall and 0 < trial.timings[TRIAL_TRAIN] < wall


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_trial_that_ended_leaves_only_its_best_and_the_answer_is_exported_and_reported(cadence_search, capsys):
    from raycse.cli import main

    folder, uri = cadence_search["folder"], cadence_search["uri"]
    checkpoints = sorted((folder / "ray" / "cadence").glob("run_trial_*/checkpoint_*"))
    assert len(checkpoints) == 2  # one a trial (Tune keeps one)
    for checkpoint in checkpoints:
        assert sorted(p.name for p in checkpoint.iterdir()) == ["best"]
        assert not list(checkpoint.rglob("training_state.pt"))
    assert not list((folder / "ray").rglob("last"))
    handed = [int(p.name.split("_")[1]) + 1 for p in checkpoints]  # Tune numbers a trial's checkpoints from 0
    print(f"checkpoints handed to Tune: {handed}, of {STEPS // EVAL_STEPS} evaluations in a full trial")

    assert main(["export", "cadence", str(folder / "model"), "--tracking-uri", uri]) == 0
    assert (folder / "model" / "model.safetensors").is_file()
    assert main(["report", "cadence", "--tracking-uri", uri, "--output-dir", str(folder / "report")]) == 0
    assert (folder / "report" / "index.html").is_file()
    capsys.readouterr()


def test_a_trial_resumed_from_an_older_checkpoint_logs_each_evaluation_once(tmp_path, tiny_bert_dir):
    """A lost node or a killed driver can resume a trial from a checkpoint older than its last logged evaluation: the
    steps it evaluates again are not logged again (the run's history holds each step once)."""
    import pickle

    from raycse.driver.tune.callback import MlflowSearchCallback
    from raycse.records import TRIAL_TAG
    from raycse.settings.space import load_space
    from raycse.tracking.tracker import Tracker

    space_file = tmp_path / "space.yaml"
    space_file.write_text(f"experiment: once\nmodel: {tiny_bert_dir}\nloss: simcse\n"
                          "space: {tau: {type: uniform, low: 0.03, high: 0.1}}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "once")
    parent = tracker.start_run("once")
    callback = MlflowSearchCallback(uri, "once", parent, load_space(space_file), log=print)
    callback._start("t1", {TRIAL_TAG: "t1"}, {})
    callback._write_metrics("t1", [(8, {"objective": 1.0}), (16, {"objective": 2.0})])
    callback._write_metrics("t1", [(8, {"objective": 1.0}), (24, {"objective": 3.0})])  # a retry from step 0
    run_id = callback.run_ids["t1"]
    assert tracker.metric_history(run_id, "objective") == [(8, 1.0), (16, 2.0), (24, 3.0)]
    # the driver killed after step 24 reached MLflow, its snapshot older: the restored callback reads the run
    restored = pickle.loads(pickle.dumps(callback))
    restored._logged_through.clear()
    restored._start("t1", {TRIAL_TAG: "t1"}, {})
    restored._write_metrics("t1", [(24, {"objective": 3.0}), (32, {"objective": 4.0})])
    assert tracker.metric_history(run_id, "objective") == [(8, 1.0), (16, 2.0), (24, 3.0), (32, 4.0)]
