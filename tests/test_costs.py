"""The cost model (raycse/planning/cost_model.py) against the runs it must predict, the figures it reads against the
records they come from, the rules of its terms, and docs/costs.md as scripts/cost_tables.py writes it from it.

The runs, fed the trials each stage ran: the full focal budget on one H100 (2026-11-26: 185 s, before warm workers;
later the same day 137 s with them and 181 s without, back to back) and the CPU main job (2026-11-26: 334 s). The
H100 predictions use figures recorded on 2026-11-22 (another search, another day), and the warm run's start-up;
the CPU one is fed the run's own step and evaluation seconds (the record a CPU dry run of MiniLM prices its step
from: raycse/planning/cpu_steps.py) and takes the rest from the model's figures.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

import raycse
from raycse.errors import ConfigError
from raycse.planning import cost_figures as figures
from raycse.planning.cost_model import (
    WRITE_COPIES,
    Block,
    Figure,
    SearchCost,
    StageCost,
    Trial,
    asha_rungs,
    asha_trials,
    slot_seconds,
)
from raycse.settings.space import load_space

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
H100_RUN = RESULTS / "search-wall-clock/2026-11-26-h100" / "search.json"
CPU_TEXT = RESULTS / "quick-start-cpu/2026-11-26-cpu2" / "mainjob-after.txt"
CPU_RUN = RESULTS / "quick-start-cpu/2026-11-26-cpu2"
TRIAL_TERMS = ("trial_startup_s", "trial_compile_s", "trial_train_s", "trial_eval_s", "trial_checkpoint_s")


def _script():
    spec = importlib.util.spec_from_file_location("cost_tables", ROOT / "scripts" / "cost_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _four_a_gpu(name: str):
    """The space as the recorded H100 runs ran it: four trials a GPU (before `gpus_per_worker: auto`)."""
    space = load_space(name)
    return dataclasses.replace(space, resources=dataclasses.replace(space.resources, gpus_per_worker=0.25))


def _busy(cost: SearchCost) -> float:
    return sum(stage.seconds(cost.rates, cost.slots)[1] for stage in cost.stages)


# ------------------------------------------------------------------------------------------ the two runs
def test_fed_the_trials_that_ran_the_model_predicts_the_h100_run_within_a_quarter():
    summary = json.loads(H100_RUN.read_text())
    timings, ran = summary["timings"], Counter(trial["stage"] for trial in summary["trials"])
    # the run, pinned: 185 s (setup 26, search 66, choose 50, judge 40); 31 trials; 4 slots; trials' terms summed
    assert round(timings["time_total_s"]) == 185 and dict(ran) == {"search": 16, "choose": 9, "judge": 6}
    assert [round(timings[f"time_{p}_s"]) for p in ("setup", "search", "choose", "judge")] == [26, 66, 50, 40]
    assert [round(timings[k]) for k in TRIAL_TERMS] == [181, 0, 184, 134, 25] and timings["concurrent_slots"] == 4

    # a GPU plan (recorded GPU figures, nothing measured here) of the file as it ran: the test tasks on every trial
    as_it_ran = dataclasses.replace(_four_a_gpu("focal"), test_eval="all")
    plan = raycse.plan(as_it_ran, gpus=1, budget="full", warm_workers=False)  # it ran before warm workers
    assert plan.concurrent == 4 and "recorded on an H100" in plan.rates.step.source
    cost = plan.cost.as_ran(dict(ran))
    assert cost.wall_seconds() == pytest.approx(timings["time_total_s"], rel=0.25)
    for stage in cost.stages:
        assert stage.seconds(cost.rates, cost.slots)[0] == pytest.approx(timings[f"time_{stage.name}_s"], rel=0.25)
    assert _busy(cost) == pytest.approx(sum(timings[k] for k in TRIAL_TERMS), rel=0.25)
    # fed nothing, the plan expects more judging runs than this run's (its first look stopped it), and at most 36
    assert plan.cost.wall_seconds() > cost.wall_seconds() and plan.cost.wall_seconds(expected=False) > \
        plan.cost.wall_seconds()


@pytest.mark.parametrize("part", ["search", "search-cold"])
def test_fed_the_trials_that_ran_the_model_predicts_the_warm_and_cold_h100_runs_within_a_quarter(part):
    """The same search on one H100 with warm workers (the default) and without, back to back (2026-11-26): the
    model, fed the trials each stage ran, gives both within a quarter, stage by stage."""
    summary = json.loads((RESULTS / "warm-workers/2026-11-26-h100" / f"{part}.json").read_text())
    timings, ran = summary["timings"], Counter(trial["stage"] for trial in summary["trials"])
    assert dict(ran) == {"search": 16, "choose": 9, "judge": 6}  # the run, pinned: 137 s warm, 181 s cold
    assert round(timings["time_total_s"]) == {"search": 137, "search-cold": 181}[part]
    plan = raycse.plan(_four_a_gpu("focal"), gpus=1, budget="full", warm_workers=part == "search")
    cost = plan.cost.as_ran(dict(ran))
    assert cost.wall_seconds() == pytest.approx(timings["time_total_s"], rel=0.25)
    for stage in cost.stages:
        assert stage.seconds(cost.rates, cost.slots)[0] == pytest.approx(timings[f"time_{stage.name}_s"], rel=0.25)


def test_fed_the_trials_that_ran_the_model_predicts_the_cpu_main_job_within_a_quarter(monkeypatch):
    from raycse.evaluation import untouched_cache

    # that run scored the untouched model beside its first trials: its cache was empty, and no figures were shipped
    monkeypatch.setattr(untouched_cache, "SHIPPED_DIR", CPU_RUN / "none-shipped")
    text = CPU_TEXT.read_text()
    line = next(line for line in text.splitlines() if line.startswith("Time: "))
    phases = {name: int(seconds) for name, seconds in re.findall(r"(\w+) (\d+) s", line)}
    total = int(re.match(r"Time: (\d+) s in all", line).group(1))
    # the run, pinned: 334 s (setup 9, search 149, judge 174); trials' terms summed 21/116/362/11 s; 2 slots
    assert total == 334 and [phases[p] for p in ("setup", "search", "judge")] == [9, 149, 174]
    assert [phases[p] for p in ("startup", "train", "eval", "checkpoint")] == [21, 116, 362, 11] and "of 2 slot" in line
    records = json.loads((CPU_RUN / "search_summary.json").read_text())["trials"]
    ran = Counter(trial["stage"] for trial in records)
    assert dict(ran) == {"search": 4, "judge": 4}
    # the run's own step and evaluation of STS-B dev (what a CPU dry run of MiniLM prices from: cpu_steps.CPU_STEPS)
    step = sum(t["timings"]["trial_train_s"] for t in records) / sum(t["steps"] for t in records)
    runs = [run for stage in json.loads((CPU_RUN / "trials.json").read_text())["stages"].values() for run in stage]
    dev = statistics.fmean(run["reports"][-1]["eval_s"] / len(run["reports"]) for run in runs)

    plan = raycse.plan("focal", gpus=0, step_ms=1000 * step)
    rates = figures.cpu_rates(Figure(step, "the run's"), Figure(dev, "the run's"), plan.weight_bytes, 11_914)
    cost = dataclasses.replace(plan.cost, rates=rates, slots=2).as_ran(dict(ran))
    assert cost.wall_seconds() == pytest.approx(total, rel=0.25)
    for stage in cost.stages:
        assert stage.seconds(cost.rates, cost.slots)[0] == pytest.approx(phases[stage.name], rel=0.25)
    assert _busy(cost) == pytest.approx(sum(phases[p] for p in ("startup", "train", "eval", "checkpoint")), rel=0.25)


def test_the_disk_rule_of_the_recorded_search_gives_what_its_folder_kept_within_a_quarter():
    """The CPU main job ran before a trial that ended lost its last/: its ASHA-stopped search trials kept theirs
    (disk.txt). Under that rule the model gives its folder's size; today's rule keeps best/ alone."""
    record = (ROOT / figures.CHECKPOINT_RECORD).read_text()
    measured = sum(int(line.split()[0]) for line in record.splitlines()
                   if line.endswith(("\tray_results", "\tmlruns")) and line.split()[0].isdigit())
    plan = raycse.plan("focal", gpus=0, step_ms=100.0)
    assert plan.weight_bytes == pytest.approx(90.9e6, rel=0.01)  # all-MiniLM-L6-v2's 22.7M parameters in float32
    then = dataclasses.replace(plan.cost, keep_last="stopped")
    assert then.end_disk_bytes() == pytest.approx(measured, rel=0.25)
    assert plan.cost.end_disk_bytes() == (8 + 1) * plan.weight_bytes  # best/ of its 8 trials, and the registered one
    kept = dataclasses.replace(plan.cost, keep_last="all")  # --keep-checkpoints
    assert kept.end_disk_bytes() > then.end_disk_bytes() and kept.peak_disk_bytes() >= kept.end_disk_bytes()


# ------------------------------------------------------------------------------------------ the GPU step
def test_a_gpu_plan_is_never_timed_on_this_cpu(monkeypatch):
    from raycse.planning import dry_run

    monkeypatch.setattr(dry_run, "measure", lambda *a, **k: pytest.fail("a GPU plan measured a CPU step"))
    plan = raycse.plan("focal", gpus=1, budget="full")  # auto: eight MiniLM trials a GPU, the step recorded with 8
    assert plan.step_ms == pytest.approx(46.94)
    assert "step-speed/2026-11-22-h100/concurrent.json" in plan.rates.step.source
    assert raycse.plan(_four_a_gpu("focal"), gpus=1, budget="full").step_ms == pytest.approx(30.46)
    alone = raycse.plan("focal", gpus=1, budget="full", max_concurrent=1)  # one trial on the GPU: its own step
    assert alone.step_ms == pytest.approx(26.80)
    given = raycse.plan("focal", gpus=8, budget="full", step_ms=50.0)
    assert given.step_ms == 50.0 and "--step-ms" in given.rates.step.source
    with pytest.raises(ConfigError, match=r"^step_ms: no recorded GPU step for a minilm-shaped model at batch 128"):
        raycse.plan("dclr", gpus=1, budget="full")  # DCLR's batch 128: no record, and no CPU stand-in for one


def test_the_shared_step_follows_the_records_and_the_device():
    minilm, bert = figures.GPU_STEPS[0], figures.GPU_STEPS[1]
    assert minilm.ms(4) == 30.46 and minilm.ms(16) == pytest.approx(2 * 46.94)  # beyond 8: in proportion
    assert bert.ms(1) == 15.53 and bert.ms(4) == 42.84  # measured inside trials sharing the GPU
    assert bert.ms(8) == pytest.approx(8 * 11.98)  # beyond: eight trials take turns on one device
    step, compile_ = figures.gpu_step("bert-base", 64, 32, 1, 15_625, None)
    assert step.value == pytest.approx(0.01553) and compile_.value == 40.0  # a paper-length trial compiles
    step, compile_ = figures.gpu_step("bert-base", 64, 32, 1, 186, None)
    assert step.value == pytest.approx(0.01553 * 2.5) and compile_.value == 0.0  # a short one runs eager


# ------------------------------------------------------------------------------------------ the terms
RATES = figures.gpu_rates(Figure(0.01, "a test's"), Figure(0.0, "eager"), figures.MINILM_WEIGHT_BYTES, 11_914)


def test_a_stage_lays_its_trials_on_its_slots_with_a_new_worker_for_each_slot_first():
    trial = Trial(100, 2, tests=False)
    cold, warm = trial.seconds(RATES, cold=True), trial.seconds(RATES, cold=False)
    assert cold - warm == pytest.approx(figures.GPU_WARM_WORKERS_START_S - figures.GPU_WARM_WORKERS_REUSED_S)
    wall, busy = slot_seconds([trial] * 9, 4, RATES)
    assert wall == pytest.approx(cold + 2 * warm) and busy == pytest.approx(4 * cold + 5 * warm)
    # the untouched model's scoring holds a slot from the start: the 4th trial waits for it, in a new worker; and the
    # stage waits for the scoring at its end
    assert slot_seconds([trial] * 4, 4, RATES, beside=5.0)[0] == pytest.approx(5.0 + cold)
    assert slot_seconds([trial], 4, RATES, beside=1000.0)[0] == 1000.0


def test_asha_stops_half_the_trials_at_each_rung_in_expectation():
    assert asha_rungs(186, 125, 2, 10**7) == [125] and asha_rungs(16, 16, 2, 17) == [16]
    trials = asha_trials(16, 186, 125, [125], 2, tests=True)
    assert sum(t.stopped for t in trials) == 8 and not trials[0].stopped  # the first passes: no result before it
    assert {(t.steps, t.evals, t.tests) for t in trials if t.stopped} == {(125, 1, False)}
    many = asha_trials(16, 15_625, 125, asha_rungs(15_625, 125, 2, 15_626), 2, tests=True)
    assert sum(not t.stopped for t in many) == 1 and sum(t.steps == 125 for t in many) == 8


def test_the_checkpoint_cadence_caps_what_a_long_trial_writes():
    long, short = Trial(15_625, 125), Trial(186, 2)
    every = dataclasses.replace(RATES, checkpoint_share=None)
    assert long.checkpoint_seconds(every, 100.0) == pytest.approx(125 * RATES.checkpoint.value)
    capped = long.checkpoint_seconds(RATES, 1000.0)
    assert capped == pytest.approx(2 * RATES.checkpoint.value + RATES.checkpoint_share * 1000.0)
    assert short.checkpoint_seconds(RATES, 10.0) == short.checkpoint_seconds(every, 10.0)  # first and last: all


def test_the_judging_looks_cost_each_block_by_the_chance_it_runs():
    from raycse.planning.judging_runs import expected_share, look_reach

    reach = look_reach((6, 9, 12, 18))
    assert reach[0] == 1.0 and all(a > b for a, b in zip(reach, reach[1:]))
    assert look_reach((18,)) == (1.0,)  # the fixed design
    trial = Trial(100, 2)
    stage = StageCost("judge", [Block([trial] * 12, [trial] * 12, reach[0]), Block([trial] * 6, [trial] * 6, reach[1])])
    assert stage.runs() == pytest.approx(12 + 6 * reach[1]) and stage.runs(expected=False) == 18
    # the pipeline simulation (failures, ASHA, choosing) measured 18.4-20.0 runs of 36 under the null (its record)
    record = json.loads((RESULTS / "judging-statistics" / "2026-11-25-cpu2" / "all-20000.json").read_text())
    simulated = [row["judging_runs"]["seq"] / 36 for row in record["rows"]
                 if row["space"] == "focal" and row["margin"] == 0.0 and "spread" not in row]
    assert len(simulated) >= 12 and expected_share((6, 9, 12, 18)) == pytest.approx(statistics.fmean(simulated),
                                                                                    rel=0.10)


# ------------------------------------------------------------------------------------------ the figures
def test_every_recorded_figure_is_its_record():
    h100 = json.loads((ROOT / figures.H100_SEARCH).read_text())
    trials = h100["trials"]
    starts = [t["timings"]["trial_startup_s"] for t in trials]
    assert figures.GPU_COLD_START_S == pytest.approx(statistics.fmean(s for s in starts if s > 5), abs=0.01)
    assert figures.GPU_WARM_START_S == pytest.approx(statistics.fmean(s for s in starts if s <= 5), abs=0.01)
    warm_run = json.loads((ROOT / figures.H100_WARM_SEARCH).read_text())
    warm = [t["timings"]["trial_startup_s"] for t in warm_run["trials"]]
    assert figures.GPU_WARM_WORKERS_START_S == pytest.approx(statistics.fmean(s for s in warm if s > 1), abs=0.01)
    assert figures.GPU_WARM_WORKERS_REUSED_S == pytest.approx(statistics.fmean(s for s in warm if s <= 1), abs=0.01)
    stopped = [t for t in trials if t["status"] != "finished"]  # one evaluation each, no test tasks
    dev = statistics.fmean(t["timings"]["trial_eval_s"] for t in stopped)
    assert figures.GPU_DEV_EVAL_STEPS == pytest.approx(dev / 0.03046, abs=0.01)
    evals = {t["trial_id"]: math.ceil(t["steps"] / 125) for t in trials}
    finished = [t["timings"]["trial_eval_s"] - evals[t["trial_id"]] * dev for t in trials if t["status"] == "finished"]
    assert figures.GPU_TEST_S == pytest.approx(statistics.fmean(finished), abs=0.01)
    write = sum(t["timings"]["trial_checkpoint_s"] for t in trials) / sum(evals.values())
    per_gb = WRITE_COPIES * figures.MINILM_WEIGHT_BYTES / 1e9
    assert figures.GPU_CHECKPOINT_S_PER_GB * per_gb == pytest.approx(write, abs=0.001)
    t = h100["timings"]
    assert (figures.GPU_SETUP_S, figures.GPU_TOKENIZE_S, figures.GPU_FINISH_S) == pytest.approx(
        (t["time_setup_s"], t["time_tokenize_s"], t["time_record_s"]), abs=0.01)
    overheads = json.loads((ROOT / figures.CPU_OVERHEADS).read_text())
    assert figures.CPU_COLD_START_S * 4 == pytest.approx(overheads["4_trials_reuse_actors_False_s"], abs=0.01)
    assert figures.CPU_WARM_START_S * 4 == pytest.approx(overheads["4_trials_reuse_actors_True_s"], abs=0.01)
    assert figures.CPU_TOKENIZE_S == pytest.approx(overheads["share_once_s"], abs=0.001)
    line = next(x for x in (ROOT / figures.CPU_SEARCH).read_text().splitlines() if x.startswith("Time: "))
    cpu = {name: int(seconds) for name, seconds in re.findall(r"(\w+) (\d+) s", line)}
    assert figures.CPU_CHECKPOINT_S_PER_GB * per_gb == pytest.approx(cpu["checkpoint"] / 16)  # 8 trials x 2 evals
    assert (figures.CPU_SETUP_S, figures.CPU_FINISH_S) == (cpu["setup"], cpu["record"] + cpu["report"])
    disk = (ROOT / figures.CHECKPOINT_RECORD).read_text()
    assert f"{figures.MINILM_WEIGHT_BYTES}\t" in disk and "best/model.safetensors" in disk


def test_every_recorded_gpu_step_is_its_record():
    for step in figures.GPU_STEPS:
        record = json.loads((ROOT / step.record).read_text())
        if isinstance(record, list):  # trials sharing a GPU: each trial's mean, by how many shared it
            rows = {row["concurrent"]: statistics.fmean(t["ms_per_step"] for t in row["trials"]) for row in record}
            assert {k: round(v, 2) for k, v in rows.items()} == step.shared_ms
            assert {row["compile"] for row in record} == {step.compiled}
            record = record[0]
        else:
            assert step.shared_ms == {1: round(record["ms_per_step"], 2)} and record["compile"] == step.compiled
            assert step.device_ms == round(record["profile"]["device_ms_per_step"], 2)
        assert (record["shape"], record["batch_size"], record["seq_len"]) == (step.shape, step.batch_size,
                                                                             step.seq_len)
        assert "H100" in record["device"]


# ------------------------------------------------------------------------------------------ the printed plan
def test_the_focal_full_budget_on_one_h100_prints_the_expected_wall_clock_and_the_fixed_designs_maximum():
    from raycse.planning.dry_run import format_dry_run

    plan = raycse.plan("focal", gpus=1, budget="full")
    text = format_dry_run(plan)
    wall = next(line for line in text.splitlines() if line.startswith("Wall clock: "))
    assert re.search(r"about [\d.]+ min expected \(the looks stop the judging after 19\.9 of its 36 runs with no true "
                     r"difference, from the looks' futility bounds and boundaries", wall), wall
    assert re.search(r"[\d.]+ min at most \(the fixed design's 36 judging runs, no trial stopped early\)", wall)
    # a few lines more than before, at most, and the paper's row as the answer will caption it
    assert "GPU-hours expected" in wall and len(text.splitlines()) <= 16 + len(plan.paper_rows) == 17


# ------------------------------------------------------------------------------------------ docs/costs.md
def test_the_cost_tables_are_the_model_of_the_shipped_space_files():
    script = _script()
    text = script.cost_tables()
    assert "| focal.yaml | full | 1 |" in text and "| focal.yaml | paper | 8 |" in text
    assert script.COSTS.read_text(encoding="utf-8") == text, "docs/costs.md is stale: run scripts/cost_tables.py"


def test_the_test_tasks_are_scored_where_the_answer_uses_them_and_the_dry_run_prices_each_choice():
    """By default (test_eval: best) the seven test tasks score the judging runs and the untouched model only; the dry
    run states what that costs against scoring every finished trial (all) or none."""
    from raycse.planning.dry_run import format_dry_run

    for name in ("focal", "simcse", "dclr", "all"):
        assert load_space(name).test_eval == "best", name
    run = raycse.plan("focal", gpus=1, budget="full")
    (all_wall, all_hours), (best_wall, best_hours), (none_wall, none_hours) = (
        run.test_eval_prices[choice] for choice in ("all", "best", "none"))
    assert run.test_eval == "best" and best_wall == pytest.approx(run.cost.wall_seconds())
    # under all, the 9 choosing runs are scored too, and the search trials that ASHA lets finish (of 16)
    scorings = (all_hours - best_hours) * 3600 / run.rates.test.value
    assert 9 < scorings < 25
    assert all_wall > best_wall > none_wall and all_hours > best_hours > none_hours
    line = next(line for line in format_dry_run(run).splitlines() if line.startswith("Test tasks:"))
    assert "test_eval: best, scored on the judging runs and the untouched model; instead, all (every finished " \
           "trial) +" in line and "; none (no run) -" in line
