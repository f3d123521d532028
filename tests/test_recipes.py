"""The shipped cluster recipes keep a search's whole state where it outlives the cluster, and every YAML file in
cluster/ passes its validator.

A search has four kinds of state: MLflow's runs and artifacts, the Optuna study, Tune's experiment state and the
trials' checkpoints. For every shipped recipe (cluster/gpu.yaml, cluster/gcp-gpu.yaml, cluster/kuberay.yaml) and
every command docs/scaling.md gives for it, each `raycse search` command line is read by the real CLI parser and its
stores derived by raycse's own rule (`state_layout`, the defaults of an unnamed store), then each location judged:

  durable     object storage (s3://, gs://); a path under a volume the recipe mounts from outside the container (the
              head's disk); a database server the recipe names outside the cluster or runs on a persistent volume;
              an MLflow tracking server the recipe runs, judged by its own backend store and artifacts destination
  ephemeral   a path in the container that is not mounted, the job's (or pod's) working directory, a server the
              recipe does not know

The documented resume command must be a submit command plus `--resume`, every storage flag the same. Negative cases
(a copy of cluster/kuberay.yaml whose study has no storage flag, and the earlier recipes) must be found. Fast: no
cluster, no Ray, no store is started.
"""
from __future__ import annotations

import copy
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from raycse.cli import build_parser
from raycse.driver.layout import default_optuna_storage
from raycse.errors import ConfigError
from raycse.tracking.stores import sqlite_file, state_layout
from raycse.tracking.tracker import DEFAULT_TRACKING_URI

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
DOCS = ROOT / "docs" / "scaling.md"
RUNS, ARTIFACTS, STUDY, TUNE, CHECKPOINTS = ("MLflow runs", "MLflow artifacts", "Optuna study", "Tune state",
                                              "checkpoints")
KINDS = (RUNS, ARTIFACTS, STUDY, TUNE, CHECKPOINTS)
OBJECT_STORAGE = ("s3://", "gs://", "gcs://", "abfs://", "az://")
LAUNCHER = {"gpu.yaml": "s3://", "gcp-gpu.yaml": "gs://"}  # the cluster-launcher recipes and their buckets
PENDING_SUBCOMMANDS = {"status"}  # documented, added on another branch: parsed once the CLI has them


@dataclass
class Server:
    """An MLflow tracking server a recipe runs: where it keeps runs and artifacts."""

    backend: str
    artifacts: str


@dataclass
class Recipe:
    """Where a recipe's search driver runs, as far as its stores are concerned."""

    name: str
    mounts: tuple[str, ...] = ()  # container paths backed by storage that outlives the container
    env: dict[str, str] = field(default_factory=dict)  # the driver's environment (MLFLOW_TRACKING_URI)
    servers: dict[str, Server] = field(default_factory=dict)  # host:port -> the MLflow server there
    databases: tuple[str, ...] = ()  # database hosts on storage that outlives the cluster
    head_hosts: tuple[str, ...] = ()  # how the commands may name the head (its MLflow server listens there)


# ------------------------------------------------------------------------------------------------ commands
def logical_lines(text: str) -> list[str]:
    """Shell lines with their backslash continuations joined."""
    lines, current = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return lines + ([current] if current else [])


def raycse_commands(shell: str) -> list[tuple[list[str], bool]]:
    """Every `raycse ...` command in shell text: (its arguments after `raycse`, whether `ray job submit` runs it)."""
    found = []
    for line in logical_lines(shell):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, token in enumerate(tokens):
            if token == "raycse" and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                argv = []
                for arg in tokens[i + 1:]:
                    if arg in ("&&", "||", "|", ";", ">", "2>&1"):
                        break
                    argv.append(arg)
                found.append((argv, "submit" in tokens[:i] and "job" in tokens[:i]))
    return found


def doc_shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)


