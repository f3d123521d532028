"""`raycse export`: the winner of a recorded search as a sentence-transformers folder with a Hub model card.

The search is recorded as `raycse search` records it (docs/search_outputs.md), with MLflow itself: a parent run with
its `best.*` parameters, `search_summary.json` and `best_checkpoint/` artifact (a tiny BERT saved by
`Encoder.save`, as a trial saves its best model), and a registered model version. The card is checked offline
with huggingface_hub's own parser; pushing without a network is one error line.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from raycse.cli import main
from raycse.records import BEST_TRIAL_TAG, SEARCH_TAG
from raycse.reporting.tables import format_search_summary

EXPERIMENT = "raycse-focal"
POOLER = "cls_before_pooler"
WINNER = {"tau": 0.055, "m": 0.54}
PUBLISHED = {"tau": 0.07, "m": 0.3}
TEST = {"STS12": 61.234, "STS13": 74.1, "STS14": 68.0, "STS15": 78.3, "STS16": 77.0, "STSBenchmark": 80.126,
        "SICKRelatedness": 70.2}
TEST["avg"] = sum(TEST.values()) / 7


def _key(params: dict) -> str:
    return json.dumps({"family": "focal", **params}, sort_keys=True)


def _interval(mean: float, std: float | None, n: int, half: float | None = None) -> dict:
    return {"mean": mean, "std": std, "n": n, "df": n - 1 if half else None,
            "low": mean - half if half else None, "high": mean + half if half else None}


def _summary(dev: float) -> dict:
    """A finished search's summary (raycse/driver/summary.py): 5 search trials, the winner chosen among the top 2 on
    one choosing seed (43), then it and the published point judged on seeds 44-45."""
    model = "sentence-transformers/all-MiniLM-L6-v2"
    trials = [{"trial_id": f"s{i}", "stage": "search", "family": "focal", "params": WINNER if i == 1 else PUBLISHED,
               "seed": 42, "config_key": _key(WINNER if i == 1 else PUBLISHED), "best_objective": 86.0 + i / 10,
               "best_step": 16, "steps": 16, "status": "finished"} for i in range(5)]
    trials.append({"trial_id": "j1", "stage": "judge", "family": "focal", "params": WINNER, "seed": 44,
                   "config_key": _key(WINNER), "best_objective": dev, "best_step": 8, "steps": 16,
                   "status": "finished"})
    winner_test = {task: _interval(value, 0.3, 2, 2.7) for task, value in TEST.items()}
    untouched = {task: {"mean": value - 1.0, "std": None, "n": 1} for task, value in TEST.items()}
    versus = _interval(0.14, 0.028, 2, 0.25)
    verdict = ("Method: chosen on dev among the top 2 on a fresh seed, judged on fresh seeds. The winner is not "
               "distinguishable from the published point on dev.")
    return {
        "experiment": EXPERIMENT, "space_file": "focal.yaml", "objective": "stsb_dev",
        "objective_description": "STS-B dev Spearman x100", "budget": "cpu", "model": model, "corpus": "wiki-sample",
        "study_name": EXPERIMENT, "optuna_storage": "sqlite:////somewhere/optuna.db",
        "baseline": {"objective": 86.72, "eval_pooler": "avg", "by_pooler": {},
                     "test": {task: f["mean"] for task, f in untouched.items()}},
        "published": {"config_key": _key(PUBLISHED), "family": "focal", "params": PUBLISHED},
        "searched_params": {"focal": ["tau", "m"]}, "trials": trials, "verdict": verdict,
        "winner": {"config_key": _key(WINNER), "family": "focal", "params": WINNER, "judged": True,
                   "is_published": False, "mean": 87.23, "std": 0.099, "n": 2, "versus_published": versus,
                   "beats_published": False, "below_published": False, "beats_baseline": False,
                   "baseline_judged": True, "sentence": verdict},
        "decision": {
            "method": {"budget": "cpu", "top_k": 2, "choose_seeds": 1, "judge_seeds": 2,
                       "seeds": {"search": 42, "choose": [43], "judge": [44, 45]}},
            "configs": [
                {"config_key": _key(WINNER), "family": "focal", "params": WINNER, "search_rank": 1,
                 "is_published": False, "is_winner": True,
                 "judge": {"seeds": [44, 45], "values": [87.3, 87.16], "planned": 2, "n": 2,
                           "count_text": "n = 2 of 2", "short": False, "dev": _interval(87.23, 0.099, 2, 0.89),
                           "test": winner_test}},
                {"config_key": _key(PUBLISHED), "family": "focal", "params": PUBLISHED, "search_rank": 2,
                 "is_published": True, "is_winner": False,
                 "judge": {"seeds": [44, 45], "values": [87.13, 87.05], "planned": 2, "n": 2,
                           "count_text": "n = 2 of 2", "short": False, "dev": _interval(87.09, 0.057, 2, 0.51),
                           "test": {}}}],
            "versus_published": versus, "versus_published_dev": versus,
            "seed_noise": 0.08, "seed_noise_df": 3, "detectable": 1.13,
            "detectable_n": 2, "verdict": [verdict]},
        "test_table": {
            "rows": [{"label": "untouched model", "model": model, "corpus": "-", "steps": 0, "n": 1,
                      "figures": untouched},
                     {"label": "winner", "config_key": _key(WINNER), "model": model, "corpus": "wiki-sample",
                      "steps": 16, "n": 2, "figures": winner_test}],
            "seeds": "judging seeds 44-45", "winner_minus_published": {}},
        "paper": {"family": "focal", "model": "bert-base-uncased", "corpus": "wiki1m",
                  "figures": {"STS12": {"mean": 68.5, "std": 0.08}, "avg": {"mean": 77.33, "std": 0.08}},
                  "comparable": False, "caption": "Reported by the paper for focal: bert-base-uncased trained on "
                                                  "wiki1m. Not comparable with the rows above."},
        "seed_noise_std": 0.08, "best_checkpoint": "/elsewhere/ray_results/j1/checkpoint_000001/best",
        "registered": {"trial_id": "j1", "seed": 44, "rule": "the winner's run on its first judging seed that "
                                                             "finished"},
        "registered_model": {"name": EXPERIMENT, "version": "1"},
    }


def _record(uri: str, artifacts: Path, experiment: str, checkpoint: Path, summary: dict) -> str:
    from mlflow.tracking import MlflowClient

    from raycse.tracking.tracker import Tracker

    MlflowClient(tracking_uri=uri).create_experiment(experiment, artifact_location=str(artifacts / experiment))
    tracker = Tracker(uri, experiment)
    parent = tracker.start_run("search", tags={SEARCH_TAG: experiment, BEST_TRIAL_TAG: "j1"})
    tracker.log_params(parent, {"best.tau": 0.055, "best.m": 0.54, "best.model": "minilm", "best.loss": "focal",
                                "best.reg": "", "best.corpus": "wiki-sample", "best.max_sentences": 1024,
                                "best.max_steps": 16, "best.batch_size": 16, "best.lr": 9.2e-05, "best.max_len": 32,
                                "best.seed": 42})
    tracker.log_artifacts(parent, str(checkpoint), "best_checkpoint")
    tracker.register_model(parent, "best_checkpoint", experiment)
    tracker.log_dict(parent, summary, "search_summary.json")
    tracker.end_run(parent)
    return parent


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_bert_dir):
    from raycse.encoder.model import Encoder
    from raycse.evaluation.sts import run_eval

    tmp = tmp_path_factory.mktemp("export")
    checkpoint = tmp / "trial" / "best"
    Encoder.from_pretrained(str(tiny_bert_dir), pooler=POOLER).save(checkpoint, POOLER)
    dev = run_eval(str(checkpoint), POOLER)["stsb_dev"]  # what the trial's evaluation recorded
    uri = f"sqlite:///{tmp}/mlflow.db"
    parent = _record(uri, tmp / "artifacts", EXPERIMENT, checkpoint, _summary(dev))
    no_winner = {**_summary(dev), "experiment": "nothing-confirmed", "winner": None, "decision": None}
    _record(uri, tmp / "artifacts", "nothing-confirmed", checkpoint, no_winner)
    return {"tmp": tmp, "uri": uri, "parent": parent, "dev": dev}


@pytest.fixture(scope="module")
def exported(store):
    folder = store["tmp"] / "exported"
    assert main(["export", EXPERIMENT, str(folder), "--tracking-uri", store["uri"]]) == 0
    return folder


def test_the_folder_loads_as_it_is_and_scores_as_the_checkpoint(store, exported):
    import torch
    from sentence_transformers import SentenceTransformer
    from sts_reference import stsb_dev
    from transformers import AutoModel

    model = SentenceTransformer(str(exported), device="cpu")
    assert AutoModel.from_pretrained(str(exported)).config.hidden_size == 32
    dev = stsb_dev(lambda sentences: torch.from_numpy(model.encode(sentences, batch_size=128)))
    assert dev == pytest.approx(store["dev"], abs=1e-6)
    assert not [p.name for p in exported.parent.iterdir() if p.name.endswith(".partial")]  # the staging is gone


def _printed_winner_row(summary: dict) -> dict[str, float]:
    """The winner's test figures as `raycse search` prints them (the row of the seven tasks)."""
    text = format_search_summary(summary)
    header = next(line for line in text.splitlines() if "STS12" in line and "SICK-R" in line).split()
    row = next(line for line in text.splitlines() if line.strip().startswith("winner ("))
    means = [float(cell) for cell in re.findall(r"(\d+\.\d\d) ±", row)]
    return dict(zip(header, means))


