"""A CPU plan prices its step from records (raycse/planning/cpu_steps.py) and answers in seconds: where the model's
shape has a recorded CPU step it measures nothing; where it has none it says so on its first line, says each step as
it ends, and measures a few steps and a cut of STS-B dev. Durations past a day are said in days, a budget sized for
GPUs planned without one is said so in a sentence, and a dry run stopped by SIGTERM says that it was a dry run, with
nothing to continue. The records themselves are read back against their file (every figure is its record)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raycse
from raycse.cli import main
from raycse.planning import cpu_steps
from raycse.planning.dry_run import format_dry_run

ROOT = Path(__file__).resolve().parent.parent
FOCAL = str(ROOT / "search_spaces" / "focal.yaml")

TINY_SPACE = """\
experiment: tiny-plan
model: {model}
loss: focal
train: {{batch_size: 32, max_steps: 8, eval_steps: 4, max_sentences: 320}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
published: {{tau: 0.07}}
search: {{num_samples: 2, seed: 0, scheduler: {{name: fifo}}, confirm: {{top_k: 1, judge_seeds: 2}}}}
resources: {{workers: 1, gpus_per_worker: 0, cpus_per_worker: 1}}
"""


def test_every_recorded_cpu_step_is_its_record():
    """MiniLM's: the CPU main job's own trials (their training seconds over their steps, their evaluations' mean);
    BERT-base's: benchmarks/cpu_steps.py's row, whose MiniLM row says how much the load inflated it."""
    import statistics

    minilm, bert = cpu_steps.CPU_STEPS
    main_job = ROOT / cpu_steps.CPU_MAIN_JOB
    trials = json.loads((main_job / "search_summary.json").read_text())["trials"]
    step = sum(t["timings"]["trial_train_s"] for t in trials) / sum(t["steps"] for t in trials)
    runs = [run for stage in json.loads((main_job / "trials.json").read_text())["stages"].values() for run in stage]
    dev = statistics.fmean(run["reports"][-1]["eval_s"] / len(run["reports"]) for run in runs)
    assert (minilm.ms, minilm.eval_s) == (round(1000 * step, 1), round(dev, 2))
    assert (minilm.shape, minilm.batch_size, minilm.threads) == ("minilm", 16, 1)

    record = json.loads((ROOT / cpu_steps.CPU_STEPS_RECORD).read_text())
    rows = {row["shape"]: row for row in record["rows"]}
    row = rows["bert-base"]
    assert (row["batch_size"], row["seq_len"], row["threads"], row["loss"]) == (64, 32, 1, "focal")
    assert (bert.ms, bert.eval_s) == (round(row["ms_per_step"], 1), round(row["eval_seconds"], 2))
    assert row["eval_sentences"] == cpu_steps.STSB_DEV_SENTENCES and row["clock"] == "process CPU seconds"
    for recorded in (minilm, bert):  # the rows the step encoded: focal's two views, with a gradient
        assert cpu_steps.step_work("focal", recorded.batch_size, recorded.seq_len) == recorded.work
    # the load inflated even the benchmark's CPU seconds: its MiniLM row against the main job's own trials
    assert 1.0 < rows["minilm"]["ms_per_step"] / minilm.ms < 2.5


@pytest.mark.parametrize("budget", ["cpu", "full", "paper"])
def test_a_cpu_plan_of_a_recorded_shape_measures_nothing(budget, capsys):
    """The CPU budget (MiniLM, one thread), the full and the paper budget planned on CPUs (MiniLM and BERT-base, two
    threads): each priced from the record of its shape, nothing measured, nothing said before the plan."""
    assert main(["search", "--space", FOCAL, "--dry-run", "--gpus", "0", "--budget", budget]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Plan of "), printed[:500]
    assert "Measuring" not in printed and "measured here" not in printed
    shape = "bert-base" if budget == "paper" else "minilm"
    record = cpu_steps.recorded_cpu_step(shape, 1)
    assert f"({cpu_steps.ON_CPU}: {record.record}: a {shape}-shaped encoder" in printed
    plan = raycse.plan("focal", gpus=0, budget=budget)
    assert plan.measured is None and capsys.readouterr().out == ""
    assert plan.rates.step.source.startswith(f"{cpu_steps.ON_CPU}: {record.record}")
    assert record.record in plan.rates.dev_eval.source


def test_a_recorded_step_is_scaled_to_the_plans_rows_tokens_and_threads():
    one = cpu_steps.recorded_cpu_step("minilm", 1)
    assert (one.threads, one.batch_size) == (1, 16) and cpu_steps.recorded_cpu_step("minilm", 8) == one
    assert cpu_steps.recorded_cpu_step("tiny", 1) is None
    step, dev = cpu_steps.priced(one, "focal", 16, 32, 1)
    assert step.value == pytest.approx(one.ms / 1000) and dev.value == pytest.approx(one.eval_s)
    assert "scaled" not in step.source and cpu_steps.CPU_MAIN_JOB in step.source
    double, _ = cpu_steps.priced(one, "focal", 32, 64, 1)  # twice the rows, twice the tokens
    assert double.value == pytest.approx(4 * step.value) and "scaled to batch 32, length 64" in double.source
    # DCLR's frozen complementary encoder: one forward row more a row, against three for each of the two views
    dclr, _ = cpu_steps.priced(one, "dclr", 16, 32, 1)
    assert dclr.value == pytest.approx(step.value * 7 / 6)
    two, two_dev = cpu_steps.priced(one, "focal", 64, 32, 2)  # the full budget on CPUs: batch 64, two threads
    assert two.value == pytest.approx(one.ms / 1000 * 4 / 2) and two_dev.value == pytest.approx(one.eval_s / 2)
    assert "2 thread(s) in proportion" in two.source


def _tiny_space(tmp_path: Path, model: Path) -> Path:
    path = tmp_path / "tiny-plan.yaml"
    path.write_text(TINY_SPACE.format(model=model))
    return path


def test_a_shape_without_a_record_is_measured_here_and_said_first(tmp_path, tiny_bert_dir, capsys):
    """A tiny BERT: no CPU step of its shape is recorded. The dry run says so on its first line, then each step and
    the evaluation as they end, then the plan, whose figures say they were measured here and scaled."""
    space = _tiny_space(tmp_path, tiny_bert_dir)
    assert main(["search", "--space", str(space), "--dry-run", "--gpus", "0", "--storage-path",
                 str(tmp_path / "ray")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Measuring here: no CPU step of a tiny-shaped encoder is recorded (recorded: minilm")
    total = cpu_steps.MEASURED_WARMUP + cpu_steps.MEASURED_STEPS
    assert re.fullmatch(r"  step 1 of 3 \(warm-up\): [\d.]+ s", lines[1]) and total == 3
    assert re.fullmatch(r"  step 3 of 3: [\d.]+ s", lines[3])
    assert re.fullmatch(rf"  STS-B dev: {cpu_steps.MEASURED_SENTENCES} of \d+ sentences in [\d.]+ s", lines[4])
    assert lines[5].startswith("Plan of ")
    text = "\n".join(lines)
    assert "measured here: 3 steps of a random-weight tiny-shaped encoder at batch 16, 1 thread(s) as a trial has, " \
           "scaled to batch 32" in text
    plan = raycse.plan(space, gpus=0)
    said = capsys.readouterr().out.splitlines()
    assert plan.measured and said[0].startswith("Measuring here") and len(said) == 5


def test_the_paper_budget_on_cpus_is_said_in_days_and_not_meant_for_this_machine():
    """focal.yaml's paper budget (BERT-base, 15,625 steps a trial) planned on CPUs: months, said in days, and a
    sentence that it is meant for GPUs; on GPUs it is said in hours, with no such sentence."""
    text = format_dry_run(raycse.plan("focal", gpus=0, budget="paper"))
    wall = next(line for line in text.splitlines() if line.startswith("Wall clock: "))
    assert re.search(r"about [\d.]+ days expected .*, [\d.]+ days at most", wall), wall
    hours = [float(h) for h in re.findall(r"([\d.]+) h\b", text)]
    assert all(h < 24 for h in hours), hours  # past a day, days
    note = next(line for line in text.splitlines()[:3] if line.startswith("The paper budget is meant for GPUs"))
    assert note.startswith("The paper budget is meant for GPUs, and this plan has none (--budget paper): on CPUs its ")
    assert re.search(r"would take about [\d.]+ days \(expected\); `--gpus N` plans it for N GPUs", note)
    on_gpus = format_dry_run(raycse.plan("focal", gpus=8, budget="paper"))
    assert "meant for GPUs" not in on_gpus and "days" not in on_gpus
    assert "meant for" not in format_dry_run(raycse.plan("focal", gpus=0))  # the CPU budget on CPUs


BERT_LARGE = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24,
              "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 30522,
              "max_position_embeddings": 512}


@pytest.mark.slow  # a CLI subprocess, and a BERT-large-shaped encoder built to be measured
def test_a_dry_run_stopped_while_it_measures_says_it_was_a_dry_run(tmp_path, tiny_bert_dir):
    """SIGTERM while the dry run measures (a BERT-large-shaped model: no CPU step of its shape is recorded): exit 143,
    and its last line says the dry run was stopped, never that --resume continues a search."""
    model = tmp_path / "bert-large"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(BERT_LARGE))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_bert_dir / name).exists():
            (model / name).write_bytes((tiny_bert_dir / name).read_bytes())
    space = _tiny_space(tmp_path, model)
    log = tmp_path / "dry-run.log"
    proc = subprocess.Popen([sys.executable, "-m", "raycse", "search", "--space", str(space), "--dry-run", "--gpus",
                             "0", "--storage-path", str(tmp_path / "ray")], stdout=log.open("w"),
                            stderr=subprocess.STDOUT, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while "Measuring here" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, log.read_text()
    text = log.read_text()
    assert text.splitlines()[0].startswith("Measuring here: no CPU step of a bert-large-shaped encoder")
    assert text.strip().splitlines()[-1] == ("raycse: stopped by SIGTERM; the dry run was stopped: it ran, created "
                                             "and started nothing, so nothing is left to continue")
    assert "--resume" not in text and "Traceback" not in text and "Plan of" not in text


def test_a_models_weights_and_shape_are_read_without_building_it(tiny_bert_dir):
    """From config.json and the safetensors headers (and, for the paper budgets' hub model, from its shape by BERT's
    layout): the same bytes and shape as the model built on torch's meta device, as the dry run counted them before."""
    import torch
    from transformers import BertModel

    from raycse.bench.synthetic import bert_config
    from raycse.planning import model_facts as facts

    for model in ("minilm", str(tiny_bert_dir)):
        assert facts.model_facts(model) == facts._built_on_meta(model, False), model
    assert facts.model_facts("minilm") == (90_852_864, "minilm") and facts.model_facts(str(tiny_bert_dir))[1] == "tiny"
    with torch.device("meta"):
        built = BertModel(bert_config("bert-base", facts.BERT_UNCASED_VOCAB, "eager"))
    assert facts.model_facts("bert-base-uncased") == (4 * sum(p.numel() for p in built.parameters()), "bert-base")
