"""`raycse search` end to end: a real Ray runtime, real Optuna, a real SQLite MLflow store, a tiny BERT.

One search runs every stage (baseline, search, choosing, judging on fresh seeds, test, record); others check
divergence, crashes, resuming after a kill in any stage, and two searches sharing one MLflow store.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from raycse.cli import main
from raycse.records import TRIAL_PROCESS

pytestmark = pytest.mark.slow

SPACE = """\
experiment: {experiment}
model: {model}
objective: {objective}
loss: focal
train: {{batch_size: 8, max_steps: {steps}, eval_steps: 2, max_sentences: {sentences}, lr: 1.0e-4}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
  {extra}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: {num_samples}, seed: {seed}, test_eval: {test_eval}, scheduler: {{name: fifo}},
         confirm: {confirm}}}
resources: {{workers: 1, cpus_per_worker: 2}}
paper:
  focal: {{model: bert-base-uncased, corpus: wiki1m, figures: {{STS12: [68.50, 0.08], avg: [77.33, 0.08]}}}}
"""


def write_space(tmp_path: Path, model: Path, experiment: str, num_samples: int, test_eval: str = "best",
                extra: str = "", seed: int = 0, steps: int = 4,
                confirm: str = "{top_k: 1, judge_seeds: 2}", objective: str = "stsb_dev") -> Path:
    path = tmp_path / f"{experiment}.yaml"
    path.write_text(SPACE.format(experiment=experiment, model=model, num_samples=num_samples, test_eval=test_eval,
                                 extra=extra, seed=seed, steps=steps, sentences=max(160, 8 * steps), confirm=confirm,
                                 objective=objective))
    return path


def small_dev_file(folder: Path, pairs: int = 48) -> str:
    """The first `pairs` pairs of STS-B dev as a development file: the objective of tests that check bookkeeping
    (which runs, metrics and trials exist after a kill, a restart, two searches at once), not scores. Each
    evaluation then encodes ~100 sentences instead of STS-B dev's ~3,000."""
    from raycse.evaluation.tasks import load_sts_task

    path = folder / "small-dev.tsv"
    if path.exists():  # written once: a search started earlier may be reading it
        return str(path)
    dev = load_sts_task("STSBenchmark-dev")["all"]
    rows = ["sentence1\tsentence2\tscore"] + [f"{a}\t{b}\t{score}" for a, b, score in
                                              zip(dev.sentences1[:pairs], dev.sentences2[:pairs], dev.scores[:pairs])]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def search_args(tmp_path: Path, space: Path, *extra: str) -> list[str]:
    return ["search", "--space", str(space), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--storage-path", str(tmp_path / "ray"), *extra]


def runs_of(client: MlflowClient, experiment: str) -> tuple[object, list]:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if "raycse.search" in r.data.tags]
    assert len(parents) == 1, "exactly one parent run per search"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], children


def summary_of(client: MlflowClient, parent, tmp_path: Path) -> dict:
    path = client.download_artifacts(parent.info.run_id, "search_summary.json", str(tmp_path))
    return json.loads(Path(path).read_text())


