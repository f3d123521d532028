"""The path a cluster user takes (docs/scaling.md), on Ray's fake multi-node provider (cluster/fake-gpu.yaml).

A head whose autoscaler starts fake GPU workers, an MLflow tracking server on PostgreSQL and the Optuna study in the
same PostgreSQL; the search submitted with `ray job submit`; a GPU worker node killed in the middle of a trial; then
the whole cluster, head included, killed in the middle of the search stage, started again, and the same command
submitted with `--resume`.

What an uninterrupted search would answer is worked out beside it, in this process and without Ray: the
configurations the search stage's seeded searcher proposes, and each one trained in one go by the trial's own code.
Running that search on a second fake cluster would prove no more (the trainer is the same; Ray only places it) and
would cost about two more minutes; the test's budget is four. The interrupted search must give the same
configurations in the same order and, for every trial, the same dev curve at every evaluation (to 1e-9): a trial
that goes on from a checkpoint gets back its model, optimiser, LR schedule, RNG states (so the same dropout masks)
and data position. Each kill waits until Tune's snapshot holds the trial's latest checkpoint, so the trial goes on
from exactly the evaluation after it; a kill in the moment before that (docs/reliability.md) would make the trial
train a few steps twice and log those evaluations twice, and is left out on purpose.

PostgreSQL and Ray's job server (`ray[default]`, in the test extra) are needed; without them the test is skipped,
unless CI is set.
"""
from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from services import FakeCluster, fake_gpu_cluster, processes_of, stop_processes
from skips import require_module
from test_search import finished_lines, runs_of, small_dev_file

from raycse.records import FINISHED, RAY_TRIAL_ID, SEARCH, STAGE_TAG, STATUS_TAG, TRIAL_TAG

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "cluster-path"
# One trial at a time: it hands Tune a checkpoint at every evaluation (checkpoint_share: 1, and pacing: slots - 1 =
# 0 s; by default a trial this short would write last/ only at its first and last evaluations), it is the only one
# running when a kill comes, and the searcher proposes the second trial only once the first has ended. 128 steps: a
# trial still runs when the second kill comes, which follows the node's by a new worker's start-up.
STEPS, EVAL_STEPS, TRIALS = 128, 8, 2
SPACE = """\
experiment: {experiment}
model: {model}
objective: {objective}
loss: simcse
train: {{batch_size: 8, max_steps: {steps}, eval_steps: {eval_steps}, max_sentences: {sentences}, checkpoint_share: 1}}
space: {{tau: {{type: loguniform, low: 0.02, high: 0.2}}}}
published: {{tau: 0.05}}
search: {{num_samples: {trials}, seed: 0, test_eval: none, scheduler: {{name: fifo}}, max_concurrent: 1}}
resources: {{workers: 1, cpus_per_worker: 2, gpus_per_worker: 1}}
"""
# A lost node is noticed in seconds, not Ray's default half-minute: the GCS checks each raylet every second and
# gives it up after three missed checks.
FAST_FAILURE_DETECTION = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
STEP_LINE = re.compile(r"^trial (\w+) .* step +(\d+) ")


def steps_of(text: str) -> list[tuple[str, int]]:
    """(trial id, step) of each evaluation the driver printed, in order."""
    return [(m[1], int(m[2])) for m in map(STEP_LINE.match, text.splitlines()) if m]


