"""Shared fixtures: small real things (a tiny randomly initialised BERT, a few sentences) and real services (PostgreSQL,
an MLflow server on it: tests/services.py), never mocks."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from services import MlflowServer, Postgres, postgres_bin
from skips import require_module, unavailable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# One compute thread per process, set here once, before anything imports torch: torch in the tests, the CLI
# subprocesses and Ray's workers inherit it. The suite's processes already run side by side (a driver, its trials,
# a server), so a second thread each would only oversubscribe a 2-core machine (an evaluation took 20 s on two
# threads against 3 s on one while trials ran).
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# Every command a test starts by name (ray, raycse, mlflow, python3 in the GPU suite's scripts, the job entrypoint a
# Ray cluster runs) is the one beside the interpreter running the tests: run as `.venv/bin/python -m pytest` with
# that venv not activated, PATH would find another install's, or none (`FileNotFoundError: 'ray'`).
SCRIPTS_DIR = sysconfig.get_path("scripts")
os.environ["PATH"] = os.pathsep.join([SCRIPTS_DIR, *(part for part in os.environ.get("PATH", "").split(os.pathsep)
                                                     if part and part != SCRIPTS_DIR)])

# The untouched model's figures, which searches keep between runs in the user's cache folder: the tests keep theirs
# in a temporary folder of the session, never in the user's. Every search of the session shares it, so the tiny
# model's figures on the same data are scored once.
_CACHE_DIR = tempfile.mkdtemp(prefix="raycse-test-cache-")
os.environ["RAYCSE_CACHE_DIR"] = _CACHE_DIR


@pytest.fixture(autouse=True)
def _mlflow_tracking_uri_as_it_was():
    """$MLFLOW_TRACKING_URI as the test found it, afterwards: MLflow 3's `set_tracking_uri` writes it into the
    process's environment, so a test that records a search in-process would hand its store to every later test of
    the same worker (a dry run then looked for the Optuna study beside another test's store)."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@pytest.fixture(scope="module")
def local_ray(request):
    """A local Ray of one CPU for a module's Tune tests. pytest imports the module from tests/, which is not on the
    workers' path: its trainables are shipped by value."""
    import ray

    ray.cloudpickle.register_pickle_by_value(request.module)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(request.module)


def pytest_configure(config):
    """raycse's own modules compiled once, before the test processes start, where this interpreter writes no bytecode
    itself (PYTHONDONTWRITEBYTECODE, as on this project's machines). An editable install leaves that to the first
    import, which then never writes it either, so every process the suite starts (~900: the `raycse` commands, Ray's
    workers, Tune's trial processes) compiled the modules it imports again, 0.04-0.15 CPU-s each (measured:
    benchmarks/results/test-suite-time/2026-11-27-cpu2-bytecode). Python reads the
    bytecode whatever that setting says; it only stops Python from writing it."""
    if hasattr(config, "workerinput") or not sys.dont_write_bytecode:
        return
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("raycse")
    for folder in spec.submodule_search_locations if spec else ():
        compileall.compile_dir(folder, quiet=2)


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one test process per core, at most 4. A Ray-starting test starts a cluster of
    its own, a dozen processes and about a gigabyte; more of them at once would trade memory for little time."""
    return max(1, min(4, os.cpu_count() or 1))


# The modules whose slow tests take several minutes each on 2 cores (the GPU suite's rehearsal, the cluster path,
# whole comparisons and searches killed and resumed): they go out first.
_LONGEST = ("test_gpu_suite.py", "test_cluster_path.py", "test_compare.py", "test_search.py",
            "test_tracking_server.py", "test_cluster.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """The slow tests (whole searches, Ray clusters: a minute or more each) first, the longest modules' first of all,
    so that the two test processes start them early and share the short ones at the end, instead of one process
    finishing a long test alone (pyproject's addopts hand tests out one at a time, in this order).

    A module's tests that use one of its module-scoped fixtures (a search run in tmux, a PostgreSQL and an MLflow
    server, a Ray cluster, a recorded search) form one xdist group: they go to one test process together, which
    builds the fixture once. Handed out one by one, they went to both processes, and both built it (the tmux search,
    30 s, twice)."""
    def rank(item) -> tuple[bool, int]:
        name = item.path.name
        return item.get_closest_marker("slow") is None, _LONGEST.index(name) if name in _LONGEST else len(_LONGEST)

    items.sort(key=rank)
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is not None and any(defs[-1].scope == "module" for defs in fixtures.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


# No test leaves a process behind. Every process the run starts inherits this mark in its environment (Ray's, the
# `raycse` commands', a server's, their children's, whoever reaps them once their parent is gone): the process that
# set it (the run's first, which hands its environment to its `-n` workers) names, at the end, any still alive.
RUN_MARK = "RAYCSE_TEST_RUN"
if os.environ.get(RUN_MARK) != str(os.getppid()) or "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ[RUN_MARK] = str(os.getpid())  # a run of its own (a pytest started by a test too), not a worker's
LEFT_BEHIND_WAIT_S = 20  # what a process the tests stopped (a Ray runtime, a worker of -n) may take to end


def processes_left_behind() -> list:
    """The processes alive (not zombies) that carry this run's mark, other than this one and its ancestors."""
    import psutil

    mark = f"{RUN_MARK}={os.environ[RUN_MARK]}".encode()
    ours = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    left = []
    for pid in psutil.pids():
        if pid in ours:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as file:
                if mark not in file.read().split(b"\0"):
                    continue
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except (OSError, psutil.Error):
            continue
    return left


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """The cache folder removed; then, in the run's own process once its workers have ended, every process the run
    started and left running is named, stopped, and fails the run."""
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
    if os.environ.get(RUN_MARK) != str(os.getpid()):
        return
    import time

    import psutil

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # this process's own Ray, which its exit would shut down
        ray.shutdown()
    deadline = time.monotonic() + LEFT_BEHIND_WAIT_S
    while (left := processes_left_behind()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not left:
        return
    lines = []
    for proc in left:
        try:
            lines.append(f"  pid {proc.pid}, started {time.time() - proc.create_time():.0f} s ago: "
                         f"{' '.join(proc.cmdline())[:300]}")
        except psutil.Error:
            continue
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    text = ("processes the tests started are still running (stopped now; the test that started one must stop it):\n"
            + "\n".join(lines))
    if reporter is not None:
        reporter.write_line(text, red=True)
    else:
        print(text, file=sys.stderr)
    from services import stop_processes

    stop_processes(left)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A test process of `-n` ends, once it has reported everything, without the interpreter's teardown: freeing
    torch, transformers, Ray and MLflow object by object took 8 to 12 s at the end of every run, while the first
    process waited. Its exit hooks still run (a Ray a test left running is shut down). Unlike the `raycse` command's
    exit (raycse/__main__.py), it does not wait for its threads first: xdist's own channel threads held that wait
    for 3 to 4 s."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# Hypothesis (tests/test_fuzz_inputs.py): "ci", a fixed seed and a budget that runs in CI, unless
# `--hypothesis-profile=long` (or RAYCSE_FUZZ_PROFILE=long) asks for the long run (> 5,000 generated inputs). No
# example database: the fuzzer checks that the working directory stays byte-for-byte unchanged, and a database is a
# directory that Hypothesis would write.
_FUZZ = {"derandomize": True, "deadline": None, "database": None, "print_blob": False,
         "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                   HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=60, **_FUZZ)
settings.register_profile("long", max_examples=1000, **_FUZZ)
settings.load_profile(os.environ.get("RAYCSE_FUZZ_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with random weights and the packaged MiniLM's tokenizer, saved to disk."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from raycse.encoder.loading import resolve_model_path

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def few_sts_pairs(tmp_path_factory) -> Path:
    """The bundled STS sets cut to their first 64 pairs each, in SentEval's layout."""
    from raycse.evaluation.tasks import DEFAULT_DATA_DIR

    root = tmp_path_factory.mktemp("sts-64-pairs")
    for source in DEFAULT_DATA_DIR.rglob("*"):
        if source.is_file():
            target = root / source.relative_to(DEFAULT_DATA_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
            target.write_text("".join(lines[:65 if source.parent.name == "SICK" else 64]), encoding="utf-8")
    return root


@pytest.fixture
def few_sts_data(monkeypatch, few_sts_pairs):
    """Searches read 64 pairs of each STS set (RAYCSE_STS_DATA): for tests of what a search records and decides,
    not of its scores. The test tasks and STS-B dev then take a fraction of a second each with the tiny BERT."""
    from raycse.evaluation.tasks import STS_DATA_ENV

    monkeypatch.setenv(STS_DATA_ENV, str(few_sts_pairs))


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    return [
        "a man is playing a guitar .",
        "a woman is slicing an onion .",
        "the cat sits on the mat .",
        "stocks fell sharply on monday .",
        "a child is riding a horse .",
        "the government announced new taxes .",
        "two dogs are running through a field .",
        "a plane is taking off .",
        "someone is cooking pasta in a kitchen .",
        "the football match ended in a draw .",
        "a boy is reading a book under a tree .",
        "rain is expected for the weekend .",
        "a band plays music on a stage .",
        "the scientist measured the temperature .",
        "a girl is painting a picture .",
        "the train arrived late at the station .",
    ]


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server with databases `mlflow` and `optuna` (tests/services.py), for one test module."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        unavailable("no PostgreSQL (Debian: apt-get install postgresql; .ci/run installs it)")
    require_module("psycopg2", "pip install psycopg2-binary (the test extra, which .ci/run installs)")
    server = Postgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_server(postgres, tmp_path_factory):
    """An `mlflow server` on that PostgreSQL, its artifacts proxied into a temporary directory."""
    root = tmp_path_factory.mktemp("mlflow-server")
    server = MlflowServer(postgres.url("mlflow"), root / "artifacts", root / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