def test_the_card_parses_and_its_metadata_round_trips(store, exported):
    from huggingface_hub import ModelCard

    card = ModelCard.load(exported / "README.md")
    data = card.data
    assert (data.library_name, data.pipeline_tag) == ("sentence-transformers", "sentence-similarity")
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"  # what 'minilm' is
    assert data.datasets == ["princeton-nlp/datasets-for-simcse"]  # the bundled corpus's source
    assert {"sentence-transformers", "sentence-similarity", "raycse", "focal"} <= set(data.tags)
    # the metadata survives a write and a read as it is
    again = ModelCard(f"---\n{data.to_yaml()}\n---\n{card.text}")
    assert again.data.to_dict() == data.to_dict()
    # the model-index holds the seven test tasks, each equal to the figure `raycse search` prints
    printed = _printed_winner_row(_summary(store["dev"]))
    results = {r.dataset_name: r for r in data.eval_results}
    assert set(results) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"}
    assert {name: r.metric_value for name, r in results.items()} == {name: printed[name] for name in results}
    assert results["STS-B"].dataset_type == "mteb/stsbenchmark-sts" and results["STS-B"].dataset_split == "test"
    assert {r.metric_type for r in results.values()} == {"spearman_cosine"}


def test_the_card_states_the_answer_and_where_it_came_from(store, exported):
    text = (exported / "README.md").read_text().split("\n---\n", 1)[1]
    for words in (
        "trained with the **focal** loss (tau=0.055, m=0.54)",
        "the first 11,914 sentences of SimCSE's wiki1m), of which the first 1024 rows, for 16 steps",
        "chose the configuration among 5",
        "the top 2 were trained on 1 fresh seed (43) and the best mean won",
        "trained on 2 further fresh seeds (44-45), which alone give the figures below",
        "on the seven-task test average, judging seeds; exported checkpoint: seed 44.",
        "This checkpoint is seed 44's run; the test figures are means over 2 judging seeds.",
        "| the published point (focal tau=0.07, m=0.3) | 87.09 ± 0.06 (n = 2) |",
        "| **this configuration** (focal tau=0.055, m=0.54) over its judging seeds | 87.23 ± 0.1 (n = 2) |",
        "| +0.14, 95% interval [-0.11, +0.39], n = 2, df = 1 |",
        "Seed noise (the pooled within-configuration std): 0.08, df = 3",
        "not distinguishable from the published point",
        "| untouched model (sentence-transformers/all-MiniLM-L6-v2, one evaluation) | 60.23 |",
        "| winner (sentence-transformers/all-MiniLM-L6-v2, wiki-sample, 16 steps, n = 2) | 61.23 ± 0.3 |",
        "bert-base-uncased trained on wiki1m. Not comparable",
        "| seed of this checkpoint | 44 |",
        "the winner's run on its first judging seed that finished",
        f"parent run `{store['parent']}`",
        "Optuna study | `raycse-focal` in the SQLite file `optuna.db` |",
        "(the SQLite file `mlflow.db`) |",
        "a demonstration of the mechanism",
        f"SentenceTransformer({exported.name!r})",
    ):
        assert words in text, words
    assert str(store["tmp"]) not in text and "/somewhere" not in text  # no path of the machine that exported it
    # the card makes only the comparisons the verdict makes: never the untouched model's one dev evaluation beside
    # the winner's best-of-curve dev mean; and it opens with the same answer block as the page and the printout
    assert "the untouched model (baseline, one evaluation)" not in text
    from raycse.reporting.answer import answer_block

    block = answer_block(_summary(0.0))  # the block reads no dev figure: the judged one and the exported seed
    assert 5 <= len(block) <= 8 and all(f"- {line}" in text for line in block)
    assert text.index("- Winner (focal)") < text.index("## How it was chosen")


