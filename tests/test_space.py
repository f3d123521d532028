"""Search-space files: every shipped file validates, and each kind of mistake gets a one-line error naming the key."""
from pathlib import Path

import pytest

from raycse.cli import main
from raycse.errors import ConfigError
from raycse.settings.space import load_space

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))

GOOD = """\
experiment: t
loss: focal
train: {batch_size: 8, max_steps: 4, eval_steps: 2}
space:
  tau: {type: loguniform, low: 0.02, high: 0.2}
  m: {type: uniform, low: 0.0, high: 0.6}
published: {tau: 0.07, m: 0.3}
"""


def test_shipped_space_files_validate():
    names = {p.stem for p in SHIPPED}
    assert {"simcse", "focal", "imsimcse", "dclr", "barlow", "all", "simcse-sup", "triplet"} <= names
    for path in SHIPPED:
        space = load_space(path)
        assert space.points_to_evaluate(), f"{path.name} evaluates no published point"
        assert space.cpu_budget, f"{path.name} has no cpu_budget"


def test_focal_space_centres_on_the_paper():
    space = load_space(ROOT / "search_spaces" / "focal.yaml")
    assert space.points_to_evaluate() == [{"tau": 0.07, "m": 0.3, "lr": 3e-5}]
    assert set(space.families["focal"].space) == {"tau", "m", "lr"}
    assert space.paper["focal"]["figures"]["avg"] == {"mean": 77.33, "std": 0.08}  # mean ± std over seeds
    assert space.paper["focal"]["model"] == "bert-base-uncased"  # what the figures were measured on


def test_every_shipped_space_searches_the_learning_rate_over_a_decade_and_uses_the_models_pooler():
    for path in SHIPPED:
        space = load_space(path)
        assert space.base.pooler == "auto", path.name  # all-MiniLM-L6-v2's own mean pooling
        assert space.base.poolers() == ("avg", "avg"), path.name
        assert space.base.max_grad_norm == 1.0, path.name
        for name, family in space.families.items():
            lr = family.space["lr"]
            assert lr.kind == "loguniform" and lr.high / lr.low >= 10, (path.name, name)


def test_imsimcse_searches_the_parametrisation_the_paper_measured():
    family = load_space(ROOT / "search_spaces" / "imsimcse.yaml").families["imsimcse"]
    assert "pos_ratio" in family.space and "m" not in family.space
    assert family.published["pos_ratio"] == 0.9


def test_supervised_spaces_run_offline_on_the_sick_demonstration_set():
    from raycse.data.corpus import load_examples

    for name, loss in (("simcse-sup", "simcse-sup"), ("triplet", "triplet")):
        space = load_space(ROOT / "search_spaces" / f"{name}.yaml")
        config = space.with_cpu_budget().trial_config(space.published_sampled())
        assert config.loss == loss and config.sup_data == "sick-train"
        assert len(load_examples(config)) >= config.batch_size * 4


def test_cpu_budget_space_overrides_drop_a_searched_batch_size():
    space = load_space(ROOT / "search_spaces" / "simcse.yaml")
    assert "batch_size" in space.families["simcse"].space
    cpu = space.with_cpu_budget()
    assert "batch_size" not in cpu.families["simcse"].space and "batch_size" not in cpu.families["simcse"].published
    assert cpu.trial_config(cpu.published_sampled()).batch_size == 16
    assert "batch_size" in space.families["simcse"].space  # the original is left as it was


def test_conditional_space_prefixes_family_parameters():
    space = load_space(ROOT / "search_spaces" / "all.yaml")
    assert space.conditional and len(space.families) >= 4
    points = space.points_to_evaluate()
    assert {p["loss"] for p in points} == set(space.families)
    config = space.trial_config({"loss": "imsimcse", "imsimcse": {"tau": 0.1, "lambda": 0.2}})
    assert config.loss == "imsimcse" and config.hparams["tau"] == 0.1 and config.hparams["lambda"] == 0.2


