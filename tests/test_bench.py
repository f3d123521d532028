"""`raycse bench` on the tiny random BERT, in process: the JSON it writes, its FLOP count, its one-line errors."""
from __future__ import annotations

import json
import math

import pytest

from raycse.bench.step import BenchOptions, pass_rows, step_flops
from raycse.cli import main
from raycse.encoder.row_dropout import ROW_DROPOUT_ATTENTION

HEADLINE_KEYS = ("shape", "loss", "batch_size", "seq_len", "device", "torch", "precision", "compile", "ms_per_step",
                 "sentences_per_s", "tflop_per_s", "mfu", "baseline", "speedup", "eval_seconds")


@pytest.fixture
def one_thread():
    """Timing figures are not under test: one intra-op thread keeps a shared CI core from stalling OpenMP."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_bench_tiny_writes_the_figures(tmp_path, capsys, one_thread):
    output = tmp_path / "b.json"
    status = main(["bench", "--shape", "tiny", "--batch-size", "16", "--steps", "5", "--output", str(output)])

    assert status == 0
    r = json.loads(output.read_text())
    assert all(key in r for key in HEADLINE_KEYS), set(HEADLINE_KEYS) - set(r)
    assert (r["shape"], r["loss"], r["batch_size"], r["seq_len"], r["steps"]) == ("tiny", "simcse", 16, 32, 5)
    assert r["ms_per_step"] > 0 and r["speedup"] > 0 and r["eval_seconds"] > 0
    assert math.isclose(r["sentences_per_s"], 16 * 1000.0 / r["ms_per_step"], rel_tol=1e-9)
    assert math.isclose(r["tflop_per_s"], r["flops_per_step"] / r["ms_per_step"] / 1e9, rel_tol=1e-9)
    baseline = r["baseline"]
    assert baseline["ms_per_step"] > 0
    assert math.isclose(baseline["sentences_per_s"], 16 * 1000.0 / baseline["ms_per_step"], rel_tol=1e-9)
    assert math.isclose(r["speedup"], baseline["ms_per_step"] / r["ms_per_step"], rel_tol=1e-9)
    assert (baseline["precision"], baseline["attention"]) == ("fp32", "eager")
    assert r["attention"] == ROW_DROPOUT_ATTENTION  # the trainer's: SDPA that can restrict dropout to rows
    if r["device"].startswith("CPU"):
        assert r["mfu"] is None and r["precision"] == "fp32" and r["compile"] is False
    assert r["eval_sentences"] > 1000
    printed = capsys.readouterr().out
    assert "ms/step" in printed and "speedup over baseline" in printed and "STS-B dev evaluation" in printed


def test_bench_no_eval_and_an_extra_pass_loss(tmp_path, one_thread):
    output = tmp_path / "b.json"
    status = main(["bench", "--shape", "tiny", "--loss", "imsimcse", "--batch-size", "4", "--steps", "1",
                   "--warmup", "1", "--seq-len", "12", "--no-eval", "--output", str(output)])

    assert status == 0
    r = json.loads(output.read_text())
    assert r["eval_seconds"] is None and r["loss"] == "imsimcse" and r["seq_len"] == 12
    assert r["rows_per_step"] == {"with_grad": 12, "no_grad": 0}  # 2N dropout rows + N dropout-off rows


def test_bench_profile_and_no_baseline(tmp_path, one_thread):
    output, table = tmp_path / "b.json", tmp_path / "profile.txt"
    status = main(["bench", "--shape", "tiny", "--batch-size", "4", "--steps", "2", "--warmup", "1", "--no-eval",
                   "--no-baseline", "--profile", str(table), "--output", str(output)])

    assert status == 0
    r = json.loads(output.read_text())
    assert r["baseline"] is None and r["speedup"] is None
    assert r["profile"]["profiled_steps"] == 5 and r["profile"]["ms_per_step_profiled"] > 0
    assert r["profile"]["table"] == str(table)
    text = table.read_text()
    assert "ms/step wall" in text.splitlines()[0] and "aten::" in text  # torch.profiler's operator table


def test_step_flops_follow_the_documented_formula():
    from raycse.bench.synthetic import bench_tokenizer, make_encoder
    from raycse.losses import build_loss

    encoder = make_encoder("tiny", bench_tokenizer(), "sdpa", seed=0)
    params = sum(p.numel() for p in encoder.backbone.encoder.parameters())
    assert params == 2 * (4 * (32 * 32 + 32) + 2 * 32 * 64 + 64 + 32 + 4 * 32)  # Q K V O, FFN, two LayerNorms
    per_token = 2 * params + 4 * 2 * 32 * 32
    assert step_flops(encoder, 32, *pass_rows(build_loss("simcse"), 16)) == 32 * per_token * 3 * 32
    assert pass_rows(build_loss("dclr"), 16) == (32, 16)
    assert pass_rows(build_loss("simcse-sup"), 16) == (48, 0)


@pytest.mark.parametrize("bad_arguments, culprit", [
    (["--shape", "nope"], "--shape"),
    (["--batch-size", "0"], "--batch-size: must be an integer >= 1, got 0"),
    (["--steps", "0"], "--steps"),
    (["--seq-len", "2"], "--seq-len"),
    (["--seq-len", "513"], "--seq-len"),
    (["--loss", "nope"], "unknown loss 'nope'"),
    (["--precision", "fp8"], "--precision"),
    (["--concurrent", "0"], "--concurrent"),
])
def test_bad_input_is_one_line_and_exit_2(bad_arguments, culprit, tmp_path, capsys):
    output = tmp_path / "b.json"
    status = main(["bench", *bad_arguments, "--output", str(output)])

    assert status == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and stderr.startswith("raycse: error: ") and culprit in stderr
    assert not output.exists()


def test_options_default_to_a_valid_minilm_run():
    assert BenchOptions().validate().shape == "minilm"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_concurrent_trials_through_ray(tmp_path):
    output = tmp_path / "c.json"
    status = main(["bench", "--concurrent", "2", "--shape", "tiny", "--batch-size", "8", "--steps", "3",
                   "--warmup", "1", "--output", str(output)])

    assert status == 0
    r = json.loads(output.read_text())
    assert r["concurrent"] == 2 and len(r["trials"]) == 2
    assert 0 < r["aggregate_sentences_per_s"] <= r["sum_of_trial_sentences_per_s"] * 1.01


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_each_cached_configuration_runs_in_a_process_of_its_own_forked_from_one_that_ends_with_the_bench():
    """`raycse bench --cached`: the four configurations of a loss, each measured in a process of its own (so that
    their peaks do not mix), none of them this one; a configuration that fails is named in the error, and the next
    one is still measured; the process they are forked from ends with the bench, leaving nothing running."""
    import os

    import psutil

    from raycse.bench.cached import CONFIGURATIONS, CachedBenchOptions, _configuration_processes, run_cached_bench

    before = {child.pid for child in psutil.Process().children(recursive=True)}
    result = run_cached_bench(CachedBenchOptions(shape="tiny", losses=("simcse",), batch_size=4, cached_batch_size=8,
                                                 steps=1, warmup=0, compile=False))
    (row,) = result["rows"]
    processes = [row[name]["process_id"] for name in CONFIGURATIONS]
    assert len(set(processes)) == 4 and os.getpid() not in processes
    assert all(row[name]["ms_per_step"] > 0 and row[name]["peak_mib"] >= row[name]["start_mib"] > 0
               for name in CONFIGURATIONS)
    assert row["memory_ratio"] == row["cached"]["peak_mib"] / row["uncached_small"]["peak_mib"]
    assert {child.pid for child in psutil.Process().children(recursive=True)} <= before

    spec = {"shape": "tiny", "seq_len": 32, "steps": 1, "warmup": 0, "compile": False, "precision": "fp32",
            "seed": 0, "loss": "simcse", "batch_size": 4, "mini_batch_size": None}
    with _configuration_processes() as measured:
        with pytest.raises(RuntimeError, match=r"^the simcse configuration batch 4 mini None failed: .*no-such-shape"):
            measured({**spec, "shape": "no-such-shape"})
        assert measured(spec)["ms_per_step"] > 0
        # the forking process itself lost (killed for memory, say): the next configuration fails, saying so
        (server,) = [child for child in psutil.Process().children()
                     if "raycse.bench.cached_configuration" in child.cmdline()]
        server.kill()
        with pytest.raises(RuntimeError, match="failed: the process forking the configurations ended"):
            measured(spec)