def submit(cluster: FakeCluster, workdir: Path, args: list[str], log: Path, submission_id: str) -> subprocess.Popen:
    """`ray job submit` as docs/scaling.md gives it, the search's output streamed; but the working directory is named as
    a directory every node already has (`local://`) rather than uploaded. The fake nodes share one session directory on
    one disk, and Ray sets up an uploaded working directory once per node, into the same folder there; here that folder
    went from under the processes already running in it (seen: a driver that could not find its space file, a trial
    whose torch could not load, which cost it its one retry). Nodes of a real cluster have disks of their own."""
    submitter = subprocess.Popen(["ray", "job", "submit", "--address", cluster.dashboard, "--working-dir",
                                  f"local://{workdir}", "--submission-id", submission_id, "--", "raycse", *args],
                                 stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    submitter.log_path = log  # what `ray job submit` said, for a failure's message
    return submitter


def checkpointed(state: Path, trial_id: str) -> int:
    """The step of the trial's checkpoint in Tune's latest snapshot of the search (0: none yet). Tune takes an
    evaluation's checkpoint a moment after the evaluation (it asks the trial's worker for it) and then snapshots the
    search; a kill before that sends the trial back to its previous checkpoint (docs/reliability.md): the known edge,
    which the kills below wait out, so that the trial's resumption is exact."""
    for path in (state / "ray_results" / EXPERIMENT).glob("experiment_state-*.json"):
        try:
            trials = json.loads(path.read_text())["trial_data"]
        except (OSError, ValueError, KeyError):
            return 0  # being replaced
        for trial_json, run_json in trials:
            if f'"trial_id": "{trial_id}"' in trial_json:
                found = [int(n) for n in re.findall(r"checkpoint_(\d{6})", run_json)]
                return (max(found) + 1) * EVAL_STEPS if found else 0  # one checkpoint an evaluation: slots - 1 = 0 s
    return 0


def kill_once_checkpointed(procs: list, log: Path, state: Path, trial_id: str, submitter) -> int:
    """SIGKILL `procs` as soon as Tune's snapshot holds the trial's latest reported evaluation; return its step."""
    def caught_up(text: str) -> bool:
        reported = max(step for tid, step in steps_of(text) if tid == trial_id)
        return checkpointed(state, trial_id) >= reported

    wait_for(log, caught_up, f"trial {trial_id}'s checkpoint in Tune's snapshot", submitter, timeout=60)
    stop_processes(procs, hard=True)
    return checkpointed(state, trial_id)


def driver_log(cluster: FakeCluster, submission_id: str) -> Path:
    """The job's driver output as Ray writes it on the head, the moment it is written (`ray job submit` streams it in
    chunks, seconds late: too late to catch a 50 ms step)."""
    return Path(cluster.temp_dir) / "session_latest" / "logs" / f"job-driver-{submission_id}.log"


def wait_for(log: Path, ready, what: str, submitter: subprocess.Popen, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text() if log.exists() else ""
        if ready(text):
            return text
        assert submitter.poll() is None, (f"the job ended before {what}:\n{text[-4000:]}\n`ray job submit` said:\n"
                                          f"{submitter.log_path.read_text()[-3000:]}")
        assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n{text[-4000:]}"
        time.sleep(0.05)


def trial_process(cluster: FakeCluster):
    """The process of the running trial (Tune's function trainable, titled `ray::ImplicitFunc...`) and its node's
    raylet, among the cluster's processes."""
    import psutil

    for proc in processes_of(cluster.temp_dir):
        try:
            if "raylet" in proc.name() and proc.cmdline() and "ImplicitFunc" not in proc.cmdline()[0]:
                for child in proc.children():
                    if child.cmdline() and child.cmdline()[0].startswith("ray::ImplicitFunc"):
                        return child, proc
        except psutil.Error:
            continue
    return None, None


def uninterrupted(space_file: Path, folder: Path) -> list[tuple[dict, list[tuple[int, float]]]]:
    """What the same search gives when nothing interrupts it, without Ray: the configurations its seeded sampler
    proposes, in order (the search stage's own searcher, raycse.driver.tune.searcher, on an in-memory study), and each
    one's dev curve, trained in one go by the trial's own code (raycse.driver.tune.trial's TrainConfig, the trainer)."""
    import optuna

    from raycse.driver.tune.searcher import TaggedOptunaSearch
    from raycse.driver.tune.trial import trial_config
    from raycse.evaluation.sts import DevObjective
    from raycse.records import FINAL, OBJECTIVE
    from raycse.sampling import samplers
    from raycse.settings.space import TrialSpec, load_space
    from raycse.training.trainer import train

    plan = load_space(space_file)
    searcher = TaggedOptunaSearch(space=plan.define_by_run, metric=OBJECTIVE, mode=DevObjective.mode,
                                  points_to_evaluate=plan.points_to_evaluate() or None, sampler=samplers.sampler(plan),
                                  study_name=plan.experiment, storage=optuna.storages.InMemoryStorage())
    trials = []
    for number in range(plan.num_samples):
        spec = TrialSpec.of(searcher.suggest(f"trial-{number}"), plan.base.seed)
        results = train(trial_config(plan, spec, str(folder / f"trial-{number}")))
        searcher.on_trial_complete(f"trial-{number}", {OBJECTIVE: results["best_objective"], FINAL: True})
        trials.append((spec.sampled, [(point["step"], point["objective"]) for point in results["dev_curve"]]))
    return trials


@pytest.mark.timeout(900)
def test_a_search_submitted_as_a_job_survives_a_lost_node_and_a_lost_head(tmp_path, tiny_bert_dir, postgres,
                                                                          mlflow_server):
    import optuna

    require_module("ray.dashboard.optional_deps", "pip install 'ray[default]' (the test extra): `ray job submit` "
                   "needs Ray's dashboard and its job server")
    config = yaml.safe_load((ROOT / "cluster" / "fake-gpu.yaml").read_text())
    workers = config["available_node_types"]["ray.worker.gpu"]
    # Both GPU workers start with the cluster, so that the trial of a lost node has another to move to at once (the
    # autoscaler replaces a lost node only once it has been silent for AUTOSCALER_HEARTBEAT_TIMEOUT_S, 30 s).
    workers["min_workers"] = workers["max_workers"]
    workdir = tmp_path / "checkout"  # what `--working-dir .` uploads: the space file and its development set
    workdir.mkdir()
    (workdir / "cluster-path.yaml").write_text(SPACE.format(
        experiment=EXPERIMENT, model=tiny_bert_dir, objective=small_dev_file(tmp_path), steps=STEPS,
        eval_steps=EVAL_STEPS, sentences=8 * STEPS, trials=TRIALS))
    state = tmp_path / "state"
    args = ["search", "--space", "cluster-path.yaml", "--state", str(state),
            "--tracking-uri", mlflow_server.uri, "--optuna-storage", postgres.url("optuna"), "--no-confirm"]
    started = time.monotonic()
    # the uninterrupted search's answer, worked out meanwhile in this process (it needs no cluster)
    expected = concurrent.futures.ThreadPoolExecutor(1).submit(uninterrupted, workdir / "cluster-path.yaml",
                                                                 tmp_path / "uninterrupted")

    # 1. the search, submitted; a GPU worker node killed mid-trial, once the trial has handed Tune a checkpoint
    with fake_gpu_cluster(config, FAST_FAILURE_DETECTION, tmp_path / "logs-first") as cluster:
        submitter = submit(cluster, workdir, args, tmp_path / "first-submit.log", "first")
        log = driver_log(cluster, "first")
        text = wait_for(log, lambda t: any(step >= 2 * EVAL_STEPS for _, step in steps_of(t)),
                        "a trial's second evaluation", submitter)
        victim = next(tid for tid, step in steps_of(text) if step >= 2 * EVAL_STEPS)
        trial, raylet = trial_process(cluster)
        assert trial is not None, "no running trial among the cluster's processes"
        killed_node = raylet.pid
        node_checkpoint = kill_once_checkpointed([raylet, *raylet.children(recursive=True)], log, state, victim,
                                                 submitter)
        text = log.read_text()
        killed_at = len(text)

        # the same trial goes on, on another node, from its last checkpoint
        text = wait_for(log, lambda t: any(tid == victim for tid, _ in steps_of(t[killed_at:])),
                        f"trial {victim} going on after its node was killed", submitter)
        after_kill = [step for tid, step in steps_of(text[killed_at:]) if tid == victim]
        trial, raylet = trial_process(cluster)
        moved_to = raylet.pid if raylet else None

        # 2. the whole cluster, head and job included, killed in the middle of the search stage
        head_checkpoint = kill_once_checkpointed(processes_of(cluster.temp_dir), log, state, victim, submitter)
        assert not finished_lines(log.read_text()), "the trial ended before the cluster could be killed"
        submitter.wait(timeout=60)
    killed_head_at = time.monotonic() - started

    # 3. a new cluster, the same command with --resume
    with fake_gpu_cluster(config, FAST_FAILURE_DETECTION, tmp_path / "logs-second") as cluster:
        submitter = submit(cluster, workdir, [*args, "--resume"], tmp_path / "second-submit.log", "second")
        code = submitter.wait(timeout=600)
        resumed = driver_log(cluster, "second").read_text()
        assert code == 0, resumed[-4000:]
    searched = time.monotonic() - started
    answer = expected.result(timeout=300)
    print(resumed[-2500:])
    after_head_kill = [step for tid, step in steps_of(resumed) if tid == victim]
    print(f"node kill: trial {victim} checkpointed at step {node_checkpoint}, on from step {after_kill[0]} (raylet "
          f"{killed_node} -> {moved_to}); head kill at {killed_head_at:.0f} s: checkpointed at step {head_checkpoint}, "
          f"on from step {after_head_kill[0]}; search done at {searched:.0f} s, uninterrupted answer at "
          f"{time.monotonic() - started:.0f} s")

    # the lost node: the trial went on on another node from its last checkpoint (not from step 0); the lost head: the
    # same, after --resume
    assert moved_to is not None and moved_to != killed_node
    assert 2 * EVAL_STEPS <= node_checkpoint < head_checkpoint < STEPS
    assert after_kill[0] == node_checkpoint + EVAL_STEPS, (node_checkpoint, after_kill)
    assert "Resuming search" in resumed
    assert after_head_kill[0] == head_checkpoint + EVAL_STEPS, (head_checkpoint, after_head_kill)

    # every trial once in MLflow (one run each, each evaluation once) and once in the study, all finished
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    parent, children = runs_of(client, EXPERIMENT)
    assert parent.info.status == "FINISHED"
    trial_ids = [r.data.tags[TRIAL_TAG] for r in children]
    assert len(trial_ids) == TRIALS == len(set(trial_ids)), trial_ids
    assert all(r.info.status == "FINISHED" and r.data.tags[STATUS_TAG] == FINISHED and
               r.data.tags[STAGE_TAG] == SEARCH for r in children)
    curves = {r.data.tags[TRIAL_TAG]: [(m.step, m.value) for m in sorted(
        client.get_metric_history(r.info.run_id, "objective"), key=lambda m: m.step)] for r in children}
    study = optuna.load_study(study_name=EXPERIMENT, storage=postgres.url("optuna"))
    assert len(study.trials) == TRIALS and all(t.state.name == "COMPLETE" for t in study.trials)
    assert sorted(t.user_attrs[RAY_TRIAL_ID] for t in study.trials) == sorted(trial_ids)

    # the answer equals the uninterrupted search's: the same configurations in the same order, and each trial's
    # whole dev curve (so its best objective, and the winner) the same, for the trials the kills interrupted too
    by_number = sorted(study.trials, key=lambda t: t.number)
    assert [t.params for t in by_number] == [params for params, _ in answer]
    for trial, (_, curve) in zip(by_number, answer):
        steps, values = zip(*curves[trial.user_attrs[RAY_TRIAL_ID]])
        assert list(steps) == [step for step, _ in curve] == list(range(EVAL_STEPS, STEPS + 1, EVAL_STEPS))
        # flat lists of floats: pytest.approx takes no nested (step, value) pairs from pytest 9.2 on
        assert list(values) == pytest.approx([value for _, value in curve], abs=1e-9), trial.number
    winner = max(answer, key=lambda trial: max(value for _, value in trial[1]))[0]
    assert study.best_trial.params == winner
    print(f"{TRIALS} trials, 1 node and 1 head killed; MLflow: {len(children)} trial runs; study: "
          f"{len(study.trials)} trials; winner {study.best_trial.params} at {study.best_value:.4f}, uninterrupted: "
          f"{winner}; curves equal")