def header_shell(path: Path) -> str:
    """The commands in a YAML file's leading comment (`#   command`)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("#   "):
            lines.append(line[4:])
    return "\n".join(lines)


def docs_commands() -> list[tuple[list[str], bool]]:
    return [cmd for block in doc_shell_blocks(DOCS.read_text()) for cmd in raycse_commands(block)]


# ------------------------------------------------------------------------------------------------ recipes
def _exports(commands: list[str]) -> dict[str, str]:
    env = {}
    for cmd in commands:
        for name, value in re.findall(r"export (\w+)=([^'\"\s]+)", cmd):
            env[name] = value
    return env


def _expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m[1] or m[2], m[0]), value)


def _arg(argv: list[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token[len(flag) + 1:]
    return None


def launcher_recipe(config: dict, name: str) -> Recipe:
    """A cluster-launcher recipe: the driver runs in the head's container (`ray job submit`)."""
    mounts = tuple(option.split(":", 1)[1].split(":")[0]
                   for option in config["docker"].get("head_run_options", []) if option.startswith("--volume="))
    env = _exports(config["head_setup_commands"])
    servers = {}
    for cmd in config["head_start_ray_commands"]:
        if "mlflow server" in cmd:
            argv = shlex.split(cmd.split("exec mlflow server", 1)[1].split("'", 1)[0])
            assert _arg(argv, "--host") == "$RAYCSE_HEAD_IP", "the head's MLflow server listens on its address"
            servers[f"HEAD:{_arg(argv, '--port')}"] = Server(_expand(_arg(argv, "--backend-store-uri"), env),
                                                              _expand(_arg(argv, "--artifacts-destination"), env))
    return Recipe(name, mounts, {"MLFLOW_TRACKING_URI": env["MLFLOW_TRACKING_URI"]}, servers,
                  head_hosts=("${RAYCSE_HEAD_IP}", "<head-private-ip>", "<new-head-ip>"))


