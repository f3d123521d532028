"""The cluster deployment files in cluster/.

* cluster/gpu.yaml (AWS) and cluster/gcp-gpu.yaml (GCP) go through the same config preparation and
  JSON-schema validation that `ray up` runs, offline (no cloud account involved).
* cluster/kuberay.yaml is parsed and checked for the fields KubeRay needs.
* cluster/fake-gpu.yaml starts Ray's fake multi-node autoscaler on this machine; a 2-trial search
  then runs and its GPU trials must land on the fake GPU worker nodes that the autoscaler launched.
"""
from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import ray
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

# Private module (`_private`): Ray may rename or change these in any release. They are the functions
# `ray up` itself uses to fill in and validate a cluster config, which is why the test uses them,
# and one of the reasons pyproject.toml pins ray to 2.60.x: moving to another Ray minor version means
# re-checking this import along with the cluster files.
from ray.autoscaler._private.util import prepare_config, validate_config
from services import fake_gpu_cluster, trial_actors

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
LAUNCHER_CONFIGS = {"gpu.yaml": "aws", "gcp-gpu.yaml": "gcp"}
IMAGE_RE = re.compile(r"^rayproject/ray:(?P<ray>\d+\.\d+\.\d+)-py(?P<py>\d)(?P<py_minor>\d+)-gpu$")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _raycse_version() -> str:
    return _pyproject()["project"]["version"]


def _ray_requirement() -> Requirement:
    for dep in _pyproject()["project"]["dependencies"]:
        req = Requirement(dep)
        if req.name == "ray":
            return req
    raise AssertionError("pyproject.toml does not depend on ray")


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def _prepared(name: str) -> dict:
    """What `ray up` works with: the file merged with the provider's defaults, then validated."""
    config = prepare_config(copy.deepcopy(_load(name)))
    validate_config(config)
    return config


def _all_commands(config: dict) -> list[str]:
    keys = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
            "head_start_ray_commands", "worker_start_ray_commands")
    return [cmd for key in keys for cmd in config[key]]


def _mlflow_server_command(config: dict) -> str:
    found = [cmd for cmd in config["head_start_ray_commands"] if "mlflow server" in cmd]
    assert len(found) == 1, "the head must start exactly one MLflow server"
    return found[0]


# --------------------------------------------------------------------------------- cluster launcher
@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_config_passes_rays_own_validation(name):
    config = _prepared(name)  # raises jsonschema.ValidationError / ValueError on a bad file
    assert config["provider"]["type"] == LAUNCHER_CONFIGS[name]
    # The file spells out every command list, so none of the provider's example defaults (which
    # install a nightly Ray wheel and start Ray with a public dashboard) leak in.
    assert not any("ray-wheels" in cmd or "3.0.0.dev0" in cmd for cmd in _all_commands(config))


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_node_types_cpu_head_and_gpu_workers_from_zero(name):
    config = _prepared(name)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    assert head["resources"].get("CPU") == 0, "no trial may be scheduled on the head"
    assert "--num-cpus=0" in " ".join(config["head_start_ray_commands"])

    workers = {k: v for k, v in types.items() if k != config["head_node_type"]}
    assert all(w["min_workers"] == 0 for w in workers.values()), "GPU workers must scale from zero"
    gpus = sorted(w["resources"]["GPU"] for w in workers.values())
    assert gpus == [1, 8], "one single-GPU and one 8-GPU worker type"
    assert config["max_workers"] >= max(w["max_workers"] for w in workers.values())


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_image_and_raycse_pin_match_the_driver(name):
    config = _prepared(name)
    match = IMAGE_RE.match(config["docker"]["image"])
    assert match, f"unexpected image {config['docker']['image']!r}; expected rayproject/ray:<ver>-py3XX-gpu"
    # The image's Ray must satisfy raycse's own ray pin, or `pip install raycse` on the nodes would
    # replace the image's Ray with another version.
    assert Version(match["ray"]) in _ray_requirement().specifier
    assert SpecifierSet(_pyproject()["project"]["requires-python"]).contains(f"{match['py']}.{match['py_minor']}")

    pins = re.findall(r"RAYCSE_VERSION=(\S+?);", " ".join(config["setup_commands"]))
    assert pins == [_raycse_version()], "setup_commands must install raycse at the driver's version"
    assert any('"raycse==${RAYCSE_VERSION}"' in cmd for cmd in config["setup_commands"])


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_mlflow_on_private_address_and_tracking_uri_on_every_node(name):
    config = _prepared(name)
    server = _mlflow_server_command(config)
    assert '--host "$RAYCSE_HEAD_IP"' in server and "--port 5000" in server
    assert "--artifacts-destination" in server and "--allowed-hosts" in server
    # Nothing listens on all interfaces: MLflow on the private address, the dashboard on loopback.
    assert not any("0.0.0.0" in cmd for cmd in _all_commands(config))
    assert "--dashboard-host=127.0.0.1" in " ".join(config["head_start_ray_commands"])
    # Both kinds of node write MLFLOW_TRACKING_URI (pointing at the head) to ~/.raycse_env, and
    # every shell Ray opens reads it.
    for key in ("head_setup_commands", "worker_setup_commands"):
        assert any("export MLFLOW_TRACKING_URI=http://${RAYCSE_HEAD_IP}:5000" in cmd for cmd in config[key])
    assert any("RAYCSE_HEAD_IP=${RAY_HEAD_IP}" in cmd for cmd in config["worker_setup_commands"])
    assert any(". ~/.raycse_env" in cmd and ".bashrc" in cmd for cmd in config["setup_commands"])