def test_the_card_names_each_parameter_once_counts_in_number_and_no_local_path():
    """A winner that searched lr, judged with one seed on the test tasks, from a local base model and a local corpus,
    recorded in local stores: lr once at the precision searched, "1 seed", and none of this machine's paths."""
    from raycse.exporting import Provenance, model_card
    from raycse.reporting.card_facts import card_facts

    summary = _summary(87.2)
    summary["winner"]["params"] = {**WINNER, "lr": 4.0064836619643966e-05}
    summary["model"] = "/home/someone/models/tiny-bert"
    for row in summary["test_table"]["rows"]:
        row["model"] = summary["model"]
        row["figures"] = {task: {**figure, "n": 1, "std": None} for task, figure in row["figures"].items()}
    summary["trials"] = summary["trials"][:1] + summary["trials"][-1:]  # one configuration searched
    settings = {"model": summary["model"], "loss": "focal", "corpus": "/home/someone/data/wiki.txt",
                "lr": "4.0064836619643966e-05", "batch_size": "16", "max_steps": "16"}
    provenance = Provenance("sqlite:////home/someone/run/mlflow.db", "abc123", settings, POOLER)
    text = model_card(card_facts(summary), provenance, "tiny-model").content
    assert "4.006e-05" in text and "4.0064836619643966e-05" not in text  # at the precision searched, everywhere
    assert re.findall(r"^\| lr \|.*$", text, flags=re.MULTILINE) == ["| lr | 4.006e-05 |"]  # one row of settings
    assert "mean over 1 seed\n" in text and "1 configuration searched" in text and "1 fresh seed (43)" in text
    assert not re.search(r"\b1 (?:[a-z-]+ ){0,2}(?:seeds|configurations|runs|trials)\b", text)
    assert "/home/someone" not in text and "/somewhere" not in text and "/elsewhere" not in text
    assert "`tiny-bert` (a local directory)" in text and "`wiki.txt`" in text
    assert "SentenceTransformer('tiny-model')" in text