def _pvc_backed(spec: dict, container: dict) -> tuple[str, ...]:
    """The container's mount paths backed by a persistent volume claim."""
    claims = {v["name"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    return tuple(m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in claims)


def kuberay_recipe(job: dict, stores: list[dict]) -> Recipe:
    """The RayJob's head pod runs the driver; the MLflow server and PostgreSQL of cluster/kuberay-mlflow.yaml run
    outside its RayCluster."""
    head_spec = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head = head_spec["containers"][0]
    env = {e["name"]: e["value"] for e in head.get("env", []) if "value" in e}
    by_kind = {}
    for doc in stores:
        by_kind.setdefault(doc["kind"], []).append(doc)
    services = {}
    for service in by_kind.get("Service", []):
        namespace = service["metadata"].get("namespace", "default")
        for port in service["spec"]["ports"]:
            services[f"{service['metadata']['name']}.{namespace}.svc.cluster.local:{port['port']}"] = \
                service["spec"]["selector"]

    def workload(selector: dict) -> dict:
        found = [w for kind in ("Deployment", "StatefulSet") for w in by_kind.get(kind, [])
                 if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(found) == 1, f"the Service selecting {selector} must select exactly one workload"
        return found[0]

    servers, databases = {}, []
    for address, selector in services.items():
        work = workload(selector)
        container = work["spec"]["template"]["spec"]["containers"][0]
        argv = [*container.get("command", []), *container.get("args", [])]
        if argv[:2] == ["mlflow", "server"]:
            servers[address] = Server(_arg(argv, "--backend-store-uri"), _arg(argv, "--artifacts-destination"))
        claims = {c["metadata"]["name"] for c in work["spec"].get("volumeClaimTemplates", [])}
        env_of = {e["name"]: e.get("value") for e in container.get("env", [])}
        data = env_of.get("PGDATA")
        persistent = [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in claims]
        if data and any(data == path or data.startswith(path.rstrip("/") + "/") for path in persistent):
            databases.append(address.rsplit(":", 1)[0])  # a PostgreSQL whose data is on a persistent volume
    return Recipe("kuberay.yaml", _pvc_backed(head_spec, head), env, servers, tuple(databases))


def shipped_recipes() -> dict[str, tuple[Recipe, list[list[str]]]]:
    """Each recipe with the `raycse search` commands it documents (its own header, the docs' commands for it)."""
    recipes = {}
    docs = [argv for argv, submitted in docs_commands() if submitted and argv[0] == "search"]
    for name, bucket in LAUNCHER.items():
        path = CLUSTER / name
        own = [argv for argv, _ in raycse_commands(header_shell(path)) if argv[0] == "search"]
        in_docs = [argv for argv in docs if any(bucket in a for a in argv) or
                   (name == "gpu.yaml" and not any(b in a for a in argv for b in OBJECT_STORAGE))]
        recipes[name] = (launcher_recipe(yaml.safe_load(path.read_text()), name), own + in_docs)
    job = yaml.safe_load((CLUSTER / "kuberay.yaml").read_text())
    stores = list(yaml.safe_load_all((CLUSTER / "kuberay-mlflow.yaml").read_text()))
    recipes["kuberay.yaml"] = (kuberay_recipe(job, stores), [shlex.split(job["spec"]["entrypoint"])[1:]])
    return recipes


# ----------------------------------------------------------------------------------------- where state goes
def state_locations(argv: list[str], recipe: Recipe, working_dir: Path) -> dict[str, str]:
    """Where each kind of state of this `raycse search` command goes, by raycse's own rules; `working_dir`: where
    the command runs (its relative paths and defaults land there)."""
    args = build_parser().parse_args(argv)
    assert args.command == "search"
    before, saved = os.getcwd(), os.environ.get("MLFLOW_TRACKING_URI")
    os.chdir(working_dir)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    if "MLFLOW_TRACKING_URI" in recipe.env:
        os.environ["MLFLOW_TRACKING_URI"] = recipe.env["MLFLOW_TRACKING_URI"]
    try:
        layout = state_layout(args.state, args.tracking_uri, args.optuna_storage, args.storage_path)
        tracking = layout.tracking_uri or recipe.env.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
        if tracking == DEFAULT_TRACKING_URI:
            tracking = f"sqlite:///{working_dir / 'mlflow.db'}"
        study = layout.optuna_storage or default_optuna_storage(tracking)
        tune = layout.storage_path if "://" in layout.storage_path else str(working_dir / layout.storage_path)
    finally:
        os.chdir(before)
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved
    if tracking.startswith(("http://", "https://")):
        server = _server(tracking, recipe)
        runs, artifacts = (server.backend, server.artifacts) if server else (tracking, tracking)
    else:  # the client writes artifacts itself: the experiment's location, else MLflow's default ./mlruns
        runs, artifacts = tracking, layout.artifacts_for(tracking) or str(working_dir / "mlruns")
    return {RUNS: runs, ARTIFACTS: artifacts, STUDY: study, TUNE: tune, CHECKPOINTS: tune}


def _server(url: str, recipe: Recipe) -> Server | None:
    host, _, port = url.split("://", 1)[1].split("/", 1)[0].rpartition(":")
    return recipe.servers.get(f"{'HEAD' if host in recipe.head_hosts else host}:{port}")


def ephemeral(location: str, recipe: Recipe, working_dir: Path) -> str | None:
    """Why this location does not outlive the cluster, or None when it does."""
    if location.startswith(OBJECT_STORAGE):
        return None
    if location.startswith(("http://", "https://")):
        return "an MLflow server the recipe does not run (where it keeps things is unknown)"
    path = sqlite_file(location) if location.startswith("sqlite") else None
    if location.startswith(("postgresql", "mysql", "mssql")):
        host = location.split("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
        if host in recipe.databases or (recipe.name in LAUNCHER and host not in ("localhost", "127.0.0.1")
                                        and not host.startswith("$")):
            return None  # one outside the cluster, or one on a persistent volume
        return f"a database server on the cluster without persistent storage ({host})"
    path = path if path is not None else Path(location)
    if not path.is_absolute():
        return "a relative path: the job's working directory"
    if path == working_dir or working_dir in path.parents:
        return "the job's working directory (a pod's or the job's, deleted with it)"
    if any(path == Path(m) or Path(m) in path.parents for m in recipe.mounts):
        return None
    return "a path in the container that is not mounted"


def findings(recipe: Recipe, commands: list[list[str]], working_dir: Path) -> list[str]:
    """What in these commands would not outlive the cluster (nothing for a good recipe)."""
    found = []
    if not commands:
        return [f"{recipe.name}: no documented `raycse search` command"]
    for argv in commands:
        try:
            where = state_locations(argv, recipe, working_dir)
        except ConfigError as err:
            found.append(f"{recipe.name}: {shlex.join(argv)}: refused by raycse: {err}")
            continue
        for kind in KINDS:
            reason = ephemeral(where[kind], recipe, working_dir)
            if reason:
                found.append(f"{recipe.name}: {kind} at {where[kind]}: {reason} ({shlex.join(argv)})")
    return found


@pytest.fixture
def job_dir(tmp_path) -> Path:
    """Stands for the directory a `ray job submit` entrypoint (or a pod's command) runs in."""
    folder = tmp_path / "JOB-WORKING-DIR"
    folder.mkdir()
    return folder


# ----------------------------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("name", [*LAUNCHER, "kuberay.yaml"])
def test_every_shipped_recipe_keeps_all_four_kinds_of_state_where_they_outlive_the_cluster(name, job_dir):
    recipe, commands = shipped_recipes()[name]
    assert commands, f"{name} documents no `raycse search` command"
    assert findings(recipe, commands, job_dir) == []
    for argv in commands:  # and each kind was really judged: every location named
        assert set(state_locations(argv, recipe, job_dir)) == set(KINDS)


def test_a_kuberay_copy_whose_study_has_no_storage_flag_is_found(job_dir):
    job = yaml.safe_load((CLUSTER / "kuberay.yaml").read_text())
    stores = list(yaml.safe_load_all((CLUSTER / "kuberay-mlflow.yaml").read_text()))
    recipe = kuberay_recipe(job, stores)
    argv = shlex.split(job["spec"]["entrypoint"])[1:]
    assert "--optuna-storage" in argv
    i = argv.index("--optuna-storage")
    without = argv[:i] + argv[i + 2:]
    copy_of = copy.deepcopy(job)
    copy_of["spec"]["entrypoint"] = shlex.join(["raycse", *without])
    found = findings(kuberay_recipe(copy_of, stores), [shlex.split(copy_of["spec"]["entrypoint"])[1:]], job_dir)
    # with --state on object storage the study has no place: raycse itself refuses the command
    assert len(found) == 1 and "refused by raycse" in found[0] and "--optuna-storage" in found[0], found
    # the recipe as it was shipped before (Tune state by --storage-path, no study flag): the study in the pod
    before = ["search", "--space", "/home/ray/raycse/search_spaces/focal.yaml", "--storage-path",
              "s3://bucket/raycse", "--tracking-uri", "http://mlflow.mlflow.svc.cluster.local:5000"]
    found = findings(recipe, [before], job_dir)
    assert [f.split(":")[1].strip().split(" at ")[0] for f in found] == [STUDY], found
    assert "working directory" in found[0]


def test_a_study_in_the_heads_container_is_found(job_dir):
    """The earlier cluster/gpu.yaml command: the study at /home/ray/optuna.db, in the container, not on the mount."""
    recipe, _ = shipped_recipes()["gpu.yaml"]
    earlier = ["search", "--space", "search_spaces/focal.yaml", "--storage-path", "s3://bucket/raycse",
               "--tracking-uri", "http://<head-private-ip>:5000", "--optuna-storage", "sqlite:////home/ray/optuna.db"]
    found = findings(recipe, [earlier], job_dir)
    assert len(found) == 1 and found[0].startswith(f"gpu.yaml: {STUDY} at sqlite:////home/ray/optuna.db")
    assert "not mounted" in found[0]
    # and everything in the job's working directory: no --state, no flags
    found = findings(recipe, [["search", "--space", "search_spaces/focal.yaml"]], job_dir)
    assert {f.split(": ", 2)[1].split(" at ")[0] for f in found} == {STUDY, TUNE, CHECKPOINTS}, found
    # a server the recipe does not run cannot be judged: refused
    found = findings(recipe, [[*earlier[:5], "--tracking-uri", "http://elsewhere:5000", "--optuna-storage",
                               "sqlite:////home/ray/raycse-head/optuna.db"]], job_dir)
    assert {f.split(": ", 2)[1].split(" at ")[0] for f in found} == {RUNS, ARTIFACTS}, found


def test_a_state_directory_holds_all_four_kinds(job_dir, tmp_path):
    """--state DIR derives every store inside DIR; a DIR on the head's mount is durable, one in the job's is not."""
    recipe, _ = shipped_recipes()["gpu.yaml"]
    mounted = tmp_path / "mounted"
    recipe = Recipe(recipe.name, (str(mounted),), {}, recipe.servers, head_hosts=recipe.head_hosts)
    where = state_locations(["search", "--space", "x.yaml", "--state", str(mounted / "state")], recipe, job_dir)
    assert where == {RUNS: f"sqlite:///{mounted / 'state' / 'mlflow.db'}",
                     ARTIFACTS: str(mounted / "state" / "mlflow-artifacts"),
                     STUDY: f"sqlite:///{mounted / 'state' / 'optuna.db'}",
                     TUNE: str(mounted / "state" / "ray_results"), CHECKPOINTS: str(mounted / "state" / "ray_results")}
    assert findings(recipe, [["search", "--space", "x.yaml", "--state", str(mounted / "state")]], job_dir) == []
    assert len(findings(recipe, [["search", "--space", "x.yaml", "--state", "state"]], job_dir)) == len(KINDS)
    assert not mounted.exists()  # derived, never created


def test_the_documented_resume_is_the_submit_command_plus_resume():
    recipes = shipped_recipes()
    for name in ("gpu.yaml", "kuberay.yaml"):  # the docs walk through AWS; KubeRay's is its entrypoint + --resume
        _, commands = recipes[name]
        submits = [argv for argv in commands if "--resume" not in argv]
        assert submits, name
        resumes = [argv for argv in commands if "--resume" in argv]
        if name == "kuberay.yaml":
            assert "--resume` to the" in (CLUSTER / name).read_text() or "`--resume`" in (CLUSTER / name).read_text()
            resumes = [[*submits[0], "--resume"]]
        assert resumes, f"{name}: no documented resume command"
        for argv in resumes:
            stripped = [a for a in argv if a != "--resume"]
            assert stripped in submits, f"{name}: {shlex.join(argv)} is no documented submit command plus --resume"
    # the same holds for every resume the docs give, cluster or not
    all_commands = [argv for argv, _ in docs_commands() if argv[0] == "search"]
    for argv in all_commands:
        if "--resume" in argv:
            assert [a for a in argv if a != "--resume"] in all_commands, shlex.join(argv)


def test_every_raycse_line_in_the_docs_parses_with_the_real_cli():
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices)
    commands = docs_commands()
    assert len(commands) >= 5
    pending = set()
    for argv, _ in commands:
        if argv[0] not in known:
            pending.add(argv[0])
            continue
        try:
            parser.parse_args(argv)
        except (ConfigError, SystemExit) as err:
            raise AssertionError(f"`raycse {shlex.join(argv)}` does not parse: {err}") from None
    assert pending <= PENDING_SUBCOMMANDS, pending


# ------------------------------------------------------------------------------------------- validators
def _launcher_configs() -> list[Path]:
    return [p for p in sorted(CLUSTER.glob("*.yaml"))
            if "provider" in (next(yaml.safe_load_all(p.read_text()), None) or {})]


def test_every_yaml_file_in_cluster_is_a_launcher_config_or_a_kubernetes_manifest():
    for path in sorted(CLUSTER.glob("*.y*ml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs, path
        launcher = "provider" in docs[0]
        manifests = all("apiVersion" in d and "kind" in d for d in docs)
        assert launcher != manifests, f"{path.name}: neither a cluster-launcher config nor Kubernetes manifests"


@pytest.mark.parametrize("path", _launcher_configs(), ids=lambda p: p.name)
def test_every_launcher_config_passes_rays_own_validator(path):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load(path.read_text())
    if config["provider"]["type"] == "fake_multinode":
        validate_config(config)  # prepare_config would merge in an example.yaml the 2.60 wheel does not ship
    else:
        validate_config(prepare_config(copy.deepcopy(config)))


def _check_pod_spec(where: str, spec: dict) -> None:
    containers = spec.get("containers")
    assert containers, f"{where}: no containers"
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for c in containers:
        assert c.get("name") and c.get("image"), f"{where}: a container needs a name and an image"
        for mount in c.get("volumeMounts", []):
            assert mount["mountPath"].startswith("/"), f"{where}: {mount}"
            assert mount["name"] in volumes | spec.get("_claims", set()), f"{where}: no volume {mount['name']!r}"
        for e in c.get("env", []):
            assert ("value" in e) != ("valueFrom" in e), f"{where}: env {e.get('name')} needs value or valueFrom"
        resources = c.get("resources", {})
        for key, limit in resources.get("limits", {}).items():
            request = resources.get("requests", {}).get(key)
            assert request is None or str(request) == str(limit) or key in ("cpu", "memory"), f"{where}: {key}"


def check_manifest(doc: dict) -> None:
    """The structure the Kubernetes API server (and KubeRay's CRD) requires of the kinds raycse ships."""
    kind, name = doc["kind"], doc["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), f"{kind} {name!r}: not a DNS name"
    where = f"{kind} {name}"
    if kind == "RayJob":
        assert doc["apiVersion"] == "ray.io/v1"
        spec = doc["spec"]
        assert isinstance(spec["entrypoint"], str) and spec["entrypoint"].strip()
        cluster = spec["rayClusterSpec"]
        head = cluster["headGroupSpec"]
        assert isinstance(head["rayStartParams"], dict)
        assert all(isinstance(v, str) for v in head["rayStartParams"].values()), "rayStartParams values are strings"
        _check_pod_spec(f"{where} head", head["template"]["spec"])
        for group in cluster["workerGroupSpecs"]:
            assert group["groupName"] and isinstance(group["rayStartParams"], dict)
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
            _check_pod_spec(f"{where} {group['groupName']}", group["template"]["spec"])
    elif kind in ("Deployment", "StatefulSet"):
        assert doc["apiVersion"] == "apps/v1"
        selector = doc["spec"]["selector"]["matchLabels"]
        template = doc["spec"]["template"]
        assert selector.items() <= template["metadata"]["labels"].items(), f"{where}: selector misses the pods"
        spec = dict(template["spec"])
        spec["_claims"] = {c["metadata"]["name"] for c in doc["spec"].get("volumeClaimTemplates", [])}
        _check_pod_spec(where, spec)
        if kind == "StatefulSet":
            assert doc["spec"]["serviceName"]
    elif kind == "Service":
        assert doc["apiVersion"] == "v1" and doc["spec"].get("type", "ClusterIP") == "ClusterIP", \
            f"{where}: only ClusterIP (nothing reachable from outside)"
        assert doc["spec"]["selector"] and doc["spec"]["ports"]
    elif kind == "ConfigMap":
        assert doc["apiVersion"] == "v1" and all(isinstance(v, str) for v in doc["data"].values())
    else:
        raise AssertionError(f"{where}: a kind this test does not know")


@pytest.mark.parametrize("name", ["kuberay.yaml", "kuberay-mlflow.yaml"])
def test_kubernetes_manifests_are_well_formed(name):
    """KubeRay's RayJob is no cluster-launcher file: its structure is checked instead."""
    docs = [d for d in yaml.safe_load_all((CLUSTER / name).read_text()) if d is not None]
    for doc in docs:
        check_manifest(doc)
    services = [d for d in docs if d["kind"] == "Service"]
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    for service in services:  # every Service selects a workload shipped beside it
        assert any(service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
                   for w in workloads), service["metadata"]["name"]


def test_the_manifest_check_refuses_a_broken_one():
    job = yaml.safe_load((CLUSTER / "kuberay.yaml").read_text())
    broken = copy.deepcopy(job)
    broken["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["volumeMounts"] = \
        [{"name": "nowhere", "mountPath": "/data"}]
    with pytest.raises(AssertionError, match="no volume"):
        check_manifest(broken)
    broken = copy.deepcopy(job)
    broken["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0
    with pytest.raises(AssertionError, match="strings"):
        check_manifest(broken)
