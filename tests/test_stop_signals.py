"""Stopped the way schedulers stop things: SIGTERM (`kill`, Slurm, Kubernetes, `timeout`) and SIGHUP (a closed ssh
session) stop `raycse search`, `train` and `compare` as Ctrl-C does, on real processes.

Each stop: exit 128 + the signal's number (143, 129), one last line naming the signal and how to continue, no
traceback, and no process the command started still running 5 s after it ended (every one of its descendants, seen
by process id while it ran, and every process of its process group). `--resume` then finishes with every trial
recorded once, in MLflow and in the Optuna study; under `timeout --signal=TERM` (the Slurm-shaped path: a signal
ahead of the time limit, then the same command with `--resume`), with the answer of the same search run without
interruption, worked out as tests/test_cluster_path.py works it out.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from test_reliability import TRAIN, with_values
from test_search import runs_of, search_args, small_dev_file, write_space

RESUME_SEARCH = "the same command with --resume continues the search"


class Watched:
    """A `raycse` command started as a scheduler starts a job (a session of its own, output to a file), and every
    process it starts, seen by process id while it runs (polled every 50 ms, so that a process whose parent ended,
    which then belongs to init, is still counted)."""

    def __init__(self, args: list[str], log: Path, cwd: Path, prefix: tuple[str, ...] = (), terminal: bool = False):
        import psutil

        self.log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        command = [*prefix, sys.executable, "-m", "raycse", *args]
        if terminal:  # a terminal of its own (as over ssh), its output copied to the log
            self.terminal, end = os.openpty()
            self.proc = subprocess.Popen(command, stdin=end, stdout=end, stderr=end, env=env, cwd=cwd,
                                         start_new_session=True, preexec_fn=take_as_controlling_terminal)
            os.close(end)
            threading.Thread(target=self._copy_terminal, daemon=True).start()
        else:
            self.proc = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                         start_new_session=True)
        self.seen: dict[int, psutil.Process] = {}
        self.watcher = threading.Thread(target=self._watch, args=(psutil.Process(self.proc.pid),), daemon=True)
        self.watcher.start()

    def _watch(self, root) -> None:
        import psutil

        while self.proc.poll() is None:
            try:
                self.seen.update((child.pid, child) for child in root.children(recursive=True))
            except psutil.Error:
                pass
            time.sleep(0.05)

    def _copy_terminal(self) -> None:
        with self.log.open("ab") as out:
            while True:
                try:
                    data = os.read(self.terminal, 4096)
                except OSError:  # the terminal hung up
                    return
                if not data:
                    return
                out.write(data)
                out.flush()

    def hang_up(self) -> None:
        """Close the terminal, as a dropped ssh session does: the kernel sends the command SIGHUP."""
        os.close(self.terminal)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, ready, what: str, timeout: float = 500) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if ready(text):
                return text
            assert self.proc.poll() is None, f"the command ended before {what}:\n{text[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n{text[-3000:]}"
            time.sleep(0.05)

    def stop(self, signum: int, group: bool = False) -> None:
        """The signal to the command (`kill PID`), or to its whole process group (a shell passing a terminal's
        hangup on to its job)."""
        (os.killpg if group else os.kill)(self.proc.pid, signum)

    def ended(self, timeout: float = 300) -> int:
        """The exit status, once nothing the command started runs 5 s after it ended (else the test fails)."""
        code = self.proc.wait(timeout=timeout)
        self.watcher.join()
        deadline = time.monotonic() + 5
        while True:
            left = [*(proc for proc in self.seen.values() if running(proc)), *group_of(self.proc.pid)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not left, (f"still running 5 s after the command ended: "
                          f"{[(proc.pid, proc.name()) for proc in left]}\n{self.text()[-2000:]}")
        return code


def take_as_controlling_terminal() -> None:
    """In the child, after its setsid: its standard input (the terminal) becomes its controlling terminal."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def running(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_of(pgid: int) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and os.getpgid(proc.pid) == pgid and running(proc):
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def last_line(text: str) -> str:
    assert "Traceback" not in text, text[-3000:]
    return text.strip().splitlines()[-1]