def test_define_by_run_with_real_optuna():
    import optuna

    space = load_space(ROOT / "search_spaces" / "all.yaml")
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    families = set()
    for _ in range(12):
        trial = study.ask()
        space.define_by_run(trial)
        family = trial.params["loss"]
        families.add(family)
        assert all(name == "loss" or name.startswith(f"{family}/") for name in trial.params)
        study.tell(trial, 0.0)
    assert len(families) >= 2


@pytest.mark.parametrize("text, culprit", [
    ("loss: focal\nspace: {tau: {type: uniform, low: 0.1, high: 0.05}}\n", "space.tau"),
    ("loss: focal\nspace: {tau: {type: loguniform, low: 0.0, high: 0.05}}\n", "space.tau.low"),
    ("loss: focal\nspace: {tau: {type: gaussian, low: 0.1, high: 0.5}}\n", "space.tau.type"),
    ("loss: focall\n", "unknown loss 'focall'"),
    ("loss: simcse\nspace: {m: {type: uniform, low: 0.1, high: 0.5}}\n", "does not take 'm'"),
    ("loss: focal\nlearning_rate: 0.1\n", "unknown key 'learning_rate'"),
    ("loss: focal\ntrain: {batch_sise: 8}\n", "batch_sise"),
    ("loss: focal\ntrain: {batch_size: 0}\n", "batch_size"),
    ("loss: dclr\nspace: {phi: {type: uniform, low: 0.5, high: 1.5}}\n", "phi"),
    ("loss: dclr\nspace: {k: {type: uniform, low: -1, high: 1}}\n", "k"),
    ("loss: focal\nspace: {tau: {type: uniform, low: -0.1, high: 0.1}}\n", "tau"),
    ("loss: focal\npublished: {lr: 0.1}\n", "published.lr"),
    ("loss: focal\nsearch: {num_samples: 0}\n", "num_samples"),
    ("loss: focal\nresources: {gpus: 1}\n", "resources.gpus"),
    ("loss: focal\nresources: {gpus_per_worker: half}\n", "resources.gpus_per_worker: must be a number >= 0 or auto"),
    ("loss: focal\ncpu_budget: {resources: {gpus_per_worker: -1}}\n", "resources.gpus_per_worker"),
    ("loss: focal\nspace: [1, 2\n", "YAML syntax error at line"),
    ("- just\n- a list\n", "mapping"),
    ("loss: focal\ncorpus: /no/such/corpus.txt\n", "/no/such/corpus.txt"),
    ("loss: focal\nmodel: /no/such/model\n", "/no/such/model"),
    ("loss: focal\ncpu_budget: {train: {max_stepz: 3}}\n", "cpu_budget.train.max_stepz"),
    # a published point outside its own searched range (issue 17)
    ("loss: focal\nspace: {tau: {type: uniform, low: 0.1, high: 0.2}}\npublished: {tau: 0.07}\n", "published.tau"),
    ("loss: focal\nspace: {m: {type: categorical, choices: [0.1, 0.2]}}\npublished: {m: 0.3}\n", "published.m"),
    ("loss: focal\nsearch: {confirm: {judge_seeds: 1}}\n", "search.confirm.judge_seeds"),
    ("loss: focal\nsearch: {confirm: {judge_seeds: 3, test_seeds: 4}}\n", "search.confirm.test_seeds"),
    ("loss: focal\nsearch: {confirm: {test_seeds: 0}}\n", "search.confirm.test_seeds"),
    ("loss: focal\nsearch: {confirm: {top_k: 2, choose_seeds: 0}}\n", "search.confirm.choose_seeds"),
    ("loss: focal\nsearch: {confirm: {seeds: 2}}\n", "search.confirm.seeds"),
    ("loss: focal\nsearch: {confirm: {top_k: 1, seedz: 3}}\n", "search.confirm.seedz"),
    ("loss: focal\npaper: {focal: {STS12: [68.5, 0.1, 2]}}\n", "paper.focal.STS12"),
    ("loss: focal\nobjective: no_such_objective\n", "no_such_objective"),
    ("loss: simcse-sup\ntrain: {sup_data: /no/nli.csv}\n", "/no/nli.csv"),
])
def test_bad_space_files_name_the_culprit(tmp_path, text, culprit):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_space(path)
    message = str(err.value)
    assert culprit in message and "\n" not in message
    assert str(path) in message or "does not exist" in message


