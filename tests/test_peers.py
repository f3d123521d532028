"""benchmarks/peers.py: raycse against sentence-transformers' SimCSE recipe and an Optuna loop around it, at its
smallest size (a tiny random BERT: timings of the plumbing only)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
peers = load_benchmark("peers")


def test_the_gpu_size_is_the_issue_s_shape_and_both_sides_share_the_published_point():
    gpu = peers.SIZES["gpu"]
    assert (gpu["batch_size"], gpu["max_len"], gpu["eval_steps"], gpu["search_eval_steps"]) == (64, 32, 125, 125)
    assert gpu["trials"] == peers.SIZES["quick"]["trials"] == 8
    assert len(peers.SIZES["quick"]["seeds"]) >= 3
    assert peers.PUBLISHED == {"lr": 3e-5, "tau": 0.05}
    interval = peers.interval([1.0, 2.0, 3.0])
    assert interval["mean"] == 2.0 and interval["low"] < 2.0 < interval["high"] and interval["n"] == 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_smallest_run_trains_both_sides_alike_and_records_both(tmp_path, tiny_bert_dir):
    output = tmp_path / "peers.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--size", "tiny", "--model",
                           str(tiny_bert_dir), "--seeds", "1", "--trials", "2", "--work", str(tmp_path / "work"),
                           "--output", str(output)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=580)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    record = json.loads(output.read_text())
    assert record["setting"]["random_weights"] and "timing" in record["note"]
    train = record["train"]
    assert [(r["side"], r["seed"]) for r in train["runs"]] == [("raycse", 1), ("recipe", 1)]
    for run in train["runs"]:  # the same steps and evaluations, each part measured, the parts within the wall
        assert (run["steps"], run["evaluations"]) == (4, 2), run
        for part in ("startup_s", "steps_s", "eval_s", "checkpoint_s"):
            assert run[part] > 0, (run["side"], part)
        assert run["peak_rss_mb"] > 100 and run["objective"] is not None
        assert [step for step, _ in run["curve"]] == [2, 4]
    assert train["same_steps_and_evaluations"]
    for side in ("raycse", "recipe"):
        figures = train["sides"][side]
        assert figures["sentences_per_s"] > 0 and figures["objective"]["n"] == 1
    assert set(train["ratios"]) == {"wall", "steps", "evaluations", "startup", "checkpoints", "sentences_per_s",
                                    "peak_rss"}
    search = record["search"]
    for side in ("raycse", "recipe"):
        s = search[side]
        assert len(s["trials"]) == 2 and s["wall_s"] > 0 and s["device_s"] >= s["wall_s"], side
        assert set(s["chose"]) == {"lr", "tau"}, side
        assert all(t["steps"] == 2 for t in s["trials"]), s["trials"]
    assert search["recipe"]["trials"][0]["params"] == peers.PUBLISHED  # the published point first, on both sides
    assert set(search["ratios"]) == {"wall", "device_s"}
    assert "train ratios (recipe / raycse): wall" in done.stdout and "search ratios" in done.stdout