def test_the_card_says_whose_runs_its_test_figures_are_and_no_epochs_that_bounded_nothing():
    """The quick start's recorded answer (one judging seed, 43, scored on the test tasks; the checkpoint is seed 43's
    run; 16 steps under max_steps 16): its test figures are this checkpoint's own, and its epochs setting, which
    max_steps made moot, is not shown. With the test tasks on both judging seeds they are a mean, and the card says
    whether this checkpoint's seed is among them."""
    import json

    from raycse.exporting import Provenance, model_card
    from raycse.reporting.card_facts import card_facts

    record = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "quick-start-cpu" / "2026-11-26-cpu2"
    summary = json.loads((record / "search_summary.json").read_text())
    settings = {"model": "minilm", "loss": "focal", "corpus": "wiki-sample", "batch_size": "16", "max_steps": "16",
                "epochs": "1", "lr": "4.0064836619643966e-05"}
    provenance = Provenance("sqlite:///mlflow.db", "abc123", settings, POOLER)
    text = model_card(card_facts(summary), provenance).content
    assert "This checkpoint is seed 43's run, the one judging seed scored on the test tasks: the test figures are " \
           "this checkpoint's own." in text
    assert "not this checkpoint's own" not in text and "means over the judging seeds" not in text
    assert "| steps | 16 (max_steps: 256 training rows at batch 16);" in text
    assert not re.search(r"^\| epochs \|", text, flags=re.MULTILINE)
    unbounded = model_card(card_facts(summary), Provenance("sqlite:///mlflow.db", "abc123",
                                                           {**settings, "max_steps": ""}, POOLER)).content
    assert re.search(r"^\| epochs \| 1 \|$", unbounded, flags=re.MULTILINE)  # epochs ended it: shown

    winner = summary["winner"]["config_key"]
    seed_44 = next(t for t in summary["trials"] if t["stage"] == "judge" and t["config_key"] == winner
                   and t["seed"] == 44)
    registered = dict(summary["registered"])
    summary["registered"] = {**registered, "trial_id": seed_44["trial_id"], "seed": 44}  # another seed's checkpoint
    assert "This checkpoint is seed 44's run; the test figures are seed 43's run, the one scored on the test tasks, " \
           "not this one's." in model_card(card_facts(summary), provenance).content
    summary["registered"] = registered
    seed_44["test"] = dict(next(t["test"] for t in summary["trials"] if t["seed"] == 43 and t["test"]))
    text = model_card(card_facts(summary), provenance).content  # both seeds scored: a mean, 43's among them
    assert "the test figures are means over the 2 judging seeds scored on the test tasks (43-44), this " \
           "checkpoint's among them." in text