def test_cli_search_with_bad_space_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text("loss: focal\nspace: {tau: {type: uniform, low: 0.3, high: 0.1}}\n")
    assert main(["search", "--space", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("raycse: error:") and len(err.splitlines()) == 1 and "space.tau" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no mlflow.db, no ray_results


@pytest.mark.parametrize("budget", ["cpu_budget", "paper_budget"])
def test_a_budget_that_names_a_parameter_the_file_does_not_search_is_one_error(tmp_path, capsys, monkeypatch, budget):
    """simcse.yaml copied for a loss of one's own keeps `cpu_budget: space: {batch_size: null}` after its space no
    longer searches batch_size: a budget key that changes nothing is refused, naming the key and the file."""
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "search_spaces" / "simcse.yaml").read_text()
    space_start = text.index("\nspace:\n")
    space_end = text.index("\npublished:", space_start)
    text = (text[:space_start] + "\nspace:\n  tau: {type: loguniform, low: 0.01, high: 0.2}\n"
            + text[space_end:].replace("published: {tau: 0.05, lr: 3.0e-5, batch_size: 64}", "published: {tau: 0.05}"))
    if budget == "paper_budget":  # the copy's own cpu_budget mended; the paper's names a key it does not search
        text = text.replace("  space: {batch_size: null}", "").replace("paper_budget:\n",
                                                                      "paper_budget:\n  space: {m: null}\n", 1)
    path = tmp_path / "margin.yaml"
    path.write_text(text)
    key = "cpu_budget.space.batch_size" if budget == "cpu_budget" else "paper_budget.space.m"
    with pytest.raises(ConfigError) as err:
        load_space(path)
    assert key in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)
    assert main(["search", "--space", str(path), "--dry-run", "--step-ms", "10"]) == 2
    out = capsys.readouterr().err.strip()
    assert out.startswith("raycse: error:") and len(out.splitlines()) == 1 and key in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["margin.yaml"]


def test_own_loss_md_suggests_a_first_space_without_a_budget_that_loads(tmp_path):
    """docs/own-loss.md's first space file, beside its loss file, both as the page writes them, loads as it is and
    has no budget block."""
    import re

    page = (ROOT / "docs" / "own-loss.md").read_text()
    loss = re.search(r"```python\n(# my_loss.py\n.*?)```", page, re.S)[1]
    first = re.findall(r"```yaml\n(.*?)```", page, re.S)[0]
    before = page[:page.index(first)].rsplit("\n\n", 2)[-2]  # the paragraph that introduces the first file
    assert "first try" in before and "no budget block" in before and "cp search_spaces" not in before, before
    (tmp_path / "my_loss.py").write_text(loss)
    (tmp_path / "margin.yaml").write_text(first)
    space = load_space(tmp_path / "margin.yaml")
    assert space.cpu_budget is None and space.paper_budget is None and "budget" not in first
    assert set(space.families["cosine-margin"].space) == {"margin", "tau"}


