"""Nothing lost at any moment: a killed `raycse train` resumes to the uninterrupted result, a full disk leaves the
previous checkpoint whole, and every broken input names its culprit with exit status 2."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from raycse.cli import main

TRAIN = ["train", "--loss", "simcse", "--batch-size", "8", "--max-steps", "12", "--eval-steps", "2",
         "--max-sentences", "160", "--lr", "1e-3", "--no-test-eval", "--no-mlflow"]


def with_values(args: list[str], values: dict[str, str]) -> list[str]:
    """`args` with some flags' values replaced, or the flags added: `raycse train` takes each flag once."""
    args = list(args)
    for flag, value in values.items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


def run_cli(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raycse", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kwargs)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_train_killed_at_an_evaluation_resumes_to_the_uninterrupted_result(tmp_path, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    model = ["--model", str(tiny_bert_dir)]
    whole = run_cli([*TRAIN, *model, "--output-dir", str(tmp_path / "whole")])
    assert whole.returncode == 0, whole.stderr[-2000:]

    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "raycse", *TRAIN, *model, "--output-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in proc.stdout:  # each evaluation prints one line once its checkpoints are written
        if line.startswith("step") and int(line.split()[1].split("/")[0]) >= 6:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert not (out / "results.json").exists()  # it did not finish
    assert SentenceTransformer(str(out / "best"), device="cpu").encode(["loadable after a kill"]).shape == (1, 32)

    refused = run_cli([*TRAIN, *model, "--output-dir", str(out)])
    assert refused.returncode == 2 and "--resume" in refused.stderr  # a non-empty directory needs --resume

    resumed = run_cli([*TRAIN, *model, "--output-dir", str(out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    first_step = int(next(line for line in resumed.stdout.splitlines() if line.startswith("step")).split()[1]
                     .split("/")[0])
    assert first_step >= 8  # it went on from its last evaluation, not from step 0
    expected = json.loads((tmp_path / "whole" / "results.json").read_text())
    got = json.loads((out / "results.json").read_text())
    assert got["best_objective"] == pytest.approx(expected["best_objective"], abs=0.01)
    assert [p["step"] for p in got["dev_curve"]] == [p["step"] for p in expected["dev_curve"]]
    for a, b in zip(got["dev_curve"], expected["dev_curve"]):
        assert a["objective"] == pytest.approx(b["objective"], abs=0.01)

    finished = run_cli([*TRAIN, *model, "--output-dir", str(out), "--resume"])
    assert finished.returncode == 2 and "finished training" in finished.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ctrl_c_stops_a_training_with_exit_130_and_one_line(tmp_path, tiny_bert_dir):
    """Ctrl-C (SIGINT to the command, as a terminal sends it) mid-training: exit status 130, the shell's for an
    interrupt, one line saying so and no traceback; the checkpoint of the last evaluation stays loadable."""
    out = tmp_path / "interrupted"
    args = [*with_values(TRAIN, {"--max-steps": "400"}), "--model", str(tiny_bert_dir), "--output-dir", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "raycse", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in proc.stdout:
        if line.startswith("step"):  # the first evaluation is done: training is under way
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "raycse: interrupted" and "Traceback" not in stdout + stderr
    assert not (out / "results.json").exists() and (out / "best" / "config.json").is_file()


@pytest.mark.slow  # a training
def test_a_full_disk_while_checkpointing_leaves_the_previous_best_intact(tmp_path, tiny_bert_dir, monkeypatch):
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertModel

    from raycse.settings.config import TrainConfig
    from raycse.training.checkpoints import CheckpointWriteError
    from raycse.training.trainer import train

    evaluations = []

    def failing_after_the_first_evaluation(real):
        def write(obj, target, *args, **kwargs):  # half a file, then the disk is full
            if not evaluations:
                return real(obj, target, *args, **kwargs)
            path = Path(target) / "model.safetensors" if Path(target).is_dir() else Path(target)
            path.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return write

    monkeypatch.setattr(torch, "save", failing_after_the_first_evaluation(torch.save))
    monkeypatch.setattr(BertModel, "save_pretrained", failing_after_the_first_evaluation(BertModel.save_pretrained))
    out = tmp_path / "run"
    config = TrainConfig(model=str(tiny_bert_dir), batch_size=8, max_steps=8, eval_steps=2, max_sentences=160,
                         lr=1e-2, test_eval=False, output_dir=str(out)).validate()
    listing = {}

    def on_eval(report):
        evaluations.append(report.step)
        listing.update({name: sorted(p.name for p in (out / name).iterdir()) for name in ("best", "last")})

    with pytest.raises(CheckpointWriteError) as err:
        train(config, on_eval=on_eval)
    message = str(err.value)
    assert "No space left on device" in message and str(out) in message and "\n" not in message
    assert err.value.errno == errno.ENOSPC
    assert evaluations == [2]
    for name in ("best", "last"):  # the checkpoints of step 2, whole
        assert sorted(p.name for p in (out / name).iterdir()) == listing[name]
    assert SentenceTransformer(str(out / "best"), device="cpu").encode(["still here"]).shape == (1, 32)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no half-written staging directory


def test_the_command_line_says_a_full_disk_in_one_line(tmp_path, tiny_bert_dir, monkeypatch, capsys):
    import raycse.encoder.model

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(raycse.encoder.model, "replace_directory", no_space)
    code = main([*with_values(TRAIN, {"--max-steps": "2"}), "--model", str(tiny_bert_dir),
                 "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "No space left on device" in err and "checkpoint" in err and str(tmp_path / "run") in err


def broken_models(source: Path, root: Path) -> dict[str, tuple[Path, str]]:
    """Copies of a good model directory, each broken one way: {case: (directory, the file the error must name)}."""
    cases = {}

    def copy(name: str) -> Path:
        target = root / name
        shutil.copytree(source, target)
        return target

    weights = copy("truncated-weights") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    cases["truncated-weights"] = (weights.parent, "model.safetensors")
    garbage = copy("garbage-weights") / "model.safetensors"
    garbage.write_bytes(b"\x00garbage" * 100)
    cases["garbage-weights"] = (garbage.parent, "model.safetensors")
    missing = copy("no-weights")
    (missing / "model.safetensors").unlink()
    cases["no-weights"] = (missing, "model.safetensors")
    config = copy("bad-config") / "config.json"
    config.write_text("{ not json")
    cases["bad-config"] = (config.parent, "config.json")
    unknown = copy("unknown-format") / "config.json"
    unknown.write_text(json.dumps({**json.loads(unknown.read_text()), "model_type": "no-such-architecture"}))
    cases["unknown-format"] = (unknown.parent, "config.json")
    return cases


def test_a_broken_model_directory_is_one_line_naming_the_file_and_exit_2(tmp_path, tiny_bert_dir, capsys):
    for case, (directory, file) in broken_models(Path(tiny_bert_dir), tmp_path / "models").items():
        out = tmp_path / f"out-{case}"
        code = main([*TRAIN, "--model", str(directory), "--output-dir", str(out)])
        err = capsys.readouterr().err.strip()
        assert code == 2, (case, err)
        assert len(err.splitlines()) == 1 and err.startswith("raycse: error: --model:"), (case, err)
        assert str(directory) in err and file in err, (case, err)
        assert not out.exists()


def test_a_search_over_a_broken_model_names_the_space_file_and_exit_2(tmp_path, tiny_bert_dir, capsys):
    directory, _ = broken_models(Path(tiny_bert_dir), tmp_path / "models")["truncated-weights"]
    space = tmp_path / "s.yaml"
    space.write_text(f"loss: simcse\nmodel: {directory}\nspace: {{tau: {{type: uniform, low: 0.01, high: 0.1}}}}\n")
    code = main(["search", "--space", str(space), "--storage-path", str(tmp_path / "ray"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert str(space) in err and "model.safetensors" in err
    assert not (tmp_path / "ray").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("args, culprit", [
    (["--output-dir", "/proc/raycse-nope/run"], "--output-dir"),
    (["--output-dir", "{file}"], "not a directory"),
    (["--tracking-uri", "not-a-uri"], "--tracking-uri"),
    (["--corpus", "{dir}"], "--corpus"),
    (["--eval-steps", "0"], "--eval-steps"),
    (["--gpus-per-worker", "-1"], "--gpus-per-worker"),
    (["--max-grad-norm", "-1"], "--max-grad-norm"),
    (["--pos-ratio", "0", "--loss", "imsimcse"], "--pos-ratio"),
    (["--objective", "no_such_objective"], "--objective"),
    (["--objective", "{file}", "--objective-columns", "a,b"], "--objective"),
    (["--sup-data", "/no/such/nli.csv", "--loss", "simcse-sup"], "--sup-data"),
])
def test_more_bad_train_input_is_one_clean_line(tmp_path, tiny_bert_dir, capsys, monkeypatch, args, culprit):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    args = [a.format(file=tmp_path / "a-file", dir=tmp_path / "a-dir") for a in args]
    base = ["train", "--model", str(tiny_bert_dir), "--loss", "simcse", "--max-steps", "2", "--eval-steps", "2"]
    if "--output-dir" not in args:
        base += ["--output-dir", str(tmp_path / "out")]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(with_values(base, dict(zip(args[::2], args[1::2])))) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("raycse: error:") and len(err.splitlines()) == 1 and culprit in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written: no output dir, no mlflow.db
    assert not os.path.exists("/proc/raycse-nope")


def test_runs_of_trials_that_tune_never_recorded_are_dropped_on_resume(tmp_path):
    """A kill between a trial's start (its MLflow run, its Optuna trial) and Tune's next snapshot leaves a trial that
    the resumed Tune does not know and replaces: its run is deleted, its Optuna trial failed; nothing else moves."""
    import optuna
    from mlflow.tracking import MlflowClient

    from raycse.driver.tune.searcher import fail_unrecorded_trials
    from raycse.records import RAY_TRIAL_ID, STAGE_TAG, STATUS_TAG, TRIAL_TAG
    from raycse.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "lost")
    parent = tracker.start_run("search")

    def child(trial_id: str, stage: str, status: str) -> str:
        run_id = tracker.start_run(trial_id, parent_run_id=parent, tags={TRIAL_TAG: trial_id, STAGE_TAG: stage})
        if status != "RUNNING":
            tracker.end_run(run_id, status)
        return run_id

    runs = {"done": child("done", "search", "FINISHED"), "resumed": child("resumed", "search", "KILLED"),
            "lost": child("lost", "search", "KILLED"), "lost-live": child("lost-live", "search", "RUNNING"),
            "finished-unknown": child("finished-unknown", "search", "FINISHED"),
            "other-stage": child("other-stage", "judge", "KILLED")}
    dropped = tracker.drop_unrecorded_trials(parent, (STAGE_TAG, "search"), {"done", "resumed", "new"})
    assert sorted(dropped) == ["lost", "lost-live"]
    client = MlflowClient(tracking_uri=uri)
    for name, run_id in runs.items():
        run = client.get_run(run_id)
        assert (run.info.lifecycle_stage == "deleted") == (name in dropped), name
        assert (run.data.tags.get(STATUS_TAG) == "lost") == (name in dropped), name
    assert client.get_run(runs["lost-live"]).info.status == "KILLED"

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", study_name="lost")
    for ray_id in ("done", "resumed", "lost"):
        trial = study.ask()
        trial.set_user_attr(RAY_TRIAL_ID, ray_id)
        if ray_id == "done":
            study.tell(trial, 87.0)
    assert fail_unrecorded_trials(study, {"done", "resumed"}) == [2]
    states = {t.user_attrs[RAY_TRIAL_ID]: t.state.name for t in study.trials}
    assert states == {"done": "COMPLETE", "resumed": "RUNNING", "lost": "FAIL"}


def test_the_resume_says_that_the_runs_left_open_go_on_and_they_do(tmp_path, tiny_bert_dir):
    """A killed driver leaves its running trials' MLflow runs RUNNING. The resume says what becomes of them, and it
    is what the resumed trials then do: each goes on under its own run (the callback reopens it; no second run for
    the trial), which its end closes."""
    from mlflow.tracking import MlflowClient

    from raycse.driver.stages.setup import _open_parent_run
    from raycse.driver.state import SearchOptions, SearchState
    from raycse.driver.tune.callback import MlflowSearchCallback
    from raycse.records import PATH_TAG, SEARCH_TAG, STATUS_TAG, TRIAL_TAG
    from raycse.settings.space import load_space
    from raycse.tracking.tracker import Tracker

    space_file = tmp_path / "space.yaml"
    space_file.write_text(f"experiment: left-open\nmodel: {tiny_bert_dir}\nloss: simcse\n"
                          "space: {tau: {type: uniform, low: 0.03, high: 0.1}}\n")
    space = load_space(space_file)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "left-open")
    path = str(tmp_path / "ray" / "left-open")
    parent = tracker.start_run("left-open", tags={SEARCH_TAG: "left-open", PATH_TAG: path})
    first = MlflowSearchCallback(uri, "left-open", parent, space, log=print)
    for trial_id in ("a", "b"):  # the first driver's trials, killed while they ran
        first._start(trial_id, {TRIAL_TAG: trial_id}, {})

    lines: list[str] = []
    state = SearchState(loaded_space=space, options=SearchOptions(tracking_uri=uri, storage_path=str(tmp_path / "ray"),
                                                                  resume=True), log=lines.append)
    state.tracker, state.name, state.search_path, state.space = tracker, "left-open", path, space
    assert _open_parent_run(state) == parent
    (said,) = lines
    assert "2 trial run(s) the stopped search left open go on under the same MLflow run(s)" in said, said
    assert "orphaned" not in said and "marked KILLED" not in said

    client = MlflowClient(tracking_uri=uri)
    resumed = MlflowSearchCallback(uri, "left-open", parent, space, log=print)
    resumed.__setstate__(resumed.__getstate__())  # as Tune restores its callback on --resume
    for trial_id in ("a", "b"):
        resumed._start(trial_id, {TRIAL_TAG: trial_id}, {})
        assert resumed.run_ids[trial_id] == first.run_ids[trial_id]  # the same run, going on
        assert client.get_run(first.run_ids[trial_id]).info.status == "RUNNING"
        resumed._end(trial_id, {STATUS_TAG: "finished"}, "FINISHED")
    children = tracker.child_runs(parent)
    assert len(children) == 2 and {run.info.status for run in children} == {"FINISHED"}
