"""benchmarks/landscape.py: its design, its summary, its resumption, and one real recording on the tiny BERT."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

from raycse.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]




landscape = load_benchmark("landscape")
SPACE = {"tau": {"type": "loguniform", "low": 0.02, "high": 0.2},
         "m": {"type": "uniform", "low": 0.0, "high": 0.6},
         "lr": {"type": "loguniform", "low": 1e-5, "high": 1e-4}}
PUBLISHED = {"tau": 0.07, "m": 0.3, "lr": 3e-5}


def test_design_is_the_published_point_then_a_fixed_sobol_design_inside_the_space():
    points = landscape.design(SPACE, PUBLISHED, {"points": 32})
    assert points[0] == PUBLISHED and len(points) == 33
    assert points == landscape.design(SPACE, PUBLISHED, {"points": 32})  # a resumed recording finds the same runs
    for name, d in SPACE.items():
        values = [p[name] for p in points[1:]]
        assert min(values) >= d["low"] and max(values) <= d["high"]
        assert len(set(values)) == 32  # every point its own value on every axis, unlike a grid
    # log scale: about half the learning rates lie below the geometric middle of [1e-5, 1e-4]
    below = sum(p["lr"] < math.sqrt(1e-5 * 1e-4) for p in points[1:])
    assert 12 <= below <= 20


def test_probe_design_is_the_corners_of_the_named_parameters():
    points = landscape.design(SPACE, PUBLISHED, {"corners": ["tau", "lr"]})
    assert points[0] == PUBLISHED
    assert {(p["tau"], p["lr"]) for p in points[1:]} == {(0.02, 1e-5), (0.02, 1e-4), (0.2, 1e-5), (0.2, 1e-4)}
    assert all(p["m"] == 0.3 for p in points)


def run(config: dict, seed: int, values: list[float], status: str = "ok") -> dict:
    return {"config": config, "seed": seed, "status": status, "steps": [8, 16][:len(values)], "objective": values,
            "train_s": [4.0, 8.0][:len(values)], "eval_s": [10.0, 20.0][:len(values)], "startup_s": 0.5,
            "wall_s": 30.0}


def test_summary_spread_and_pooled_seed_std():
    a, b, c = {"tau": 0.1, "m": 0.1, "lr": 1e-5}, {"tau": 0.2, "m": 0.1, "lr": 1e-5}, {"tau": 0.05, "m": 0, "lr": 2e-5}
    runs = [run(a, 1, [80.0, 81.0]), run(a, 2, [80.0, 81.2]), run(b, 1, [82.0, 84.0]), run(b, 2, [82.0, 83.6]),
            run(c, 1, [79.0, 79.5]), run(c, 2, [], status="diverged")]
    summary = landscape.summarize(runs)
    assert summary["runs"] == 6 and summary["configurations"] == 3 and summary["diverged"] == 1
    final = summary["final"]
    assert final["best"]["mean"] == pytest.approx(83.8) and final["best"]["config"] == b
    assert final["worst"]["mean"] == pytest.approx(79.5) and final["worst"]["seeds"] == 1
    assert final["spread"] == pytest.approx(4.3)
    # within-configuration variances 0.02 and 0.08 (1 dof each): pooled std sqrt(0.05)
    assert final["seed_std_pooled"] == pytest.approx(math.sqrt(0.05), abs=1e-4) and final["seed_std_dof"] == 2
    assert final["spread_over_seed_std"] == pytest.approx(4.3 / math.sqrt(0.05), abs=0.01)
    # a and b have both seeds: seed 1 scores 0.05 above the configuration means, seed 2 0.05 below; the rest,
    # +-0.15 in each cell, is the interaction (1 dof)
    effect = summary["seed_effect"]
    assert effect["configurations"] == 2 and effect["interaction_dof"] == 1
    assert effect["effect_by_seed"] == {"1": pytest.approx(0.05), "2": pytest.approx(-0.05)}
    assert effect["interaction_std"] == pytest.approx(0.3)
    assert summary["cost"]["step_s_median"] == pytest.approx(0.5)
    assert summary["cost"]["eval_s_median"] == pytest.approx(10.0)


def test_an_existing_file_of_another_setting_is_refused(tmp_path):
    args = Namespace(preset="cpu", space="search_spaces/focal.yaml", model=None)
    setting = landscape.setting_of(args)
    path = tmp_path / "l.json"
    path.write_text(json.dumps({"format": landscape.FORMAT, "setting": setting, "runs": []}))
    assert landscape.load_existing(path, setting)["runs"] == []
    other = landscape.setting_of(Namespace(preset="probe", space="search_spaces/focal.yaml", model=None))
    with pytest.raises(ConfigError, match="differs in design"):
        landscape.load_existing(path, other)
    changed = json.loads(json.dumps(setting))
    changed["train"]["batch_size"] = 32
    with pytest.raises(ConfigError, match="train.batch_size"):
        landscape.load_existing(path, changed)
    path.write_text("{}")
    with pytest.raises(ConfigError, match="not a raycse-landscape/1 file"):
        landscape.load_existing(path, setting)


@pytest.mark.slow
def test_a_recording_on_the_tiny_bert_is_written_and_resumed(tiny_bert_dir, tmp_path):
    """The probe preset on the tiny BERT, two at once; then three runs taken out of the file, as if the recording
    had been killed before them, and the same command again: exactly those three are trained again."""
    out, scratch = tmp_path / "tiny.json", tmp_path / "scratch"
    scratch.mkdir()
    command = [sys.executable, str(ROOT / "benchmarks" / "landscape.py"), "--preset", "probe", "--model",
               str(tiny_bert_dir), "--jobs", "2", "--output", str(out)]
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    first = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert first.returncode == 0, first.stderr
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 10 and "0 runs left" in first.stdout
    assert all(r["status"] == "ok" and r["steps"] == [8, 16, 24, 32] for r in data["runs"])
    assert data["untouched"]["pooler"] == "cls_before_pooler"
    assert data["summary"]["final"]["seed_std_dof"] == 5
    kept, dropped = data["runs"][:7], data["runs"][7:]
    out.write_text(json.dumps({**data, "runs": kept}))
    second = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert second.returncode == 0, second.stderr
    assert "7 runs recorded, 3 to go" in second.stdout
    again = json.loads(out.read_text())
    assert again["runs"][:7] == kept
    key = lambda r: (json.dumps(r["config"], sort_keys=True), r["seed"])  # noqa: E731
    assert sorted(map(key, again["runs"][7:])) == sorted(map(key, dropped))
    assert len(again["recordings"]) == 2 and again["recordings"][1]["runs"] == 3
    # nothing left behind by the trainings: no checkpoint directories
    assert not list(scratch.iterdir())