def test_missing_and_binary_space_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_space(tmp_path / "nope.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"loss: \xff\xfe focal\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_space(binary)


def test_good_space_round_trip(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    space = load_space(path)
    config = space.trial_config({"tau": 0.1, "m": 0.2})
    assert (config.loss, config.hparams, config.batch_size) == ("focal", {"tau": 0.1, "m": 0.2}, 8)


def test_cpu_budgets_score_every_trial_at_least_twice():
    from raycse.data.corpus import GlobalBatches, load_examples

    for path in SHIPPED:
        space = load_space(path).with_cpu_budget()
        assert space.budget == "cpu" and space.num_samples >= 4
        steps = space.base.max_steps or len(GlobalBatches(load_examples(space.base), space.base.batch_size, 0)) * \
            space.base.epochs
        evals = steps // space.base.eval_steps
        assert evals >= 2, path.name
        assert space.confirm is not None and space.confirm.judge_seeds >= 2, path.name  # the answer has an interval
        # ASHA may stop a trial only after grace_evals evaluations
        assert space.scheduler["name"] == "fifo" or space.scheduler["grace_evals"] >= 2, path.name


@pytest.mark.parametrize("text, words", [
    # strict YAML: a key written twice names the key and both lines
    ("loss: focal\nloss: simcse\n", ["duplicate key 'loss' at lines 1 and 2"]),
    ("loss: focal\ntrain:\n  batch_size: 8\n  lr: 1.0e-4\n  batch_size: 16\n",
     ["duplicate key 'train.batch_size' at lines 3 and 5"]),
    # a value of the wrong type names the key and the type expected
    ("loss: focal\nsearch: {num_samples: \"4\"}\n", ["search.num_samples", "integer", "a string '4'"]),
    ("loss: focal\ntrain: {batch_size: [1]}\n", ["batch_size", "integer", "a list [1]"]),
    ("loss: focal\ntrain: {pooler: 5}\n", ["pooler", "must be a string, got an integer 5"]),
    ("loss: focal\ntrain: {hparams: [1]}\n", ["hparams", "mapping"]),
    ("loss: focal\ncpu_budget: {train: {lr: fast}}\n", ["cpu_budget.train", "lr", "a string 'fast'"]),
    ("loss: focal\nreg: [dcl]\n", ["reg", "['dcl']"]),
    ("loss: focal\nspace: {pooler: {type: categorical, choices: [[1]]}}\n", ["space.pooler.choices"]),
    ("loss: focal\nsearch: {seed: 1" + "0" * 5000 + "}\n", ["search.seed", "5,001 digits"]),
    # empty values: an empty section is an empty mapping, an empty setting that needs a value is named
    ("loss: focal\nmodel:\n", ["model", "nothing (null)"]),
    ("loss:\n", ["loss", "unknown loss None"]),
    ("", ["empty file"]),
    # names that become paths
    ("experiment: " + "x" * 5000 + "\nloss: focal\n", ["experiment", "too long", "5,000 characters"]),
    ("experiment: a/b\nloss: focal\n", ["experiment", "'/'"]),
    # settings that cannot learn
    ("loss: focal\ntrain: {batch_size: 1}\n", ["batch_size", "at least 2", "negatives"]),
    ("loss: imsimcse\ntrain: {batch_size: 2}\n", ["batch_size", "at least 3", "correlations"]),
    ("loss: focal\ntrain: {max_steps: 4, eval_steps: 8}\n", ["eval_steps", "beyond the run's 4 step(s)"]),
    ("loss: focal\ntrain: {max_len: 2}\n", ["max_len", ">= 3"]),
])
def test_strict_space_files_name_the_key_and_why(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_space(path)
    message = str(err.value)
    assert "\n" not in message and len(message) < 1000
    for word in words:
        assert word in message, (word, message)


def test_empty_sections_are_empty(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("loss: focal\nspace:\npublished:\ncpu_budget: {scheduler: , train: }\n")
    space = load_space(path)
    assert space.families["focal"].space == {} and space.with_cpu_budget().scheduler["name"] == "asha"


def test_a_batch_the_corpus_cannot_hold_is_found_before_the_search_starts(tmp_path):
    """The largest searched batch size against the corpus, opened once for every corner (preflight.py)."""
    from raycse.driver.preflight import open_space_inputs

    corpus = tmp_path / "small.txt"
    corpus.write_text("".join(f"sentence {i} .\n" for i in range(40)))
    path = tmp_path / "space.yaml"
    path.write_text(f"corpus: {corpus}\nloss: simcse\ntrain: {{batch_size: 16, max_steps: 2, eval_steps: 1}}\n"
                    "space: {batch_size: {type: categorical, choices: [16, 64]}}\n")
    space = load_space(path)  # valid as written: only the data tells
    with pytest.raises(ConfigError, match=r"batch_size=64: corpus: .* 40 examples .* fewer than one batch"):
        open_space_inputs(space)


def test_a_top_level_key_is_named_as_the_file_has_it(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "experiment: x\ncorpus: /no/such.txt\nloss: focal\nspace:\n  tau: {type: loguniform, low: 0.02, high: 0.2}\n")
    with pytest.raises(ConfigError) as err:
        load_space(tmp_path / "s.yaml")
    assert "s.yaml: corpus: " in str(err.value) and "train: corpus" not in str(err.value)