@pytest.fixture
def ray_session():
    import ray

    yield
    ray.shutdown()


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(1800)
def test_a_search_runs_every_stage_and_records_the_answer(tmp_path, tiny_bert_dir, ray_session, capsys,
                                                          monkeypatch):
    import optuna

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path / "cache"))  # empty: this search scores the untouched model
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # as the shipped CPU budgets: only the first judging seed scores the test tasks
    space = write_space(tmp_path, tiny_bert_dir, "tiny-search", num_samples=2,
                        confirm="{top_k: 1, judge_seeds: 2, test_seeds: 1}")
    assert main(search_args(tmp_path, space)) == 0
    out = capsys.readouterr().out
    assert "baseline: scoring the untouched model (its objective and the seven STS test tasks)" in out
    assert "the test tasks on seed 43" in out and "Scoring" not in out  # nothing left for the test stage
    assert "CPU budget" in out  # no GPU here, and the output says so
    for words in ("Baseline (untouched model):", "Judging", "Verdict:", "95% interval", "df = 1", "Test tasks",
                  "untouched model", "Not comparable", "Seed noise", "demonstration of the mechanism", "Time:"):
        assert words in out, words

    client = MlflowClient(tracking_uri=uri)
    parent, children = runs_of(client, "tiny-search")
    assert parent.info.status == "FINISHED"
    by_stage = {stage: [r for r in children if r.data.tags["raycse.stage"] == stage] for stage in ("search", "judge")}
    assert len(by_stage["search"]) == 2 and all(r.data.tags["raycse.seed"] == "42" for r in by_stage["search"])
    assert len(children) == len(by_stage["search"]) + len(by_stage["judge"])  # top_k 1: no choosing block
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags["raycse.status"] == "finished"
        assert {"tau", "m", "lr", "batch_size", "pooler", "max_grad_norm", "seed"} <= set(run.data.params)
        history = client.get_metric_history(run.info.run_id, "objective")
        assert [m.step for m in history] == [2, 4]  # step-indexed dev curve, scored twice
    # the paper's point runs first in the search stage
    published = [r for r in by_stage["search"] if float(r.data.params["tau"]) == 0.07]
    assert len(published) == 1

    # judging: the winner and the published point on fresh seeds 43 and 44 only; no search run is counted
    summary = summary_of(client, parent, tmp_path)
    decision = summary["decision"]
    assert decision["method"]["seeds"]["judge"] == [43, 44] and decision["method"]["seeds"]["choose"] == []
    judged = [c for c in decision["configs"] if c["judge"]]
    assert 1 <= len(judged) <= 2 and any(c["is_published"] for c in judged) and any(c["is_winner"] for c in judged)
    for config in judged:
        runs = [r for r in by_stage["judge"] if r.data.tags["raycse.config_key"] == config["config_key"]]
        assert sorted(int(r.data.tags["raycse.seed"]) for r in runs) == [43, 44]
        assert config["judge"]["seeds"] == [43, 44] and config["judge"]["n"] == 2
        assert sorted(config["judge"]["values"]) == sorted(r.data.metrics["best_objective"] for r in runs)
        for run in runs:  # the seed-43 judging runs scored their best checkpoint on the test tasks, no other
            scored = run.data.tags["raycse.seed"] == "43"
            assert ("avg" in run.data.metrics) == scored and ("STS12" in run.data.metrics) == scored
    winner = summary["winner"]
    assert winner["n"] == 2 and parent.data.metrics["best_objective"] == pytest.approx(winner["mean"])
    assert winner["sentence"] and winner["sentence"] in out and winner["sentence"] == summary["verdict"]
    assert parent.data.metrics["baseline_objective"] == pytest.approx(summary["baseline"]["objective"])
    assert set(summary["baseline"]["test"]) >= {"STS12", "SICKRelatedness", "avg"}  # the untouched model's row
    rows = {row["label"]: row for row in summary["test_table"]["rows"]}
    assert rows["untouched model"]["figures"]["avg"]["mean"] == pytest.approx(summary["baseline"]["test"]["avg"])
    assert rows["winner"]["n"] == 1 and rows["winner"]["figures"]["avg"]["n"] == 1
    assert summary["test_table"]["seeds"] == "judging seed 43" and decision["method"]["test_seeds"] == 1
    assert not winner["beats_baseline"] and not winner["baseline_judged"] and "test_seeds" in summary["verdict"]

    # The untouched model's figures were kept in the cache folder, as the search used them.
    kept = [json.loads(p.read_text())["scores"] for p in (tmp_path / "cache" / "untouched").glob("*.json")]
    assert len(kept) == 1 and kept[0]["test"] == summary["baseline"]["test"]
    assert kept[0]["by_pooler"] == summary["baseline"]["by_pooler"]

    # A second search of the same name on the same stores is refused before anything starts, whether it names the same
    # Tune storage or another one; the first search is untouched.
    assert main(search_args(tmp_path, space)) == 2
    error = capsys.readouterr().err
    assert error.startswith("raycse: error: a search already exists at ") and "--resume" in error
    assert main([*search_args(tmp_path, space)[:-2], "--storage-path", str(tmp_path / "other-ray")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("raycse: error: an Optuna study 'tiny-search' already exists in ") and "--resume" in error
    assert not (tmp_path / "other-ray" / "tiny-search").exists()
    again, again_children = runs_of(client, "tiny-search")
    assert again.info.run_id == parent.info.run_id and len(again_children) == len(children)
    assert len(optuna.load_study(study_name="tiny-search", storage=f"sqlite:///{tmp_path / 'optuna.db'}").trials) == 2

    # Another search from the same model and data reuses the kept figures instead of scoring them, and says so.
    other = write_space(tmp_path, tiny_bert_dir, "tiny-search-again", num_samples=1,
                        confirm="{top_k: 1, judge_seeds: 2, test_seeds: 1}")
    assert main(search_args(tmp_path, other, "--no-confirm")) == 0  # the search stage is enough to show it
    out = capsys.readouterr().out
    assert "baseline: the untouched model's figures reused from" in out and "scoring the untouched" not in out
    reused = summary_of(client, runs_of(client, "tiny-search-again")[0], tmp_path / "again")
    assert reused["baseline"]["test"] == summary["baseline"]["test"]
    assert reused["baseline"]["objective"] == summary["baseline"]["objective"]
    # With an empty cache, figures the package ships under the same fingerprint are read, not scored
    # (scripts/untouched_figures.py writes them for the bundled model): here the kept record, moved there.
    from raycse.evaluation import untouched_cache

    shipped_dir = tmp_path / "shipped"
    shutil.copytree(tmp_path / "cache" / "untouched", shipped_dir)
    assert main(["cache", "clear"]) == 0
    monkeypatch.setattr(untouched_cache, "SHIPPED_DIR", shipped_dir)
    third = write_space(tmp_path, tiny_bert_dir, "tiny-search-shipped", num_samples=1,
                        confirm="{top_k: 1, judge_seeds: 2, test_seeds: 1}")
    assert main(search_args(tmp_path, third, "--no-confirm")) == 0
    out = capsys.readouterr().out
    assert "baseline: the untouched model's figures as shipped with raycse" in out
    assert "scoring the untouched" not in out
    read = summary_of(client, runs_of(client, "tiny-search-shipped")[0], tmp_path / "shipped-summary")
    assert read["baseline"]["test"] == summary["baseline"]["test"]
    assert read["baseline"]["by_pooler"] == summary["baseline"]["by_pooler"]
    assert not list((tmp_path / "cache" / "untouched").glob("*.json"))  # shipped figures are not copied to the cache
    assert parent.data.metrics["avg"] == pytest.approx(rows["winner"]["figures"]["avg"]["mean"])
    assert summary["paper"]["figures"]["avg"] == {"mean": 77.33, "std": 0.08} and not summary["paper"]["comparable"]
    # the registered checkpoint is the winner's first judging seed's, by rule
    assert summary["registered"]["seed"] == 43

    # time: the driver's phases add up to the wall clock, and the trials' own time is there
    metrics = parent.data.metrics
    phases = sum(v for k, v in metrics.items() if k.startswith("time_") and k != "time_total_s")
    assert phases == pytest.approx(metrics["time_total_s"], rel=0.05)
    assert metrics["trial_train_s"] > 0 and metrics["trial_eval_s"] > 0 and 0 < metrics["slot_utilisation"] <= 1

    # the Optuna study persists beside the MLflow store, with Ray's trial ids
    study = optuna.load_study(study_name="tiny-search", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert len(study.trials) == 2
    assert {t.user_attrs["ray_trial_id"] for t in study.trials} == {r.data.tags["raycse.trial_id"]
                                                                     for r in by_stage["search"]}
    # and the printed table numbers each search trial as the study does
    numbers = {t.user_attrs["ray_trial_id"]: t.number for t in study.trials}
    assert {t["trial_id"]: t["optuna_number"] for t in summary["trials"] if t["stage"] == "search"} == numbers

    # the best checkpoint is an artifact of the parent, registered, loadable; the report page is there too
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "best_checkpoint")}
    assert {"best_checkpoint/config.json", "best_checkpoint/modules.json"} <= artifacts
    assert "report/index.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    page = (tmp_path / "report" / "index.html").read_text()
    assert "Where the time went" in page and "slot utilisation" in page.lower()
    versions = client.search_model_versions("name='tiny-search'")
    assert len(versions) == 1 and versions[0].run_id == parent.info.run_id

    from sentence_transformers import SentenceTransformer

    local = client.download_artifacts(parent.info.run_id, "best_checkpoint", str(tmp_path / "dl"))
    assert SentenceTransformer(local, device="cpu").encode(["a test sentence"]).shape == (1, 32)

    assert main(["report", "tiny-search", "--tracking-uri", uri, "--output-dir", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "index.html").is_file()
    assert main(["report", "no-such-experiment", "--tracking-uri", uri]) == 2


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(600)
def test_judging_in_looks_runs_each_look_as_its_own_experiment_and_records_the_look(tmp_path, tiny_bert_dir,
                                                                                     ray_session, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # no test figures: nothing can be judged, so no look stops the block and both run
    space = write_space(tmp_path, tiny_bert_dir, "looks", num_samples=2, test_eval="none", steps=4,
                        confirm="{top_k: 1, judge_seeds: 4, looks: [2, 4]}")
    assert main(search_args(tmp_path, space)) == 0
    assert (tmp_path / "ray" / "looks-judge").is_dir() and (tmp_path / "ray" / "looks-judge-look2").is_dir()
    client = MlflowClient(tracking_uri=uri)
    parent, children = runs_of(client, "looks")
    judged = [r for r in children if r.data.tags["raycse.stage"] == "judge"]
    pairs = {(r.data.tags["raycse.config_key"], r.data.tags["raycse.seed"]) for r in judged}
    assert len(pairs) == len(judged) and {seed for _, seed in pairs} == {"43", "44", "45", "46"}
    summary = summary_of(client, parent, tmp_path)
    assert summary["decision"]["method"]["looks"] == [2, 4] and summary["decision"]["look"] == 2
    assert summary["decision"]["stopped"] is None and not summary["winner"]["beats_published"]


FAILING = """\
experiment: failing
model: {model}
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160, complementary: {model}}}
families:   # the three published points run first, in this order
  petabyte: {{loss: dclr, space: {{k: {{type: categorical, choices: [1.0e+13]}}}}, published: {{k: 1.0e+13}}}}
  blowup: {{loss: dclr, published: {{k: 1.0, lr: 1.0e+30}},
           space: {{k: {{type: categorical, choices: [1.0]}}, lr: {{type: categorical, choices: [1.0e+30]}}}}}}
  paper: {{loss: dclr, space: {{k: {{type: categorical, choices: [1.0]}}}}, published: {{k: 1.0}}}}
search: {{num_samples: 3, seed: 0, test_eval: none, scheduler: {{name: fifo}}}}
resources: {{workers: 1, cpus_per_worker: 2}}
"""


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(600)
def test_a_trial_that_raises_and_one_that_diverges_are_recorded_as_failed_and_the_search_goes_on(
        tmp_path, tiny_bert_dir, ray_session, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Two configurations that pass validation yet fail when they run, and one that does not:
    # - `petabyte` raises: DCLR with k = 1e13 noise negatives a row asks for a petabyte, which no machine allocates
    #   (only running the trial finds that out; a batch the data cannot hold, say, is refused before the search
    #   starts). Tune retries it once (FailureConfig).
    # - `blowup` diverges: lr 1e30 blows the weights up to inf within a step or two.
    space = tmp_path / "failing.yaml"
    space.write_text(FAILING.format(model=tiny_bert_dir))
    assert main(search_args(tmp_path, space, "--no-confirm")) == 0
    _, children = runs_of(MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"), "failing")
    runs = {json.loads(r.data.tags["raycse.config_key"])["family"]: r for r in children}
    assert len(children) == 3 and sorted(runs) == ["blowup", "paper", "petabyte"]
    assert runs["petabyte"].info.status == "FAILED" and runs["petabyte"].data.tags["raycse.status"] == "failed"
    assert "allocate" in runs["petabyte"].data.tags["raycse.error"]
    assert runs["blowup"].info.status == "FAILED" and runs["blowup"].data.tags["raycse.status"] == "diverged"
    assert "non-finite" in runs["blowup"].data.tags["raycse.error"]
    assert runs["paper"].info.status == "FINISHED" and runs["paper"].data.tags["raycse.status"] == "finished"


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(900)
def test_the_benchmark_strategies_a_hand_grid_and_a_budget_of_training_steps(tmp_path, tiny_bert_dir, ray_session,
                                                                            monkeypatch):
    """What benchmarks/search_quality.py compares: a Tune grid trains exactly its points; a step budget ends the
    random search's stage once its trials' steps add up to it (here 6 = one 4-step trial and half of the next)."""
    from raycse.driver.run import run_search
    from raycse.driver.state import BenchmarkHook, SearchOptions
    from raycse.settings.space import load_space

    monkeypatch.chdir(tmp_path)
    space = load_space(write_space(tmp_path, tiny_bert_dir, "strategies", num_samples=8, test_eval="none"))

    def search(experiment: str, **strategy):
        options = SearchOptions(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", confirm=False,
                                storage_path=str(tmp_path / "ray"), budget="full", max_concurrent=1, **strategy)
        outcome = run_search(dataclasses.replace(space, experiment=experiment), options, log=lambda line: None)
        return [t for t in outcome.trials if t.stage == "search"]

    grid = search("grid", benchmark=BenchmarkHook(grid={"tau": [0.05, 0.1], "m": [0.2]}))
    assert sorted((t.params["tau"], t.params["m"]) for t in grid) == [(0.05, 0.2), (0.1, 0.2)]
    assert all(t.steps == 4 and t.optuna_number is None for t in grid)  # no Optuna study behind a grid

    budgeted = search("budget", benchmark=BenchmarkHook(sampler="random", max_total_steps=6))
    assert len(budgeted) < 8 and sum(t.steps for t in budgeted) == 6
    first = min(budgeted, key=lambda t: t.ended_at)
    assert first.params == {"tau": 0.07, "m": 0.3} and first.steps == 4  # the published point first, in full


# ------------------------------------------------------------------------------------------------ resuming
def start_cli(args: list[str], log: Path, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "raycse", *args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env, cwd=cwd, start_new_session=True)


def kill_when(driver: subprocess.Popen, log: Path, ready, timeout: float = 500, after: float = 0.0) -> str:
    """SIGKILL the driver and the Ray runtime it started `after` seconds after `ready(log text)` holds."""
    deadline = time.time() + timeout
    while time.time() < deadline and driver.poll() is None and not ready(log.read_text()):
        time.sleep(0.05)
    time.sleep(after)
    text = log.read_text()
    assert driver.poll() is None, "the search ended before it could be killed:\n" + text[-3000:]
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    return text


def snapshot_names_newest_checkpoints(experiment: Path) -> bool:
    """Whether Tune's newest snapshot of `experiment` names, for every trial with a checkpoint on disk, that trial's
    newest checkpoint (so that a kill now leaves nothing for --resume to miss)."""
    snapshots = sorted(experiment.glob("experiment_state-*.json"))
    if not snapshots:
        return False
    try:
        trials = json.loads(snapshots[-1].read_text())["trial_data"]
    except (OSError, ValueError, KeyError):
        return False  # being replaced
    named = {}
    for trial_json, run_json in trials:
        trial_id = re.search(r'"trial_id": "([^"]+)"', trial_json).group(1)
        named[trial_id] = {int(n) for n in re.findall(r"checkpoint_(\d{6})", run_json)}
    newest_on_disk = {}
    for path in experiment.glob("run_trial_*/checkpoint_*"):
        trial_id = next((t for t in named if path.parent.name.startswith(f"run_trial_{t}_")), None)
        newest_on_disk[trial_id] = max(newest_on_disk.get(trial_id, -1), int(path.name.split("_")[1]))
    return bool(newest_on_disk) and all(trial_id in named and newest in named[trial_id]
                                        for trial_id, newest in newest_on_disk.items())


def resume(args: list[str], cwd: Path) -> str:
    resumed = subprocess.run([sys.executable, "-m", "raycse", *args, "--resume"], capture_output=True, text=True,
                             timeout=600, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming search" in resumed.stdout
    return resumed.stdout


def finished_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "finished: best objective" in line]


@pytest.mark.timeout(1200)
def test_resume_during_the_judging_stage(tmp_path, tiny_bert_dir):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # 60 steps: on the small dev file a tiny trial takes about 40 ms a step (an evaluation and a checkpoint every
    # 2), so the kill below (polled every 50 ms from the judging trial's first evaluation) finds it still running
    space = write_space(tmp_path, tiny_bert_dir, "judge-kill", num_samples=2, test_eval="none", steps=60,
                        objective=small_dev_file(tmp_path))
    args = search_args(tmp_path, space)
    # Killed mid-trial in the judging stage, once Tune's snapshot names the newest checkpoint on disk, so that the
    # step the trial goes on from is known (tests/test_checkpoint_recovery.py covers a kill in the instant between
    # Tune replacing a trial's checkpoint and its next snapshot).
    before = kill_when(start_cli(args, tmp_path / "first.log", tmp_path), tmp_path / "first.log",
                       lambda text: any(" judge " in line and " step      2 " in line for line in text.splitlines())
                       and snapshot_names_newest_checkpoints(tmp_path / "ray" / "judge-kill-judge"))
    search_trials = {line.split()[1] for line in finished_lines(before)}
    interrupted = next(line.split()[1] for line in before.splitlines() if " judge " in line and " step " in line)

    after = resume(args, tmp_path)
    assert not [line for line in after.splitlines() if " search " in line and " step " in line]  # search stage: done
    # the runs the kill left open: said to go on under the same runs, which the checks below find they did
    resumed_line = next(line for line in after.splitlines() if line.startswith("Resuming search"))
    assert "trial run(s) the stopped search left open go on under the same MLflow run(s)" in resumed_line
    reached = max(int(line.split(" step ")[1].split()[0]) for line in before.splitlines()
                  if line.startswith(f"trial {interrupted} ") and " step " in line)
    steps = [int(line.split(" step ")[1].split()[0]) for line in after.splitlines()
             if line.startswith(f"trial {interrupted} ") and " step " in line]
    # it went on from a checkpoint of the first run (at most one evaluation before the kill), not from step 0
    assert steps and steps[0] > 2 and steps[0] >= reached, after

    client = MlflowClient(tracking_uri=uri)
    parent, children = runs_of(client, "judge-kill")
    assert {r.data.tags["raycse.trial_id"] for r in children if r.data.tags["raycse.stage"] == "search"} == \
        search_trials
    judge_runs = [r for r in children if r.data.tags["raycse.stage"] == "judge"]
    assert judge_runs and all(r.data.tags["raycse.status"] == "finished" for r in judge_runs)
    assert len({(r.data.tags["raycse.config_key"], r.data.tags["raycse.seed"]) for r in judge_runs}) == \
        len(judge_runs)  # no configuration-seed pair ran twice
    summary = summary_of(client, parent, tmp_path)
    assert all(c["judge"]["n"] == 2 for c in summary["decision"]["configs"] if c["judge"])
    assert parent.data.metrics["best_objective"] == pytest.approx(summary["winner"]["mean"])


@pytest.mark.timeout(1500)
def test_kills_in_the_baseline_the_search_and_the_choosing_stage_lose_and_repeat_nothing(tmp_path, tiny_bert_dir,
                                                                                         monkeypatch):
    """One search killed three times (SIGKILL to the driver and its Ray), each `--resume` going on from where the kill
    left it:
    1. while the baseline (the untouched model's objective and test tasks) is scored beside the first search trial,
       before Tune's first snapshot of the search stage: the stage starts anew (restoring Tune's tuner.pkl alone
       would run 1 of the 3 trials);
    2. in the search stage, just after a trial's completion was recorded in MLflow: that trial is never trained
       again, even when Tune's own state predates its completion;
    3. in the choosing stage.
    Nothing is lost or repeated: the study, MLflow and the answer agree at the end."""
    import optuna

    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path / "cache"))  # empty: the baseline is scored, not reused
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = write_space(tmp_path, tiny_bert_dir, "chain-kill", num_samples=3, objective=small_dev_file(tmp_path),
                        confirm="{top_k: 2, choose_seeds: 1, judge_seeds: 2, test_seeds: 1}")
    args = search_args(tmp_path, space)
    first = kill_when(start_cli(args, tmp_path / "first.log", tmp_path), tmp_path / "first.log",
                      lambda text: "baseline: scoring the untouched model" in text
                      and (tmp_path / "ray" / "chain-kill" / "tuner.pkl").is_file())
    assert "baseline (the untouched model" not in first  # killed before its figures came back

    second = kill_when(start_cli([*args, "--resume"], tmp_path / "second.log", tmp_path), tmp_path / "second.log",
                       lambda text: len(finished_lines(text)) >= 1)
    assert "Resuming search" in second
    done = finished_lines(second)[0].split()[1]  # the trial whose completion MLflow recorded just before the kill

    choosing_checkpoints = (tmp_path / "ray").glob
    third = kill_when(start_cli([*args, "--resume"], tmp_path / "third.log", tmp_path), tmp_path / "third.log",
                      lambda text: "Choosing:" in text and any(choosing_checkpoints("*-choose*/*/checkpoint_*")),
                      after=0.5)
    assert "Resuming search" in third
    assert not [line for line in third.splitlines() if line.startswith(f"trial {done} ") and " step " in line], \
        f"trial {done} trained again after --resume:\n{third}"

    after = resume(args, tmp_path)
    assert not [line for line in after.splitlines() if " search " in line and " step " in line]  # search: done
    assert "baseline (the untouched model" in second + third + after  # scored afresh after the first kill
    client = MlflowClient(tracking_uri=uri)
    parent, children = runs_of(client, "chain-kill")
    assert parent.info.status == "FINISHED"
    by_stage = {stage: [r for r in children if r.data.tags["raycse.stage"] == stage]
                for stage in ("search", "choose", "judge")}
    assert len(children) == sum(len(runs) for runs in by_stage.values())
    trial_ids = [r.data.tags["raycse.trial_id"] for r in by_stage["search"]]
    assert len(trial_ids) == 3 == len(set(trial_ids))  # no lost and no duplicated search trial
    assert len(by_stage["choose"]) == 2 and {r.data.tags["raycse.seed"] for r in by_stage["choose"]} == {"43"}
    assert by_stage["judge"] and {r.data.tags["raycse.seed"] for r in by_stage["judge"]} == {"44", "45"}
    keys = [(r.data.tags["raycse.stage"], r.data.tags["raycse.config_key"], r.data.tags["raycse.seed"])
            for r in children]
    assert len(set(keys)) == len(keys)  # no configuration ran twice on one seed in one stage
    assert all(r.info.status == "FINISHED" and r.data.tags["raycse.status"] == "finished" for r in children)
    finished_run = next(r for r in children if r.data.tags["raycse.trial_id"] == done)
    assert [m.step for m in client.get_metric_history(finished_run.info.run_id, "objective")] == [2, 4]

    study = optuna.load_study(study_name="chain-kill", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert sorted(t.user_attrs["ray_trial_id"] for t in study.trials if t.state.name == "COMPLETE") == sorted(trial_ids)
    # Exact accounting of the trials a kill lost (none, when Tune's snapshot had recorded every started trial): each
    # lost trial's Optuna trial is failed, and its MLflow run (if the kill left one) tagged `lost` and deleted; no
    # other trial exists, in either store. The first kill's Optuna trials, if any, are among them.
    lost = {t.user_attrs.get("ray_trial_id") for t in study.trials} - set(trial_ids)
    assert {t.user_attrs.get("ray_trial_id"): t.state.name for t in study.trials if t.state.name != "COMPLETE"} == \
        dict.fromkeys(lost, "FAIL")
    deleted = client.search_runs([client.get_experiment_by_name("chain-kill").experiment_id],
                                 run_view_type=ViewType.DELETED_ONLY)
    assert all(r.data.tags["raycse.trial_id"] in lost and r.data.tags["raycse.status"] == "lost" for r in deleted)
    print(f"trials lost to the kills and replaced: {len(lost)}")  # shown with -s
    summary = summary_of(client, parent, tmp_path)
    assert summary["baseline"]["objective"] is not None and "avg" in summary["baseline"]["test"]
    assert all(c["judge"]["n"] == 2 for c in summary["decision"]["configs"] if c["judge"])


@pytest.mark.timeout(900)
def test_ctrl_c_in_the_search_stage_ends_the_search_with_exit_130_and_resume_finishes_it(tmp_path, tiny_bert_dir):
    """Ctrl-C while search trials run: Tune stops its experiment gracefully, and the search ends there (exit 130, one
    line), instead of going on to choose and judge with the trials it had; `--resume` then finishes it."""
    space = write_space(tmp_path, tiny_bert_dir, "ctrl-c", num_samples=2, test_eval="none", steps=80,
                        objective=small_dev_file(tmp_path))
    args = search_args(tmp_path, space)
    log = tmp_path / "first.log"
    driver = start_cli(args, log, tmp_path)
    deadline = time.time() + 500
    while time.time() < deadline and driver.poll() is None and " search " not in log.read_text():
        time.sleep(0.05)
    driver.send_signal(signal.SIGINT)  # to the command alone, as `kill -INT` does
    assert driver.wait(timeout=300) == 130, log.read_text()[-3000:]
    text = log.read_text()
    assert text.strip().splitlines()[-1] == "raycse: interrupted" and "Traceback" not in text
    assert "Choosing:" not in text and "Judging:" not in text and "finished: best objective" not in text

    after = resume(args, tmp_path)
    assert "Judging:" in after
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent, children = runs_of(client, "ctrl-c")
    assert parent.info.status == "FINISHED"
    assert len([r for r in children if r.data.tags["raycse.stage"] == "search"]) == 2


def test_resume_without_a_search_is_a_clean_error(tmp_path, tiny_bert_dir, capsys):
    space = write_space(tmp_path, tiny_bert_dir, "nothing", num_samples=1)
    assert main(search_args(tmp_path, space, "--resume")) == 2
    assert "no search to resume" in capsys.readouterr().err


@pytest.mark.timeout(1200)
def test_two_searches_at_once_share_one_mlflow_store(tmp_path, tiny_bert_dir):
    """The second search without warm workers (`--no-warm-workers`: its trials train in Tune's trial process itself),
    the first with them: both record the same things."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    drivers = []
    for name, extra in (("first", []), ("second", ["--no-warm-workers"])):
        space = write_space(tmp_path, tiny_bert_dir, name, num_samples=2, test_eval="none",
                            objective=small_dev_file(tmp_path))
        args = search_args(tmp_path, space, "--no-confirm", *extra)
        args[args.index("--storage-path") + 1] = str(tmp_path / f"ray-{name}")  # each flag once
        drivers.append((start_cli(args, tmp_path / f"{name}.log", tmp_path), tmp_path / f"{name}.log"))
    for driver, log in drivers:
        assert driver.wait(timeout=900) == 0, log.read_text()[-3000:]
    client = MlflowClient(tracking_uri=uri)
    for name in ("first", "second"):
        parent, children = runs_of(client, name)
        assert parent.info.status == "FINISHED" and len(children) == 2
        assert all(r.info.status == "FINISHED" for r in children)
        assert all(len(client.get_metric_history(r.info.run_id, "objective")) == 2 for r in children)
        # --no-confirm: a winner is named, but no figure judged it, so none is logged as if one had
        assert parent.data.tags["raycse.winner"] and "best_objective" not in parent.data.metrics
        # where each report's training ran (as the trials reported it to Tune), against Tune's trial process (the
        # `pid` Tune adds): a warm worker's process, or, without warm workers, Tune's trial process itself
        reports = [json.loads(line) for path in (tmp_path / f"ray-{name}").rglob("result.json")
                   for line in path.read_text().splitlines() if line.strip()]
        in_tune_s_process = {report[TRIAL_PROCESS] == report["pid"] for report in reports}
        assert reports and in_tune_s_process == {name == "second"}, reports


@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.timeout(900)
def test_a_dclr_search_trains_its_complementary_model_first_and_logs_what_phi_and_k_do(tmp_path, tiny_bert_dir,
                                                                                     ray_session, monkeypatch):
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "dclr.yaml"
    space.write_text(f"""\
experiment: tiny-dclr
model: {tiny_bert_dir}
loss: dclr
objective: sts_dev_avg
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160}}
space: {{phi: {{type: uniform, low: 0.2, high: 0.9}}}}
published: {{phi: 0.9}}
search: {{num_samples: 1, test_eval: none, scheduler: {{name: fifo}}}}
resources: {{workers: 1, cpus_per_worker: 2}}
""")
    assert main(search_args(tmp_path, space, "--no-confirm")) == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    _, children = runs_of(client, "tiny-dclr")
    stages = {r.data.tags["raycse.stage"]: r for r in children}
    assert set(stages) == {"stage0", "search"}
    # the complementary model: SimCSE on SimCSE's recipe (lr 3e-5, STS-B dev) at the search's scale (batch 8, 4 steps)
    stage0 = stages["stage0"].data.params
    assert (stage0["loss"], stage0["objective"], float(stage0["lr"])) == ("simcse", "stsb_dev", 3e-5)
    assert (stage0["batch_size"], stage0["max_steps"], stage0["eval_steps"]) == ("8", "4", "2")
    trial = stages["search"]
    assert trial.data.params["complementary"].endswith("/best")  # stage 0's checkpoint, not the start weights
    assert trial.data.params["objective"] == "sts_dev_avg"
    for metric in ("loss/dclr_removed_fraction", "loss/dclr_noise_logit", "stsb_dev", "sickr_dev"):
        assert [m.step for m in client.get_metric_history(trial.info.run_id, metric)] == [2, 4], metric