def test_reading_a_search_back_draws_no_progress_bar(store, capsys, monkeypatch):
    """`raycse.load()` (and report, export) read the summary with MLflow, which draws a tqdm "Downloading artifacts"
    bar for every download unless told not to; the command line tells it for its process, the Python API did not."""
    from raycse.reporting.load import latest_summary
    from raycse.tracking.tracker import Tracker

    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)  # a Python session's own environment
    capsys.readouterr()
    parent, summary = latest_summary(Tracker(store["uri"], EXPERIMENT))
    assert parent == store["parent"] and summary["experiment"] == EXPERIMENT
    captured = capsys.readouterr()
    assert "Downloading artifacts" not in captured.err + captured.out
    assert "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR" not in os.environ  # the user's environment is left as it was


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("raycse: error: "), err
    return err[0]


def test_bad_input_is_one_line_and_writes_nothing(store, tmp_path, capsys):
    uri = store["uri"]
    assert main(["export", "raycse-nope", str(tmp_path / "a"), "--tracking-uri", uri]) == 2
    assert "no MLflow experiment 'raycse-nope'" in _one_error_line(capsys)
    assert main(["export", "nothing-confirmed", str(tmp_path / "b"), "--tracking-uri", uri]) == 2
    assert "has no winner" in _one_error_line(capsys)
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    assert main(["export", EXPERIMENT, str(full), "--tracking-uri", uri]) == 2
    assert "exists and is not an empty directory" in _one_error_line(capsys)
    assert main(["export", EXPERIMENT, str(tmp_path / "c"), "--tracking-uri", uri, "--push-to-hub", "a/b/c"]) == 2
    assert "--push-to-hub" in _one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"] and [p.name for p in full.iterdir()] == ["mine.txt"]


def test_push_without_a_network_is_one_line_and_keeps_the_folder(store, tmp_path, capsys):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # tests/conftest.py: huggingface_hub refuses every request
    folder = tmp_path / "pushed"
    assert main(["export", EXPERIMENT, str(folder), "--tracking-uri", store["uri"],
                 "--push-to-hub", "someone/raycse-focal"]) == 1
    line = _one_error_line(capsys)
    assert line.startswith("raycse: error: --push-to-hub someone/raycse-focal: not pushed (OfflineModeIsEnabled")
    assert (folder / "README.md").is_file() and (folder / "model.safetensors").is_file()
    assert "SentenceTransformer('someone/raycse-focal')" in (folder / "README.md").read_text()


def test_the_export_example_on_a_finished_search(store, tmp_path, monkeypatch, capsys):
    """raycse.export's docstring example as a user pastes it after raycse.search("focal"), here on the search this
    module recorded: its store is the default one ($MLFLOW_TRACKING_URI), the working directory a fresh one."""
    from api_examples import run_example

    import raycse

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    result = run_example(raycse.export)["result"]
    assert str(result.folder) == "focal-model" and result.parent_run_id == store["parent"]
    assert (tmp_path / "focal-model" / "README.md").is_file()
    assert capsys.readouterr().out.strip().endswith("focal-model")


@pytest.mark.slow
def test_push_to_an_unreachable_hub_is_one_line(store, tmp_path):
    """Online mode, but the Hub's address refuses connections: what a machine without a network meets."""
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_none"}
    done = subprocess.run([sys.executable, "-m", "raycse", "export", EXPERIMENT, str(tmp_path / "m"),
                           "--tracking-uri", store["uri"], "--push-to-hub", "someone/raycse-focal"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("raycse: error: --push-to-hub someone/raycse-focal: not pushed ("), \
        done.stderr
    assert (tmp_path / "m" / "README.md").is_file()
