"""The README's Python API example runs as written: a search, its winner and verdict, an evaluation and a training.

The block is taken from README.md's "Python API" section and run unchanged by a fresh Python process. What it
names is provided small: `search_spaces/focal.yaml` in the process's working directory is a focal space on the
tiny random BERT (a few 4-step trials), so the whole example takes a minute or two on a CPU.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from raycse.data.corpus import read_corpus

README = Path(__file__).resolve().parents[1] / "README.md"

SMALL_SPACE = """\
experiment: readme-example
model: {model}
corpus: {corpus}
loss: focal
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, lr: 1.0e-4}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: 2, seed: 0, test_eval: none, scheduler: {{name: fifo}}, confirm: {{top_k: 1, judge_seeds: 2}}}}
resources: {{workers: 1, cpus_per_worker: 2}}
"""


def readme_python_example() -> str:
    section = README.read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the Python API section holds one example"
    return blocks[0]


def test_the_example_uses_the_public_names_only():
    import raycse

    code = readme_python_example()
    used = set(re.findall(r"raycse\.(\w+)\(", code))
    assert used == {"search", "train", "evaluate"} and used <= set(raycse.__all__)


def test_the_example_runs_after_the_quick_start_in_the_same_folder(tmp_path):
    """Run where the quick start ran (`raycse search --space focal`: its study `raycse-focal` in optuna.db), the
    example's search is not refused as one that exists: it names another experiment."""
    import ast

    import optuna

    from raycse.driver.layout import check_new_study
    from raycse.settings.space import load_space

    (call,) = [node for node in ast.walk(ast.parse(readme_python_example())) if isinstance(node, ast.Call)
               and isinstance(node.func, ast.Attribute) and node.func.attr == "search"]
    keywords = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    space = README.parent / ast.literal_eval(call.args[0])
    quick_start = load_space("focal").experiment
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name=quick_start, storage=storage)  # what the quick start left in the folder
    experiment = keywords.get("experiment") or load_space(space).experiment
    assert experiment != quick_start
    check_new_study(storage, experiment)  # no "an Optuna study ... already exists"


def test_git_ignores_what_the_readme_writes_into_the_clone():
    """The stores' SQLite write-ahead logs beside them, and the folder the README's `raycse export` writes."""
    exported = {match for match in re.findall(r"raycse export \S+ ([\w.-]+)", README.read_text())}
    assert exported == {"raycse-focal-model"}
    paths = ["mlflow.db-wal", "mlflow.db-shm", "optuna.db-wal", "optuna.db-shm", "mlflow.db", "optuna.db",
             *(f"{folder}/model.safetensors" for folder in exported)]
    for path in paths:
        ignored = subprocess.run(["git", "-C", str(README.parent), "check-ignore", "-q", "--no-index", path])
        assert ignored.returncode == 0, f"{path} is not ignored by .gitignore"


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_readme_python_example_runs_as_written(tmp_path, tiny_bert_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(read_corpus("wiki-sample", max_sentences=160)) + "\n")
    (tmp_path / "search_spaces").mkdir()
    (tmp_path / "search_spaces" / "focal.yaml").write_text(SMALL_SPACE.format(model=tiny_bert_dir, corpus=corpus))
    code = readme_python_example() + "\nimport json\nprint('RESULT', json.dumps({'figures': figures, " \
                                      "'best_objective': results.best_objective, 'verdict': outcome.verdict}))\n"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("RAY_ADDRESS", None)
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=1100)

    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    result = json.loads(completed.stdout.split("RESULT ", 1)[1])
    assert result["verdict"] and result["verdict"] in completed.stdout
    assert set(result["figures"]) >= {"STS12", "STSBenchmark", "SICKRelatedness", "avg"}
    # the further training's best objective is its best dev evaluation (steps 4 and 8), as written to disk
    written = json.loads((tmp_path / "runs" / "winner-more" / "results.json").read_text())
    assert [point["step"] for point in written["dev_curve"]] == [4, 8] and written["config"]["seed"] == 7
    assert result["best_objective"] == max(point["objective"] for point in written["dev_curve"])
    seven = [value for task, value in result["figures"].items() if task != "avg"]
    assert len(seven) == 7 and result["figures"]["avg"] == pytest.approx(sum(seven) / 7)
    assert f"{result['figures']['avg']} {result['best_objective']}" in completed.stdout  # the example's last print
    assert (tmp_path / "runs" / "winner-more" / "best" / "config.json").is_file()
    assert (tmp_path / "report" / "index.html").is_file() and (tmp_path / "mlflow.db").is_file()