@pytest.mark.parametrize("name", sorted(LAUNCHER_CONFIGS))
def test_launcher_commands_are_valid_bash(name):
    """Every command is syntactically valid bash (a YAML folding or quoting slip shows up here)."""
    for cmd in _all_commands(_prepared(name)):
        result = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
        assert result.returncode == 0, f"{cmd!r}: {result.stderr}"


def test_gcp_gpu_workers_attach_accelerators_and_terminate_on_maintenance():
    config = _prepared("gcp-gpu.yaml")
    for name, node_type in config["available_node_types"].items():
        if name == config["head_node_type"]:
            continue
        node_config = node_type["node_config"]
        assert sum(a["acceleratorCount"] for a in node_config["guestAccelerators"]) == node_type["resources"]["GPU"]
        assert node_config["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_dockerfile_matches_launcher_image_and_raycse_version():
    text = (CLUSTER / "Dockerfile").read_text()
    assert f"FROM {_load('gpu.yaml')['docker']['image']}\n" in text
    assert f"ARG RAYCSE_VERSION={_raycse_version()}\n" in text


# ------------------------------------------------------------------------------------------ KubeRay
def test_kuberay_rayjob_has_the_fields_kuberay_requires():
    job = _load("kuberay.yaml")
    assert job["apiVersion"] == "ray.io/v1"
    assert job["kind"] == "RayJob"
    assert job["metadata"]["name"]
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True

    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["raycse", "search"]
    assert argv[argv.index("--space") + 1].endswith("search_spaces/focal.yaml")
    tune_state = argv[argv.index("--storage-path" if "--storage-path" in argv else "--state") + 1]
    assert "://" in tune_state, "Tune state must go to shared storage"
    tracking_uri = argv[argv.index("--tracking-uri") + 1]

    cluster = spec["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is True
    head = cluster["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict)
    assert head["rayStartParams"].get("num-cpus") == "0"
    groups = [("head", head["template"])]

    workers = cluster["workerGroupSpecs"]
    assert workers
    for group in workers:
        assert group["groupName"]
        assert isinstance(group["rayStartParams"], dict)
        assert group["minReplicas"] == 0 and group["replicas"] == 0, "GPU workers must scale from zero"
        assert group["maxReplicas"] >= 1
        groups.append((group["groupName"], group["template"]))
    gpus = sorted(int(g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                  for g in workers)
    assert gpus == [1, 8]

    for name, template in groups:
        containers = template["spec"]["containers"]
        assert containers and all(c["name"] and c["image"] for c in containers), name
        env = {e["name"]: e.get("value") for e in containers[0].get("env", [])}
        assert env.get("MLFLOW_TRACKING_URI") == tracking_uri, name
        limits = containers[0]["resources"]["limits"]
        if name == "head":
            assert "nvidia.com/gpu" not in limits
        else:
            assert limits["nvidia.com/gpu"] == containers[0]["resources"]["requests"]["nvidia.com/gpu"]


# -------------------------------------------------------------------------------- fake GPU cluster
def test_fake_cluster_config_passes_rays_schema():
    # validate_config only: prepare_config would merge in the fake provider's example.yaml, which the
    # 2.60 wheel does not ship -- the very reason raycse ships cluster/fake-gpu.yaml, complete.
    config = _load("fake-gpu.yaml")
    validate_config(config)
    assert config["provider"]["type"] == "fake_multinode"
    assert config["head_node_type"] == "ray.head.default"  # the fake provider hard-codes this name
    workers = {k: v for k, v in config["available_node_types"].items() if k != config["head_node_type"]}
    assert all(w["resources"].get("GPU", 0) >= 1 and w["min_workers"] == 0 for w in workers.values())


FAKE_CLUSTER_SPACE = """\
experiment: fake-cluster
model: {model}
loss: simcse
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160}}
space: {{tau: {{type: loguniform, low: 0.02, high: 0.2}}}}
published: {{tau: 0.05}}
search: {{num_samples: 2, seed: 0, test_eval: none, scheduler: {{name: fifo}}}}
resources: {{workers: 1, cpus_per_worker: 2, gpus_per_worker: 1}}
"""


def run_search(storage_path: Path, model_dir: Path) -> list[str]:
    """Run a real 2-trial `raycse search` on the connected cluster; return the node id each trial ran on.

    RAY_ADDRESS points at the fake cluster, so raycse picks the file's full (GPU) settings; the fake GPUs
    have no CUDA device behind them and the trainer falls back to the CPU.
    """
    from raycse.cli import main

    space = storage_path.parent / "fake-cluster.yaml"
    space.write_text(FAKE_CLUSTER_SPACE.format(model=model_dir))
    assert main(["search", "--space", str(space), "--storage-path", str(storage_path), "--no-confirm",
                 "--tracking-uri", f"sqlite:///{storage_path.parent}/mlflow.db"]) == 0
    # The trials' own word for the process they ran in (Tune's result rows carry the trainable's pid), found in the
    # actor table: the nodes returned are those of the actors that ran a trial (Tune may start a spare actor that
    # runs none, when it reuses the first for the second trial).
    tune_pids = {json.loads(line)["pid"] for path in storage_path.rglob("result.json")
                 for line in path.read_text().splitlines() if line.strip()}
    actors = trial_actors()
    ran = [(node, pid) for node, pid in actors if pid in tune_pids]
    assert tune_pids and {pid for _, pid in ran} == tune_pids, (actors, tune_pids)
    return [node for node, _ in ran]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fake_gpu_cluster_places_trials_on_gpu_workers(tmp_path, monkeypatch, tiny_bert_dir):
    config = _load("fake-gpu.yaml")
    gpu_types = {name: t["resources"] for name, t in config["available_node_types"].items()
                 if t["resources"].get("GPU", 0) >= 1}
    assert gpu_types and config["available_node_types"][config["head_node_type"]]["resources"].get("GPU", 0) == 0

    monkeypatch.chdir(tmp_path)  # the search writes its report page into the working directory
    with fake_gpu_cluster(config) as cluster:
        address = cluster.address
        monkeypatch.setenv("RAY_ADDRESS", address)
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        head_id = ray.get_runtime_context().get_node_id()
        started = time.monotonic()

        trial_nodes = run_search(tmp_path / "ray_results", tiny_bert_dir)

        elapsed = time.monotonic() - started
        nodes = {n["NodeID"]: n for n in ray.nodes()}
        # The fake GPU workers: nodes the autoscaler launched with the resources of a shipped GPU
        # node type (CPU/GPU exactly as in cluster/fake-gpu.yaml).
        fake_gpu_workers = {
            node_id for node_id, n in nodes.items()
            if node_id != head_id and any(
                all(n["Resources"].get(k) == v for k, v in resources.items() if k in ("CPU", "GPU"))
                for resources in gpu_types.values())
        }
        assert 1 <= len(fake_gpu_workers) <= config["max_workers"]
        # one actor per trial, or one for both: Tune reuses a finished trial's actor when the second starts after it
        assert 1 <= len(trial_nodes) <= 2
        assert head_id not in trial_nodes
        assert set(trial_nodes) <= fake_gpu_workers, (trial_nodes, fake_gpu_workers)
        print(f"2 trials on fake GPU workers {sorted(n[-5:] for n in set(trial_nodes))} "
              f"(head {head_id[-5:]}) in {elapsed:.0f}s")


OWN_LOSS_SPACE = """\
experiment: fake-cluster-own-loss
model: {model}
loss: {loss}
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160}}
space: {{margin: declared}}
search: {{num_samples: 1, seed: 0, test_eval: none, scheduler: {{name: fifo}}, confirm: null}}
resources: {{workers: 1, cpus_per_worker: 2, gpus_per_worker: 1}}
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fake_gpu_cluster_runs_ones_own_loss_on_a_worker_that_cannot_import_it(tmp_path, monkeypatch,
                                                                                 tiny_bert_dir):
    """A user's loss file in a folder on no node's Python path: raycse joins the cluster (RAY_ADDRESS) shipping the
    file with the job, and the trial trains it on a fake GPU worker, where a job that ships nothing cannot import it."""
    from mlflow.tracking import MlflowClient
    from test_own_loss import write_loss

    from raycse.cli import main

    monkeypatch.chdir(tmp_path)  # the driver's folder, which Ray puts on its workers' path: not the loss's
    loss_file = write_loss(tmp_path / "elsewhere", "cluster_margin_loss", name="cluster-margin")
    space = tmp_path / "own-loss.yaml"
    space.write_text(OWN_LOSS_SPACE.format(model=tiny_bert_dir, loss=f"{loss_file}:CosineMargin"))
    storage, uri = tmp_path / "ray_results", f"sqlite:///{tmp_path / 'mlflow.db'}"
    with fake_gpu_cluster(_load("fake-gpu.yaml")) as cluster:
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        assert main(["search", "--space", str(space), "--storage-path", str(storage), "--no-confirm",
                     "--tracking-uri", uri]) == 0
        head_id = ray.get_runtime_context().get_node_id()
        tune_pids = {json.loads(line)["pid"] for path in storage.rglob("result.json")
                     for line in path.read_text().splitlines() if line.strip()}
        trial_nodes = {node for node, pid in trial_actors() if pid in tune_pids}
        assert trial_nodes and head_id not in trial_nodes

        ray.shutdown()  # a job of its own, which ships nothing
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)

        @ray.remote(num_gpus=1)
        def importable() -> tuple[str, bool]:
            import importlib.util

            return ray.get_runtime_context().get_node_id(), importlib.util.find_spec("cluster_margin_loss") is not None

        node, found = ray.get(importable.remote(), timeout=300)
        assert node != head_id and not found, (node, found)
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("fake-cluster-own-loss").experiment_id],
                              "tags.`raycse.stage` = 'search'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", runs
    assert runs[0].data.params["loss_family"] == "cluster-margin" and "margin" in runs[0].data.params


def wait_until_the_next_trial_runs(cluster, previous: str, timeout: float = 120):
    """(the trial process, its raylet) as soon as a worker is given the trial after `previous`: the worker whose
    working directory is another trial's folder (Tune's reset of a reused worker moves it there first; the trial's own
    code starts once the reset returns). A node lost from then on is lost during the reset or just after it."""
    import psutil
    from services import processes_of

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in processes_of(cluster.temp_dir):
            try:
                if not (proc.cmdline() or [""])[0].startswith("ray::ImplicitFunc"):
                    continue
                cwd = proc.cwd()
                if "run_trial_" in cwd and f"run_trial_{previous}_" not in cwd:
                    return proc, proc.parent()
            except psutil.Error:
                continue
        time.sleep(0.01)
    raise AssertionError(f"no worker started the trial after {previous} within {timeout:.0f} s")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_drained_node_and_a_node_lost_while_its_trial_starts_count_no_failure(tmp_path, monkeypatch,
                                                                                 tiny_bert_dir):
    """Preemption is not failure. On three fake GPU nodes, one trial at a time: the first trial's node is drained as a
    cloud's preemption notice drains it (Ray's drain API, reason PREEMPTION) and then taken away; the second trial's
    node is lost while that trial starts. Both trials go on elsewhere (the first from its last checkpoint) and
    finish, neither failure is counted against its trial (Tune's count of its failures stays 0: each keeps its one
    retry for failures of its own), and the answer is the uninterrupted search's (tests/test_cluster_path.py)."""
    import optuna
    from mlflow.tracking import MlflowClient
    from services import stop_processes
    from test_cluster_path import FAST_FAILURE_DETECTION, SPACE, steps_of, trial_process, uninterrupted
    from test_search import small_dev_file
    from test_stop_signals import Watched

    config = _load("fake-gpu.yaml")
    workers = config["available_node_types"]["ray.worker.gpu"]
    workers["min_workers"] = workers["max_workers"] = config["max_workers"] = 3  # the fake provider replaces none
    space = tmp_path / "preempted.yaml"
    steps = 256  # a trial long enough to be caught in the middle
    space.write_text(SPACE.format(experiment="preempted", model=tiny_bert_dir, objective=small_dev_file(tmp_path),
                                  steps=steps, eval_steps=32, sentences=8 * steps, trials=2))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)
    with fake_gpu_cluster(config, FAST_FAILURE_DETECTION, tmp_path / "logs") as cluster:
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        driver = Watched(["search", "--space", str(space), "--storage-path", str(tmp_path / "ray"), "--no-confirm",
                          "--tracking-uri", uri], tmp_path / "driver.log", tmp_path)

        # 1. the first trial's node drained for a preemption, then taken back (the cloud's part, after the notice)
        text = driver.wait_for(lambda t: any(step >= 64 for _, step in steps_of(t)), "the first trial's evaluations")
        first = steps_of(text)[0][0]
        trial, raylet = trial_process(cluster)
        node = next(node for node, pid in trial_actors() if pid == trial.pid)
        drained = subprocess.run(["ray", "drain-node", "--address", cluster.address, "--node-id", node, "--reason",
                                  "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "a spot instance taken back",
                                  "--deadline-remaining-seconds", "30"], capture_output=True, text=True, timeout=120)
        assert drained.returncode == 0, drained.stderr[-2000:]
        stop_processes([raylet, *raylet.children(recursive=True)], hard=True)

        # 2. the second trial's node lost while the trial starts: Tune starts it as the first one ends (in the first
        # one's worker: Tune reuses it), and it reports first at its first evaluation, 32 steps in. The kill comes as
        # soon as the worker is reset for it (in the trial's folder): during Tune's reset of the worker, a call of
        # milliseconds, or just after it (raycse/driver/tune/reset_failures.py; tests/test_reset_failures.py holds
        # the reset open and kills the node inside it)
        driver.wait_for(lambda t: f"trial {first}  finished" in t, "the first trial's end")
        trial, raylet = wait_until_the_next_trial_runs(cluster, first)
        stop_processes([raylet, *raylet.children(recursive=True)], hard=True)
        before_the_loss = driver.text()
        assert driver.ended(timeout=600) == 0, driver.text()[-3000:]
    others = [tid for tid, _ in steps_of(driver.text()) if tid != first]
    assert others, f"the second trial never reported:\n{driver.text()[-4000:]}"
    second = others[0]
    assert second not in {tid for tid, _ in steps_of(before_the_loss)}, "the second trial had reported before"

    expected = uninterrupted(space, tmp_path / "uninterrupted")
    client = MlflowClient(tracking_uri=uri)
    experiment = tmp_path / "ray" / "preempted"
    (snapshot,) = experiment.glob("experiment_state-*.json")
    failures = {re.search(r'"trial_id": "(\w+)"', trial)[1]: json.loads(run)["num_failures"]
                for trial, run in json.loads(snapshot.read_text())["trial_data"]}
    assert failures == {first: 0, second: 0}, failures
    for trial_id in (first, second):  # each did lose its process once (Tune's record of it), and was retried
        (error,) = experiment.glob(f"run_trial_{trial_id}_*/error.txt")
        assert error.read_text().count("Failure # ") == 1 and "The actor" in error.read_text(), error.read_text()
    runs = client.search_runs([client.get_experiment_by_name("preempted").experiment_id],
                              "tags.`raycse.stage` = 'search'")
    assert sorted(r.data.tags["raycse.trial_id"] for r in runs) == sorted([first, second])
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in runs)
    study = optuna.load_study(study_name="preempted", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    by_number = sorted(study.trials, key=lambda t: t.number)
    assert [t.state.name for t in by_number] == ["COMPLETE", "COMPLETE"]
    assert [t.params for t in by_number] == [params for params, _ in expected]
    for trial, (_, curve) in zip(by_number, expected):
        run = next(r for r in runs if r.data.tags["raycse.trial_id"] == trial.user_attrs["ray_trial_id"])
        logged: dict[int, set[float]] = {}
        for metric in client.get_metric_history(run.info.run_id, "objective"):
            logged.setdefault(metric.step, set()).add(round(metric.value, 9))
        assert sorted(logged) == [step for step, _ in curve] and all(len(v) == 1 for v in logged.values())
        assert [logged[step].pop() for step, _ in curve] == pytest.approx([value for _, value in curve], abs=1e-9)
