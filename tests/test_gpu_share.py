"""`resources.gpus_per_worker: auto`: how many trials share a GPU, from the steps recorded with 1, 2, 4 and 8 trials
on one (raycse/settings/gpu_share.py), made a number by the search's plan for the cluster it runs on; a file's own
number always wins."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from raycse.driver.layout import gpu_share, model_shape, space_to_run
from raycse.driver.state import BenchmarkHook
from raycse.settings.gpu_share import GPU_STEPS, GpuStep, trials_per_gpu
from raycse.settings.space import load_space

NO_FLAGS = SimpleNamespace(num_samples=None, max_concurrent=None, seed=None, benchmark=BenchmarkHook(), confirm=True,
                           choose_seeds=None, judge_seeds=None)
H100 = {"GPU": 1.0, "CPU": 16.0}  # the machine the GPU suite runs on


def test_the_recorded_steps_give_two_bert_base_trials_a_gpu_and_eight_minilm_ones():
    # BERT-base, batch 64: 64.4 -> 87.8 steps/s from 1 to 2 trials (+36%), 93.4 at 4 (+6%): throughput stops rising
    bert = trials_per_gpu("bert-base", 64, 32)
    assert bert.trials == 2 and bert.gpus_per_worker == 0.5 and "+6%, under +10%" in bert.why
    # MiniLM, batch 64 (eager): +103%, +73%, +30% from 1 to 8; 8 is the most measured, so never more
    minilm = trials_per_gpu("minilm", 64, 32)
    assert minilm.trials == 8 and "step-speed/2026-11-22-h100/concurrent.json" in minilm.why
    # the CPUs beside a GPU bound it: 5 trials' worth keeps 4 (the measured point below)
    assert trials_per_gpu("minilm", 64, 32, most=5).trials == 4
    assert trials_per_gpu("minilm", 64, 32, most=1).trials == 1
    # a batch, a length or a shape with no step recorded at several trials a GPU: one a GPU, and the words say so
    assert trials_per_gpu("bert-base", 512, 32).trials == 1
    unknown = trials_per_gpu(None, 64, 32)
    assert unknown.trials == 1 and "no step recorded" in unknown.why and "gpus_per_worker" in unknown.why
    assert trials_per_gpu("minilm", 64, 128).trials == 1


def test_the_rule_stops_where_throughput_stops_rising_or_memory_runs_out():
    flat = GpuStep("minilm", 64, 32, {1: 10.0, 2: 11.0, 4: 20.0, 8: 30.0}, None, False, "a record")
    # steps/s: 100, 181.8 (+82%), 200 (+10.0%: not under the threshold), 266.7 (+33%)
    assert trials_per_gpu("minilm", 64, 32, records=(flat,)).trials == 8
    barely = dataclasses.replace(flat, shared_ms={1: 10.0, 2: 11.0, 4: 20.3, 8: 10.0})  # +8.4% at 4: stop at 2
    assert trials_per_gpu("minilm", 64, 32, records=(barely,)).trials == 2
    heavy = dataclasses.replace(flat, trial_gib=15.0)  # 4 x 15 GiB fit 90% of 79.6 GiB; 8 do not
    choice = trials_per_gpu("minilm", 64, 32, records=(heavy,))
    assert choice.trials == 4 and "would not fit" in choice.why
    # the figures the rule reads are the records' own
    assert {(r.shape, r.batch_size): r.shared_ms for r in GPU_STEPS}[("bert-base", 64)] == {1: 15.53, 2: 22.79,
                                                                                            4: 42.84}


def test_the_plan_makes_auto_a_number_for_its_cluster_and_a_files_number_wins(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    focal = load_space("focal")
    assert focal.resources.gpus_per_worker == "auto"
    assert space_to_run(focal, NO_FLAGS, "full", H100).resources.gpus_per_worker == 0.125
    # four CPUs beside the GPU feed two trials of focal's two CPUs each
    assert space_to_run(focal, NO_FLAGS, "full", {"GPU": 1.0, "CPU": 4.0}).resources.gpus_per_worker == 0.5
    assert space_to_run(focal, NO_FLAGS, "full", {"CPU": 16.0}).resources.gpus_per_worker == 0.0  # no GPU
    assert space_to_run(focal, NO_FLAGS, "cpu", H100).resources.gpus_per_worker == 0  # the CPU budget's own 0
    assert space_to_run(focal, NO_FLAGS, "paper", H100).resources.gpus_per_worker == 0.5  # BERT-base: two a GPU
    # a driver that joined a cluster may see no GPU until a trial asks for one (an autoscaler starting from zero):
    # the CPUs beside its GPUs unknown, at most four trials a GPU, the fixed share before `auto`
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert space_to_run(focal, NO_FLAGS, "full", {"CPU": 16.0}).resources.gpus_per_worker == 0.25
    assert space_to_run(focal, NO_FLAGS, "full", {"GPU": 8.0, "CPU": 96.0}).resources.gpus_per_worker == 0.25  # p4d
    assert space_to_run(focal, NO_FLAGS, "full", {"GPU": 8.0, "CPU": 192.0}).resources.gpus_per_worker == 0.125
    monkeypatch.delenv("RAY_ADDRESS")
    # a file's own number is never replaced
    dclr = load_space("dclr")
    assert space_to_run(dclr, NO_FLAGS, "full", H100).resources.gpus_per_worker == 0.25
    stated = dataclasses.replace(focal, resources=dataclasses.replace(focal.resources, gpus_per_worker=1.0))
    assert space_to_run(stated, NO_FLAGS, "full", H100).resources.gpus_per_worker == 1.0
    # a trial of several workers never shares a GPU
    two = dataclasses.replace(focal, resources=dataclasses.replace(focal.resources, workers=2))
    assert gpu_share(two, H100).trials == 1


def test_a_models_shape_is_read_from_its_configuration(tiny_bert_dir, tmp_path):
    assert model_shape("minilm") == "minilm"
    assert model_shape("bert-base-uncased") == "bert-base"  # the paper budgets' model, known without the hub
    assert model_shape(str(tiny_bert_dir)) == "tiny"  # 32 wide, 2 deep: `raycse bench`'s tiny shape
    assert model_shape("someone/some-model") is None  # a hub id: nothing read, nothing fetched
    folder = tmp_path / "wide"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 768, "num_hidden_layers": 12}))
    assert model_shape(str(folder)) == "bert-base"
    (folder / "config.json").write_text("{not json")
    assert model_shape(str(folder)) is None


@pytest.mark.parametrize("name", ["focal", "barlow", "imsimcse", "all"])
def test_the_shipped_minilm_files_at_batch_64_leave_the_share_to_the_records(name):
    space = load_space(name)
    assert space.resources.gpus_per_worker == "auto" and space.base.batch_size == 64
    assert gpu_share(space, H100).trials == 8


def _record(shared_ms: dict, shape: str = "minilm", batch_size: int = 64, **extra) -> dict:
    return {"shape": shape, "batch_size": batch_size, "seq_len": 32, "compile": False, "device": "a test GPU",
            "device_gib": 24.0, "trial_gib": None, "shared_ms": {str(k): v for k, v in shared_ms.items()}, **extra}


def test_a_users_own_record_comes_before_the_shipped_ones(tmp_path, monkeypatch):
    from raycse.settings.gpu_share import share_record_path, share_records

    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path))
    assert share_records() == () and trials_per_gpu("minilm", 64, 32).trials == 8
    path = share_record_path("minilm", 64, 32, compiled=False)
    path.parent.mkdir(parents=True)
    # measured on the user's GPU: a second trial adds 5% (1 -> 2: 100 -> 105 steps/s), so one a GPU, not eight
    path.write_text(json.dumps(_record({1: 10.0, 2: 19.05})))
    choice = trials_per_gpu("minilm", 64, 32)
    assert choice.trials == 1 and "a test GPU" in choice.why and str(path) in choice.why
    # the dry run prices the step of the same record: one trial's 10 ms on the user's GPU, not the H100's 26.80 ms
    import raycse

    plan = raycse.plan("focal", gpus=1, budget="full")
    assert plan.concurrent == 1 and plan.step_ms == pytest.approx(10.0) and "a test GPU" in plan.rates.step.source
    # its memory bounds the share against its own GPU's: 3 x 7 GiB fit 90% of 24 GiB, 4 do not
    path.write_text(json.dumps(_record({1: 10.0, 2: 10.0, 4: 10.0}, trial_gib=7.0)))
    assert trials_per_gpu("minilm", 64, 32).trials == 2
    # a file that cannot be read is left out, never fatal: the shipped record serves again
    path.write_text("{not json")
    assert share_records() == () and trials_per_gpu("minilm", 64, 32).trials == 8


@pytest.mark.slow
def test_bench_share_measures_the_trials_a_gpu_and_auto_reads_what_it_kept(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    env = {**os.environ, "RAYCSE_CACHE_DIR": str(tmp_path),
           "RAY_OVERRIDE_RESOURCES": '{"GPU": 1, "CPU": 2}'}  # a fake GPU: Ray shares it out, the trials run on CPUs
    done = subprocess.run([sys.executable, "-m", "raycse", "bench", "--share", "--share-most", "2", "--shape", "tiny",
                           "--batch-size", "8", "--seq-len", "16", "--steps", "3", "--warmup", "1", "--no-compile"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    [path] = (tmp_path / "gpu-share").glob("*.json")
    record = json.loads(path.read_text())
    assert record["shape"] == "tiny" and record["batch_size"] == 8 and record["seq_len"] == 16
    assert set(record["shared_ms"]) <= {"1", "2"} and "1" in record["shared_ms"]
    assert [run["concurrent"] for run in record["runs"]] == [int(k) for k in record["shared_ms"]]
    assert all(len(run["trials"]) == run["concurrent"] for run in record["runs"])
    assert f"kept in {path}" in done.stdout and "gpus_per_worker: auto now gives" in done.stdout
    monkeypatch.setenv("RAYCSE_CACHE_DIR", str(tmp_path))  # a search's plan reads it from the same cache folder
    assert str(path) in trials_per_gpu("tiny", 8, 16).why
    # without a GPU in the Ray cluster it is refused in one line
    env["RAY_OVERRIDE_RESOURCES"] = '{"GPU": 0, "CPU": 2}'
    refused = subprocess.run([sys.executable, "-m", "raycse", "bench", "--share", "--shape", "tiny"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and refused.stderr.strip().startswith("raycse: error: --share: the Ray cluster")
    assert "Traceback" not in refused.stderr


def test_a_trials_recorded_gpu_memory_is_its_records():
    import csv
    from pathlib import Path

    from raycse.settings.gpu_share import H100_PAPER, H100_WARM_SEARCH_GPU, recorded_step

    root = Path(__file__).resolve().parent.parent
    with (root / H100_WARM_SEARCH_GPU).open() as handle:  # nvidia-smi every 2 s through the focal search, 4 a GPU
        peak_mib = max(int(row[" memory.used [MiB]"].split()[0]) for row in csv.DictReader(handle))
    assert recorded_step("minilm", 64, 32).trial_gib == pytest.approx(peak_mib / 4 / 1024)
    runs = json.loads((root / H100_PAPER / "paper.json").read_text())["runs"]
    assert recorded_step("bert-base", 64, 32).trial_gib == pytest.approx(
        max(run["measured"]["gpu_trial_peak_mib"] for run in runs) / 1024)