def step_lines(text: str, stage: str) -> list[str]:
    return [line for line in text.splitlines() if f" {stage} " in line and " step " in line]


# ------------------------------------------------------------------------------------------------ search
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_search_stopped_four_times_by_sigterm_and_sighup_resumes_to_the_uninterrupted_answer(tmp_path,
                                                                                              tiny_bert_dir):
    """One search, stopped four times, each `--resume` going on from where the stop left it:
    1. `timeout --signal=TERM` in the search stage (SIGTERM to the command and to timeout's process group, which
       Ray's processes are not in), the shape of Slurm's `--signal=B:TERM@120` ahead of a time limit;
    2. SIGHUP to the whole process group in the search stage (a shell passing a closed ssh session on to its job:
       Ray's processes get it too, and ignore it, so that the driver stops the trials in order);
    3. SIGTERM (`kill PID`, Kubernetes' eviction) in the judging stage;
    4. SIGHUP, then SIGTERM, in the judging stage: the second signal stops at once, as a kill of the whole job does.
    Then the search finishes: each search trial and each judging run once in MLflow and in the study, nothing lost
    or replaced, and the search stage's configurations and dev curves those of the same search uninterrupted."""
    import optuna
    from test_cluster_path import uninterrupted

    space = write_space(tmp_path, tiny_bert_dir, "stops", num_samples=2, test_eval="none", steps=80,
                        objective=small_dev_file(tmp_path), confirm="{top_k: 1, judge_seeds: 2}").read_text()
    # one trial at a time: the seeded searcher proposes the second trial once the first has ended, as uninterrupted
    space_file = tmp_path / "stops.yaml"
    space_file.write_text(space.replace("scheduler: {name: fifo}", "scheduler: {name: fifo}, max_concurrent: 1")
                          .replace("eval_steps: 2", "eval_steps: 4"))
    args = search_args(tmp_path, space_file, "--budget", "full")  # the file as it is, as uninterrupted() reads it

    # 1. timeout's time limit, brought forward to the search stage's first evaluation: SIGALRM is timeout's own
    # timer, on which it sends the command (and its own process group) the --signal
    first = Watched(args, tmp_path / "first.log", tmp_path, prefix=("timeout", "--signal=TERM", "3600"))
    text = first.wait_for(lambda t: step_lines(t, "search"), "a search evaluation")
    first.stop(signal.SIGALRM)
    assert first.ended() == 124, first.text()[-3000:]  # timeout's status: the command ran out of time
    text = first.text()
    assert last_line(text) == f"raycse: stopped by SIGTERM; {RESUME_SEARCH}"
    assert "finished: best objective" not in text and "Judging:" not in text

    # 2. SIGHUP to the process group, in the search stage again; 3. SIGTERM, then 4. SIGHUP and a SIGTERM at once,
    # in the judging stage
    for name, stage, signals in (("second", "search", [signal.SIGHUP]), ("third", "judge", [signal.SIGTERM]),
                                 ("fourth", "judge", [signal.SIGHUP, signal.SIGTERM])):
        resumed = Watched([*args, "--resume"], tmp_path / f"{name}.log", tmp_path)
        resumed.wait_for(lambda t, stage=stage: step_lines(t, stage), f"a {stage} evaluation")
        for signum in signals:
            resumed.stop(signum, group=signum == signal.SIGHUP)
            time.sleep(0.05)
        status = {signal.SIGHUP: 129, signal.SIGTERM: 143}[signals[-1]]
        assert resumed.ended() == status, (name, resumed.text()[-3000:])
        said = [line for line in resumed.text().splitlines() if line.startswith("raycse:")]
        if len(signals) == 1:  # a stop in order: one line
            assert said == [f"raycse: stopped by {signals[0].name}; {RESUME_SEARCH}"], said
        else:  # the second signal stopped it at once (the first's line may have come before)
            assert said[-1] == f"raycse: stopped at once by a second signal (SIGTERM); {RESUME_SEARCH}", said
        assert "Traceback" not in resumed.text()

    last = Watched([*args, "--resume"], tmp_path / "last.log", tmp_path)
    assert last.ended(timeout=600) == 0, last.text()[-3000:]
    assert "Resuming search" in last.text() and not step_lines(last.text(), "search")

    expected = uninterrupted(space_file, tmp_path / "uninterrupted")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent, children = runs_of(client, "stops")
    assert parent.info.status == "FINISHED"
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    searched = [r for r in children if r.data.tags["raycse.stage"] == "search"]
    judged = [r for r in children if r.data.tags["raycse.stage"] == "judge"]
    assert len(searched) == 2 == len({r.data.tags["raycse.trial_id"] for r in searched})
    pairs = [(r.data.tags["raycse.config_key"], r.data.tags["raycse.seed"]) for r in judged]
    assert judged and len(pairs) == len(set(pairs)) and {seed for _, seed in pairs} == {"43", "44"}
    deleted = client.search_runs([parent.info.experiment_id], run_view_type=ViewType.DELETED_ONLY)
    assert not deleted  # no trial was lost to a stop and replaced
    study = optuna.load_study(study_name="stops", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert {t.user_attrs["ray_trial_id"] for t in study.trials} == {r.data.tags["raycse.trial_id"] for r in searched}

    # the uninterrupted answer: the same configurations in the same order, and each trial's dev curve (an evaluation
    # trained again after a stop, from the checkpoint before it, logs the same value again)
    by_number = sorted(study.trials, key=lambda t: t.number)
    assert [t.params for t in by_number] == [params for params, _ in expected]
    for trial, (_, curve) in zip(by_number, expected):
        run = next(r for r in searched if r.data.tags["raycse.trial_id"] == trial.user_attrs["ray_trial_id"])
        logged: dict[int, set[float]] = {}
        for metric in client.get_metric_history(run.info.run_id, "objective"):
            logged.setdefault(metric.step, set()).add(round(metric.value, 9))
        assert sorted(logged) == [step for step, _ in curve]
        assert [len(values) for values in logged.values()] == [1] * len(logged), logged
        assert [logged[step].pop() for step, _ in curve] == pytest.approx([value for _, value in curve], abs=1e-9)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_search_whose_terminal_hangs_up_stops_in_order(tmp_path, tiny_bert_dir):
    """`raycse search` on a terminal of its own (as in an ssh session), the terminal closed while trials run: the
    search stops in order all the same (exit 129, nothing left running, Tune's snapshot there for --resume), though
    nothing it prints from then on can reach the terminal."""
    space = write_space(tmp_path, tiny_bert_dir, "hangup", num_samples=1, test_eval="none", steps=200,
                        objective=small_dev_file(tmp_path))
    search = Watched(search_args(tmp_path, space), tmp_path / "search.log", tmp_path, terminal=True)
    search.wait_for(lambda t: step_lines(t, "search"), "a search evaluation")
    search.hang_up()
    assert search.ended() == 129, search.text()[-3000:]
    assert list((tmp_path / "ray" / "hangup").glob("experiment_state-*.json"))
    assert "Traceback" not in search.text()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_raycse_status_reads_a_search_stopped_by_sigterm_as_stopped_and_its_resume_counts_both_sessions(
        tmp_path, tiny_bert_dir):
    """A search stopped by SIGTERM in its search stage: `raycse status` says it stopped, by what,
    with the command that continues it, and no trial running. Resumed to its end, its time spent is one figure: the
    printed answer's (both sessions, the first as `earlier sessions`), `raycse status`'s, the report page's and
    `raycse.load`'s."""
    import raycse
    from raycse.records import EARLIER_SESSIONS, TOTAL_TIME

    space = write_space(tmp_path, tiny_bert_dir, "stopped", num_samples=2, test_eval="none", steps=80,
                        objective=small_dev_file(tmp_path), confirm="{top_k: 1, judge_seeds: 2}")
    args = search_args(tmp_path, space, "--budget", "full")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = Watched(args, tmp_path / "first.log", tmp_path)
    first.wait_for(lambda t: step_lines(t, "search"), "a search evaluation")
    first.stop(signal.SIGTERM)
    assert first.ended() == 143, first.text()[-3000:]
    assert last_line(first.text()) == f"raycse: stopped by SIGTERM; {RESUME_SEARCH}"

    status = subprocess.run([sys.executable, "-m", "raycse", "status", "stopped", "--tracking-uri", uri],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert status.returncode == 0, status.stderr
    said = status.stdout
    assert re.search(r"^stage: (search|after search); stopped by SIGTERM at ", said, re.M), said
    assert f"to continue: raycse search --space {space} " in said and " --budget full --resume (in " in said, said
    assert "running:" not in said and "left:" not in said, said
    stopped = raycse.status("stopped", tracking_uri=uri)
    assert stopped.running == [] and stopped.ended.startswith("stopped by SIGTERM")

    last = Watched([*args, "--resume"], tmp_path / "last.log", tmp_path)
    assert last.ended(timeout=600) == 0, last.text()[-3000:]
    printed = next(line for line in last.text().splitlines() if line.startswith("Time: "))
    total = int(re.match(r"Time: (\d+) s in all to the answer \(earlier sessions (\d+) s, ", printed).group(1))
    loaded = raycse.load("stopped", tracking_uri=uri).timings
    assert loaded[EARLIER_SESSIONS] == pytest.approx(stopped.spent_s)  # the first session, as status read it
    assert round(loaded[TOTAL_TIME]) == total and loaded[TOTAL_TIME] > loaded[EARLIER_SESSIONS]
    assert raycse.status("stopped", tracking_uri=uri).spent_s == loaded[TOTAL_TIME]
    page = (tmp_path / "report" / "index.html").read_text()
    assert f"<td>total</td><td>{loaded[TOTAL_TIME]:.1f}</td>" in page


# ------------------------------------------------------------------------------------------------- train
RESUME_TRAIN = "the same command with --resume continues the training from its last checkpoint"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_training_stopped_by_sigterm_and_one_on_ray_train_by_sighup_resume_to_their_end(tmp_path, tiny_bert_dir):
    """`raycse train` in its own process, stopped by SIGTERM; and on two Ray Train workers, stopped by SIGHUP to the
    process group (Ray's processes and the workers get it too). Each: its exit status and line, nothing left
    running, its MLflow run KILLED; `--resume` finishes it, one MLflow run, FINISHED."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = [*with_values([arg for arg in TRAIN if arg != "--no-mlflow"], {
        "--max-steps": "200", "--eval-steps": "10", "--max-sentences": "1600"}), "--model", str(tiny_bert_dir),
        "--tracking-uri", uri]
    client = MlflowClient(tracking_uri=uri)
    for name, signum, group, extra in (("alone", signal.SIGTERM, False, []),
                                       ("ray-train", signal.SIGHUP, True, ["--workers", "2"])):
        out = tmp_path / name
        args = [*base, "--output-dir", str(out), *extra]
        stopped = Watched(args, tmp_path / f"{name}.log", tmp_path)
        # the first evaluation's checkpoint is written (Ray Train's workers print to their own logs)
        stopped.wait_for(lambda t, out=out: (out / "last").is_dir(), "a checkpoint")
        stopped.stop(signum, group=group)
        assert stopped.ended() == 128 + signum, (name, stopped.text()[-3000:])
        assert last_line(stopped.text()) == f"raycse: stopped by {signal.Signals(signum).name}; {RESUME_TRAIN}"
        assert not (out / "results.json").exists()
        (run,) = client.search_runs([client.get_experiment_by_name("raycse-train").experiment_id],
                                    f"tags.`raycse.output_dir` = '{out}'")
        assert run.info.status == "KILLED", name

        resumed = Watched([*args, "--resume"], tmp_path / f"{name}-resumed.log", tmp_path)
        assert resumed.ended() == 0, (name, resumed.text()[-3000:])
        results = json.loads((out / "results.json").read_text())
        assert [point["step"] for point in results["dev_curve"]] == list(range(10, results["steps"] + 1, 10))
        (run,) = client.search_runs([client.get_experiment_by_name("raycse-train").experiment_id],
                                    f"tags.`raycse.output_dir` = '{out}'")
        assert run.info.status == "FINISHED", name


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_multi_worker_training_in_a_relative_folder_stopped_by_ctrl_c_and_sigterm_resumes_to_its_end(tmp_path,
                                                                                                   tiny_bert_dir):
    """`raycse train --workers 2` with a relative --output-dir (Ray Train's workers run in a working directory of their
    own): stopped by Ctrl-C's SIGINT to the command (Ray Train would take it for its own abort), then, resumed, by
    SIGTERM; each stop as a search's: its exit status and one line, nothing left running, the MLflow run KILLED and
    the checkpoint where the command's folder says; `--resume` finishes it, one MLflow run, FINISHED."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # 200 steps of 2 x 8 sentences: each stop comes 10 steps into a run, long before its end (the steps are fast)
    args = [*with_values([arg for arg in TRAIN if arg != "--no-mlflow"], {
        "--max-steps": "200", "--eval-steps": "10", "--max-sentences": "3200"}), "--model", str(tiny_bert_dir),
        "--tracking-uri", uri, "--workers", "2", "--output-dir", "rel/out"]
    out = tmp_path / "rel" / "out"
    client = MlflowClient(tracking_uri=uri)

    def the_run():
        (run,) = client.search_runs([client.get_experiment_by_name("raycse-train").experiment_id],
                                    f"tags.`raycse.output_dir` = '{out.resolve()}'")
        return run

    for name, signum, resume in (("ctrl-c", signal.SIGINT, []), ("sigterm", signal.SIGTERM, ["--resume"])):
        before = last_checkpoint(out)
        stopped = Watched([*args, *resume], tmp_path / f"{name}.log", tmp_path)
        stopped.wait_for(lambda t, before=before: last_checkpoint(out) not in (None, before), "a new checkpoint")
        stopped.stop(signum)
        assert stopped.ended() == 128 + signum, (name, stopped.text()[-3000:])
        said = "raycse: interrupted" if signum == signal.SIGINT else f"raycse: stopped by SIGTERM; {RESUME_TRAIN}"
        assert last_line(stopped.text()) == said
        assert [line for line in stopped.text().splitlines() if line.startswith("raycse:")] == [said]
        assert not (out / "results.json").exists() and the_run().info.status == "KILLED", name

    resumed = Watched([*args, "--resume"], tmp_path / "resumed.log", tmp_path)
    assert resumed.ended() == 0, resumed.text()[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert [point["step"] for point in results["dev_curve"]] == list(range(10, results["steps"] + 1, 10))
    assert the_run().info.status == "FINISHED"


def last_checkpoint(out: Path) -> tuple[int, int] | None:
    """Which last/ checkpoint the training's folder holds (each is written beside and moved into place whole), or
    None before its first."""
    try:
        found = os.stat(out / "last" / "training_state.pt")
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns


# ----------------------------------------------------------------------------------------------- compare
RESUME_COMPARE = "the same command with --resume continues the comparison"


@pytest.mark.slow
@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(1800)
def test_a_comparison_stopped_by_sigterm_then_killed_resumes_to_the_undisturbed_answer(tmp_path, tiny_bert_dir):
    """`raycse compare` of two losses, stopped twice, each `--resume` going on from where the stop left it:
    1. SIGTERM in the first loss's search stage: exit 143, one line saying that --resume continues it, nothing left
       running, the comparison's MLflow run KILLED, no compare_summary.json;
    2. SIGKILL of the driver and its Ray in the second loss's judging stage (once Tune's snapshot names the running
       trial's newest checkpoint), the first loss's search finished.
    Then `--resume` finishes it: the first loss's search read back and nothing of it trained again, the second's
    judging continued; every trial once in MLflow and in the study; and its answer, compare_summary.json's arms and
    pairs figure for figure, that of the same comparison run without a stop. Then a new comparison of that name is
    refused, and so is a resume with the spaces in another order (exit 2, one line)."""
    import optuna
    from test_compare import write_loss_space
    from test_search import runs_of, snapshot_names_newest_checkpoints

    objective = small_dev_file(tmp_path)
    spaces = [write_loss_space(tmp_path / "spaces", tiny_bert_dir, loss, objective=objective, num_samples=2,
                               confirm="{top_k: 1, judge_seeds: 2}") for loss in ("simcse", "focal")]
    for space in spaces:  # trials long enough to be stopped in the middle
        space.write_text(space.read_text().replace("max_steps: 4", "max_steps: 40"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def compare(name: str, *extra: str, order=spaces) -> list[str]:
        return ["compare", *(arg for space in order for arg in ("--space", str(space))), "--budget", "full",
                "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray"), "--experiment", name,
                "--output-dir", str(tmp_path / name), *extra]

    first = Watched(compare("cmp"), tmp_path / "first.log", tmp_path)
    first.wait_for(lambda t: step_lines(t, "search"), "a search evaluation")
    first.stop(signal.SIGTERM)
    assert first.ended() == 143, first.text()[-3000:]
    assert last_line(first.text()) == f"raycse: stopped by SIGTERM; {RESUME_COMPARE}"
    client = MlflowClient(tracking_uri=uri)
    (comparison,) = client.search_runs([client.get_experiment_by_name("cmp").experiment_id],
                                       "tags.`raycse.compare` = 'cmp'")
    assert comparison.info.status == "KILLED" and "loss 2 of 2" not in first.text()
    assert not (tmp_path / "cmp" / "compare_summary.json").exists()

    def judging_the_second(text: str) -> bool:
        second = text.partition("loss 2 of 2")[2]
        return bool(step_lines(second, "judge")) and any(
            snapshot_names_newest_checkpoints(path) for path in (tmp_path / "ray").glob("cmp-focal-judge*"))

    killed = Watched(compare("cmp", "--resume"), tmp_path / "second.log", tmp_path)
    killed.wait_for(judging_the_second, "a judging evaluation of the second loss with its checkpoint")
    killed.stop(signal.SIGKILL, group=True)  # the driver and the Ray runtime it started, as a lost machine
    assert killed.ended() == -signal.SIGKILL
    assert "Resuming comparison 'cmp'" in killed.text() and "simcse started; focal not started" in killed.text()

    last = Watched(compare("cmp", "--resume"), tmp_path / "last.log", tmp_path)
    assert last.ended(timeout=900) == 0, last.text()[-3000:]
    text = last.text()
    assert "simcse finished; focal started" in text and "simcse: its search finished before" in text
    loss_one = text.partition("loss 2 of 2")[0]
    assert not step_lines(text, "search")  # the second loss's search stage had finished
    assert not [line for line in loss_one.splitlines() if line.startswith("trial ") and " step " in line]

    plain = Watched(compare("plain"), tmp_path / "plain.log", tmp_path)
    assert plain.ended(timeout=900) == 0, plain.text()[-3000:]
    resumed, undisturbed = (json.loads((tmp_path / name / "compare_summary.json").read_text())
                            for name in ("cmp", "plain"))
    assert the_answer(resumed) == the_answer(undisturbed)
    for got, expected in zip(resumed["arms"] + resumed["pairs"], undisturbed["arms"] + undisturbed["pairs"]):
        for key in ("seeds", "mean", "low", "high", "p", "p_holm"):
            if key in expected:
                assert got[key] == pytest.approx(expected[key], abs=1e-9), key

    # trained once: every trial of each loss's search once in MLflow (none lost and replaced) and in its study
    for loss in ("simcse", "focal"):
        parent, children = runs_of(client, f"cmp-{loss}")
        assert parent.info.status == "FINISHED"
        assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
        searched = [r.data.tags["raycse.trial_id"] for r in children if r.data.tags["raycse.stage"] == "search"]
        judged = [(r.data.tags["raycse.config_key"], r.data.tags["raycse.seed"]) for r in children
                  if r.data.tags["raycse.stage"] == "judge"]
        assert len(searched) == 2 == len(set(searched)) and judged and len(judged) == len(set(judged))
        assert not client.search_runs([parent.info.experiment_id], run_view_type=ViewType.DELETED_ONLY)
        study = optuna.load_study(study_name=f"cmp-{loss}", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
        assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials) == sorted(searched)
    (comparison,) = client.search_runs([client.get_experiment_by_name("cmp").experiment_id],
                                       "tags.`raycse.compare` = 'cmp'")
    children = client.search_runs([comparison.info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{comparison.info.run_id}'")
    assert comparison.info.status == "FINISHED" and len(children) == 2
    assert all(child.info.status == "FINISHED" for child in children)

    for args, words in ((compare("cmp"), "--resume continues it"),
                        (compare("cmp", "--resume", order=spaces[::-1]), "compares simcse,focal")):
        refused = subprocess.run([sys.executable, "-m", "raycse", *args], capture_output=True, text=True,
                                 cwd=tmp_path, timeout=300)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith("raycse: error:") and words in refused.stderr, refused.stderr


def the_answer(summary: dict) -> dict:
    """What a comparison answers, without its names (the experiments, the runs): the design, each loss's winner and
    published point, each arm's configuration and runs, each pair's verdict."""
    return {"seeds": summary["seeds"], "budget": summary["budget_per_loss"],
            "losses": {loss: (facts["winner"], facts["published"]) for loss, facts in summary["losses"].items()},
            "arms": [(arm["name"], arm["params"], sorted(arm["seeds"]), arm["failed"], arm["ran"])
                     for arm in summary["arms"]],
            "pairs": [(pair["a"], pair["b"], pair["n"], pair["verdict"]) for pair in summary["pairs"]]}


# ------------------------------------------------------------------------------------------------- Slurm
STAND_IN = """#!/bin/bash
# raycse's stand-in: records its arguments; a new search runs until SIGTERM (exit 143, as raycse's), a resumed one
# finishes at once
echo "$*" >> "$CALLS"
[[ " $* " == *" --resume "* ]] && exit 0
trap 'echo TERM >> "$CALLS"; exit 143' TERM
touch "$CALLS.running"
while true; do sleep 0.05; done
"""


def test_the_documented_slurm_script_passes_the_signal_on_requeues_and_resumes(tmp_path):
    """docs/scaling.md's sbatch script, run by bash as Slurm runs it, with stand-ins for `raycse` and `scontrol`:
    Slurm's SIGTERM to the script (`--signal=B:TERM@120`) reaches the search, the job is requeued on its exit 143,
    and the requeued run continues the search with `--resume`."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "scaling.md").read_text()
    (script,) = [block for block in re.findall(r"```bash\n(.*?)```", docs, flags=re.S) if "#SBATCH" in block]
    assert re.search(r"^#SBATCH --signal=B:TERM@\d+", script, flags=re.M) and "#SBATCH --requeue" in script
    (tmp_path / "job.sh").write_text(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("raycse", STAND_IN), ("scontrol", '#!/bin/bash\necho "scontrol $*" >> "$CALLS"\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "CALLS": str(calls),
           "SLURM_JOB_ID": "4242"}
    job = subprocess.Popen(["bash", str(tmp_path / "job.sh")], env=env, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not Path(f"{calls}.running").exists():
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    job.send_signal(signal.SIGTERM)  # Slurm's, to the batch script alone
    assert job.wait(timeout=30) == 143
    state = tmp_path / "raycse-state" / "focal"
    assert calls.read_text().splitlines() == [f"search --space focal --state {state}", "TERM", "scontrol requeue 4242"]

    (state / "ray_results" / "raycse-focal").mkdir(parents=True)  # what the search had written when it stopped
    (state / "ray_results" / "raycse-focal" / "tuner.pkl").write_bytes(b"")
    calls.unlink()
    assert subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, cwd=tmp_path, timeout=30).returncode == 0
    assert calls.read_text().splitlines() == [f"search --space focal --state {state} --resume"]


def test_in_a_python_process_a_run_stops_in_order_on_the_first_signal_and_at_once_on_the_second():
    """The Python API's process (no command line): during a run that stops itself in order (a Tune experiment), the
    first SIGTERM asks it to stop, a second raises at once; afterwards the process's own handlers are back."""
    from raycse.training import stop_signals

    before = signal.getsignal(signal.SIGTERM)
    asked = []
    with pytest.raises(stop_signals.Stopped) as second:
        with stop_signals.graceful(lambda: asked.append(True)) as run:
            os.kill(os.getpid(), signal.SIGTERM)
            assert asked == [True]  # the run was asked to stop; nothing raised yet
            os.kill(os.getpid(), signal.SIGTERM)
    assert second.value.signum == signal.SIGTERM and isinstance(second.value, KeyboardInterrupt)
    assert run.signum == signal.SIGTERM and signal.getsignal(signal.SIGTERM) is before
    assert stop_signals.received() is None  # the next run starts afresh
    assert (stop_signals.exit_status(signal.SIGTERM), stop_signals.exit_status(signal.SIGHUP)) == (143, 129)


def test_a_command_that_starts_no_process_exits_cleanly():
    """The exit waits for the processes a command started; one that started none (and loaded no Ray, whose psutil
    the wait uses) exits at once, with nothing on stderr."""
    done = subprocess.run([sys.executable, "-m", "raycse", "spaces"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "" and "focal" in done.stdout


WEDGED = """
import subprocess, sys, time
import ray  # as in a search (whose vendored psutil finds the processes to stop)
from raycse.training import stop_signals

stop_signals.STOP_WITHIN_S = 1.0  # the command line's 25 s, shortened
stop_signals.install(["search"])
child = subprocess.Popen(["sleep", "600"])  # a process the command started
with stop_signals.graceful(lambda: None):  # a stop asked for, and never over (Ray killed under the driver)
    print(child.pid, flush=True)  # from here on the signal finds the stop in order running (the test's cue)
    time.sleep(600)
"""


def test_a_stop_in_order_that_never_ends_stops_at_once_with_everything_it_started(tmp_path):
    """A stop in order that hangs (a job-wide SIGTERM killed Ray's processes under the driver) ends anyway: its
    processes killed, one line, exit 143, within STOP_WITHIN_S of the signal (shortened here to 1 s)."""
    import psutil

    command = subprocess.Popen([sys.executable, "-c", WEDGED], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    child = psutil.Process(int(command.stdout.readline()))
    started = time.monotonic()
    command.send_signal(signal.SIGTERM)
    _, err = command.communicate(timeout=30)  # its child holds the pipes too: it has ended as well
    assert command.returncode == 143 and time.monotonic() - started < 10
    assert err.strip() == f"raycse: stopped at once 1 s after SIGTERM, its stop in order not over; {RESUME_SEARCH}"
    assert not running(child)
