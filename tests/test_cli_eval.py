"""`raycse eval` end to end on the bundled STS data, with the tiny random BERT as the model."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from raycse.cli import main
from raycse.evaluation.sts import SEVEN_TASKS


@pytest.fixture(autouse=True)
def one_torch_thread():
    """A 32-wide model gains nothing from a second thread, and on a busy 2-core machine the hand-offs between
    threads cost more than the work (measured: 3 s with one thread, 20 s with two, for `--tasks all`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_eval_stsb_dev_prints_the_figure_and_writes_json(tiny_bert_dir, tmp_path, capsys):
    output = tmp_path / "results" / "eval.json"
    # 'cls' on a model with no trained MLP head scores a random head: the user is warned
    with pytest.warns(UserWarning, match="randomly initialised"):
        status = main(["eval", "--model", str(tiny_bert_dir), "--pooler", "cls", "--tasks", "stsb-dev",
                       "--batch-size", "64", "--output", str(output)])

    assert status == 0
    results = json.loads(output.read_text())
    assert list(results) == ["stsb_dev"]
    assert math.isfinite(results["stsb_dev"]) and -100 <= results["stsb_dev"] <= 100
    printed = capsys.readouterr().out
    assert "STS-B dev" in printed and f"{results['stsb_dev']:.2f}" in printed


def test_eval_all_writes_every_key(tiny_bert_dir, tmp_path, capsys):
    output = tmp_path / "eval.json"
    # every bundled set: about 30,000 distinct sentences, kept cheap by truncating them to 32 tokens
    status = main(["eval", "--model", str(tiny_bert_dir), "--pooler", "cls_before_pooler", "--tasks", "all",
                   "--batch-size", "256", "--max-len", "32", "--output", str(output)])

    assert status == 0
    results = json.loads(output.read_text())
    assert list(results) == ["stsb_dev", "sickr_dev", *SEVEN_TASKS, "avg", "alignment", "uniformity"]
    assert all(math.isfinite(value) for value in results.values())
    assert results["alignment"] >= 0 and results["uniformity"] <= 0
    printed = capsys.readouterr().out
    assert "STS12" in printed and "SICK-R" in printed and "Avg." in printed


@pytest.mark.parametrize("bad_arguments, culprit", [
    (["--pooler", "mean"], "--pooler: invalid choice: 'mean'"),
    (["--model", "./no-such-model"], "model path './no-such-model' does not exist"),
    (["--tasks", "everything"], "--tasks"),
])
def test_bad_input_is_one_line_and_exit_2_with_no_output(bad_arguments, culprit, tmp_path, capsys):
    output = tmp_path / "eval.json"
    status = main(["eval", *bad_arguments, "--output", str(output)])

    assert status == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and stderr.startswith("raycse: error: ") and culprit in stderr
    assert not output.exists()


@pytest.mark.slow  # a CLI subprocess
def test_command_line_exit_status_for_a_missing_model(tmp_path):
    output = tmp_path / "eval.json"
    completed = subprocess.run(
        [sys.executable, "-m", "raycse", "eval", "--model", str(tmp_path / "missing"), "--output", str(output)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert completed.returncode == 2
    assert completed.stderr == f"raycse: error: --model: model path '{tmp_path / 'missing'}' does not exist\n"
    assert "Traceback" not in completed.stdout + completed.stderr
    assert not output.exists()
