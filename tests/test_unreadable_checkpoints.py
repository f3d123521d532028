"""A checkpoint that cannot be read back as it was written (a disk or copy fault: every file of it cut short).

A search trial sets it aside with one line naming it and trains from step 0: the storage fault is not counted against
its configuration, and no traceback reaches the console. `raycse train --resume`, which the user points at one
checkpoint, says which file cannot be read, in one line (exit 2). Real processes: the `raycse` command, stopped by
SIGTERM, its checkpoints truncated, then resumed."""
from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_reliability import TRAIN, with_values
from test_search import runs_of, search_args, small_dev_file, snapshot_names_newest_checkpoints, write_space
from test_stop_signals import RESUME_SEARCH, Watched, last_line, step_lines

pytestmark = pytest.mark.slow


def truncate(path: Path) -> None:
    """`path` cut to half its size (an empty file stays empty)."""
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 2)


def objectives(text: str, trial: str) -> dict[int, str]:
    """step -> the objective (as printed) of each evaluation of `trial` that the driver printed."""
    return {int(m[1]): m[2] for m in re.finditer(rf"^trial {trial} .* step +(\d+) .* objective +(\S+) ", text,
                                                  re.MULTILINE)}


@pytest.mark.timeout(900)
def test_a_resumed_search_sets_aside_checkpoints_it_cannot_read_and_counts_no_failure(tmp_path, tiny_bert_dir):
    import optuna

    space = write_space(tmp_path, tiny_bert_dir, "unreadable", num_samples=2, test_eval="none", steps=40,
                        objective=small_dev_file(tmp_path), confirm="null").read_text()
    space_file = tmp_path / "unreadable.yaml"
    space_file.write_text(space.replace("scheduler: {name: fifo}", "scheduler: {name: fifo}, max_concurrent: 1"))
    args = search_args(tmp_path, space_file)
    experiment = tmp_path / "ray" / "unreadable"

    # stopped in order in the middle of the first trial, once Tune's snapshot names its newest checkpoint
    stopped = Watched(args, tmp_path / "stopped.log", tmp_path)
    stopped.wait_for(lambda t: any(" step      8 " in line for line in step_lines(t, "search"))
                     and snapshot_names_newest_checkpoints(experiment), "a checkpoint of the first trial")
    stopped.stop(signal.SIGTERM)
    assert stopped.ended() == 143, stopped.text()[-3000:]
    assert last_line(stopped.text()) == f"raycse: stopped by SIGTERM; {RESUME_SEARCH}"
    interrupted = {line.split()[1] for line in step_lines(stopped.text(), "search")}
    assert len(interrupted) == 1 and "finished: best objective" not in stopped.text()

    # every file of every checkpoint cut to half its size
    files = [path for path in experiment.glob("run_trial_*/checkpoint_*/**/*") if path.is_file()]
    assert {path.parent.name for path in files} >= {"best", "last"}, files
    for path in files:
        truncate(path)
    state_files = {path for path in files if path.name == "training_state.pt"}

    resumed = Watched([*args, "--resume"], tmp_path / "resumed.log", tmp_path)
    assert resumed.ended(timeout=600) == 0, resumed.text()[-3000:]
    text = resumed.text()
    assert "Traceback" not in text and "cannot resume" not in text, text[-3000:]
    (trial,) = interrupted
    set_aside = [line for line in text.splitlines() if "set aside" in line]
    assert len(set_aside) == 1 and set_aside[0].startswith(f"trial {trial}  checkpoint set aside"), set_aside
    assert any(f"{path}: " in set_aside[0] for path in state_files) and "from step 0" in set_aside[0], set_aside
    # it trained again from its start, as it had: its first evaluation after the resume is its first of all, and the
    # steps it trained twice gave the same objective twice (the same seed, from step 0)
    before, after = objectives(stopped.text(), trial), objectives(text, trial)
    assert after and min(after) == 2 and max(before) >= 8, (before, after)
    assert {step: after[step] for step in before} == before

    # every trial once, FINISHED; no failure counted by Tune; the study complete
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent, children = runs_of(client, "unreadable")
    assert parent.info.status == "FINISHED"
    assert len(children) == 2 == len({r.data.tags["raycse.trial_id"] for r in children})
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    snapshot = sorted(experiment.glob("experiment_state-*.json"))[-1]  # the resumed run's
    failures = {re.search(r'"trial_id": "(\w+)"', trial_json)[1]: json.loads(run)["num_failures"]
                for trial_json, run in json.loads(snapshot.read_text())["trial_data"]}
    assert sorted(failures.values()) == [0, 0], failures
    study = optuna.load_study(study_name="unreadable", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    # its MLflow run holds each evaluation once
    run = next(r for r in children if r.data.tags["raycse.trial_id"] == trial)
    steps = [metric.step for metric in client.get_metric_history(run.info.run_id, "objective")]
    assert sorted(steps) == list(range(2, 41, 2)), steps


@pytest.mark.timeout(600)
def test_train_resume_names_the_checkpoint_file_it_cannot_read(tmp_path, tiny_bert_dir):
    """A best/ cut short is found before the training goes on (last/ recorded the size of each of its files): resuming
    would have ended with a model that does not load. Then a last/ cut short."""
    out = tmp_path / "out"
    args = [*with_values(TRAIN, {"--max-steps": "200", "--eval-steps": "10", "--max-sentences": "1600"}),
            "--model", str(tiny_bert_dir), "--output-dir", str(out)]
    stopped = Watched(args, tmp_path / "stopped.log", tmp_path)
    stopped.wait_for(lambda t: (out / "last").is_dir(), "a checkpoint")
    stopped.stop(signal.SIGTERM)
    assert stopped.ended() == 143, stopped.text()[-3000:]

    for culprit in (out / "best" / "model.safetensors", out / "last" / "training_state.pt"):
        size = culprit.stat().st_size
        truncate(culprit)
        resumed = Watched([*args, "--resume"], tmp_path / f"{culprit.name}.log", tmp_path)
        assert resumed.ended() == 2, resumed.text()[-3000:]
        line = last_line(resumed.text())
        assert line.startswith(f"raycse: error: cannot resume from {culprit}: "), line
        if culprit.parent.name == "best":
            assert line.endswith(f"{size // 2:,} bytes, {size:,} were written"), line
        assert not (out / "results.json").exists()
