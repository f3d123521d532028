"""A loss of one's own: one file outside the package, named in a space file (./my_loss.py:MyLoss), an importable
module or an installed entry point; loaded and tried before anything starts, listed by `raycse losses`, searched,
recorded in MLflow with its file's SHA-256, and compared with `raycse compare` beside a built-in loss. A bad one is
refused in one line with exit 2, and nothing is written.

Each test gives its loss file a stem of its own: the driver imports a loss file under its stem, once per process.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch

from raycse.cli import main
from raycse.errors import ConfigError
from raycse.losses import Embeddings, build_loss, own
from raycse.settings.space import load_space

LOSS = '''"""InfoNCE whose positive cosine is lowered by a margin before the softmax (an additive-margin InfoNCE)."""
import torch

from raycse.losses import Declaration, Embeddings, Hyperparameter, Term, cos_sim


class CosineMargin(Term):
    declaration = Declaration(
        name="NAME",
        summary="InfoNCE with an additive margin on the positive cosine",
        paper="Wang et al., 2018: CosFace",
        section="eq. 4",
        hyperparameters={
            "tau": Hyperparameter(0.05, low=0.01, high=0.2, log=True),
            "margin": Hyperparameter(0.1, low=0.0, high=0.4),
        },
    )

    def forward(self, emb: Embeddings) -> torch.Tensor:
        sim = cos_sim(emb.z1, emb.z2)
        logits = (sim - self.hparams["margin"] * torch.eye(len(sim), device=sim.device)) / self.hparams["tau"]
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(sim), device=sim.device))
'''

SPACE = """\
model: {model}
loss: {loss}
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160}}
space: {space}
search: {{num_samples: 1, seed: 0, test_eval: none, scheduler: {{name: fifo}}, confirm: null}}
resources: {{workers: 1, cpus_per_worker: 1}}
"""


def write_loss(folder: Path, stem: str, text: str = LOSS, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.py"
    path.write_text(text.replace('name="NAME"', f'name="{name or stem.replace("_", "-")}"'))
    return path


def write_space(folder: Path, loss: str, model="minilm", space: str = "{margin: declared, tau: declared}",
                name: str = "mine") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(SPACE.format(model=model, loss=loss, space=space))
    return path


# ------------------------------------------------------------------------------------------ a good one
def test_a_loss_file_beside_the_space_file_is_loaded_checked_and_known_by_its_declared_name(tmp_path, monkeypatch):
    loss_file = write_loss(tmp_path / "spaces", "margin_a")
    space_file = write_space(tmp_path / "spaces", "./margin_a.py:CosineMargin")
    monkeypatch.chdir(tmp_path)  # elsewhere: the reference is read from the space file's folder
    space = load_space(str(space_file))
    (name, family), = space.families.items()
    assert name == "margin-a" and family.loss == "margin_a:CosineMargin" and family.reg is None
    # `declared`: the declaration's range, on its scale
    assert (family.space["tau"].kind, family.space["tau"].low, family.space["tau"].high) == ("loguniform", 0.01, 0.2)
    assert (family.space["margin"].kind, family.space["margin"].low, family.space["margin"].high) == ("uniform", 0, 0.4)
    (source,) = space.loss_sources()
    sha256 = hashlib.sha256(loss_file.read_bytes()).hexdigest()
    assert (source.name, source.key, source.sha256, Path(source.ship)) == ("margin-a", family.loss, sha256, loss_file)
    assert space.loss_tags(name) == {"raycse.loss_sha256.margin-a": sha256}
    config = space.trial_config({"margin": 0.3, "tau": 0.1}).validate()
    assert config.loss == "margin_a:CosineMargin" and config.hparams == {"margin": 0.3, "tau": 0.1}
    module = build_loss(config.loss, **config.hparams)
    z1, z2 = torch.randn(6, 8, requires_grad=True), torch.randn(6, 8)
    module(Embeddings(z1, z2)).backward()
    assert module.name == "margin-a" and z1.grad.abs().sum() > 0
    combined = build_loss(config.loss, reg="dcl")  # a user's loss takes a built-in regulariser like any loss
    assert combined.name == "margin-a+dcl" and set(combined.hparams) == {"tau", "margin", "lambda", "tau_dcl"}


def test_raycse_losses_lists_ones_own_loss_as_a_search_would_load_it(tmp_path, monkeypatch, capsys):
    write_loss(tmp_path, "margin_b")
    monkeypatch.chdir(tmp_path)
    assert main(["losses", "./margin_b.py:CosineMargin"]) == 0
    text = capsys.readouterr().out
    yours = text[text.index("\nyours\n"):]
    assert "  margin-b " in yours and "Wang et al., 2018: CosFace; eq. 4" in yours
    assert "tau 0.05 (in [0.01, 0.2], log scale), margin 0.1 (in [0, 0.4])" in yours
    assert str(tmp_path / "margin_b.py") in yours
    assert "  simcse " in text and "  focal " in text  # beside the built-in losses


def test_a_module_and_an_entry_point_name_a_loss_too_and_ship_their_package(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    write_loss(site / "margin_pkg", "losses", name="margin-ep")
    (site / "margin_pkg" / "__init__.py").write_text("")
    dist = site / "margin_pkg-0.1.dist-info"  # what `pip install` of a distribution declaring the entry point leaves
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: margin-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[raycse.losses]\nmargin-ep = margin_pkg.losses:CosineMargin\n")
    monkeypatch.syspath_prepend(str(site))
    own.entry_points.cache_clear()
    monkeypatch.setattr(own, "entry_points", own.entry_points.__wrapped__)  # the cache is this test's alone
    for reference in ("margin_pkg.losses:CosineMargin", "margin-ep"):
        space = load_space(str(write_space(tmp_path, reference)))
        (source,) = space.loss_sources()
        assert list(space.families) == ["margin-ep"] and source.key == "margin_pkg.losses:CosineMargin"
        assert Path(source.ship) == site / "margin_pkg"  # the package's folder: its modules import their siblings
    assert main(["losses"]) == 0
    text = capsys.readouterr().out
    assert "installed (entry points of the raycse.losses group)" in text and "  margin-ep " in text


def test_two_loss_files_of_one_name_are_refused_in_one_process(tmp_path):
    """A trial imports a loss file by its stem, wherever Ray shipped it: two files of one name cannot both be it."""
    load_space(str(write_space(tmp_path / "a", str(write_loss(tmp_path / "a", "margin_f")) + ":CosineMargin")))
    other = write_loss(tmp_path / "b", "margin_f")
    with pytest.raises(ConfigError, match=r"a module named 'margin_f' is already imported from .*/a/margin_f.py"):
        load_space(str(write_space(tmp_path / "b", f"{other}:CosineMargin")))


def test_a_trial_refuses_a_loss_file_that_is_not_the_one_the_search_started_with(tmp_path):
    loss_file = write_loss(tmp_path, "margin_c")
    (source,) = load_space(str(write_space(tmp_path, "./margin_c.py:CosineMargin"))).loss_sources()
    own.check_shipped(source)  # the same file: fine
    loss_file.write_text(loss_file.read_text() + "\n# edited\n")
    with pytest.raises(RuntimeError, match="is not the file the search started with"):
        own.check_shipped(source)
    elsewhere = dataclasses.replace(source, module="margin_nowhere")  # a node the file did not reach
    with pytest.raises(RuntimeError, match="'margin_nowhere' is not importable on this node: raycse ships"):
        own.check_shipped(elsewhere)


def test_a_searched_range_beyond_the_declared_one_is_refused_before_anything_starts(tmp_path, capsys):
    write_loss(tmp_path, "margin_g")
    space_file = write_space(tmp_path, "./margin_g.py:CosineMargin", space="{margin: {type: uniform, low: 0, high: 1}}")
    assert main(["search", "--space", str(space_file), "--storage-path", str(tmp_path / "ray"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 2
    err = capsys.readouterr().err
    assert err == f"raycse: error: {space_file}: margin-g at margin=1: margin=1 is out of range: must be in [0, 0.4]\n"


def test_declared_needs_a_closed_finite_range(tmp_path):
    with pytest.raises(ConfigError, match=r"space.tau: 'declared' needs a closed, finite declared range .*must be > 0"):
        load_space(str(write_space(tmp_path, "focal", space="{tau: declared}")))
    with pytest.raises(ConfigError, match=r"space.lr: 'declared' reads a loss hyperparameter's declaration"):
        load_space(str(write_space(tmp_path, "focal", space="{lr: declared}")))
    space = load_space(str(write_space(tmp_path, "focal", space="{m: declared}")))
    assert (space.families["focal"].space["m"].kind, space.families["focal"].space["m"].high) == ("uniform", 1.0)


# ------------------------------------------------------------------------------------------ bad ones
BAD = {
    "a syntax error": (LOSS.replace("def forward(self, emb: Embeddings)", "def forward(self, emb: Embeddings"),
                       "line 19: "),
    "an import error": ("import not_a_module_anywhere\n" + LOSS,
                        "importing it raised ModuleNotFoundError: No module named 'not_a_module_anywhere'"),
    "a missing declaration": (LOSS.replace("    declaration = Declaration(", "    described = dict("),
                              "CosineMargin has no declaration: give it `declaration = Declaration("),
    "a parameter without a range": (LOSS.replace("Hyperparameter(0.1, low=0.0, high=0.4)", "Hyperparameter(0.1)"),
                                    "hyperparameter 'margin' declares no range: give low= and high="),
    "a built-in's name": (LOSS.replace('name="NAME"', 'name="focal"'), "its name 'focal' is a built-in loss's"),
    "a non-scalar loss": (LOSS.replace("torch.arange(len(sim), device=sim.device))",
                                       "torch.arange(len(sim), device=sim.device), reduction='none')"),
                          "returned a tensor of shape (8,), not a scalar: reduce it over the batch"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_loss_is_one_line_exit_2_and_writes_nothing(case, tmp_path, capsys):
    text, words = BAD[case]
    stem = f"bad_{sorted(BAD).index(case)}"
    write_loss(tmp_path, stem, text)
    space_file = write_space(tmp_path, f"./{stem}.py:CosineMargin")
    before = sorted(tmp_path.rglob("*"))
    code = main(["search", "--space", str(space_file), "--storage-path", str(tmp_path / "ray"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"raycse: error: {space_file}: loss: loss './{stem}.py") and err.count("\n") == 1, err
    assert words in err, err
    assert sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in p.parts) == before  # nothing written
    assert main(["losses", str(tmp_path / f"{stem}.py:CosineMargin")]) == 2  # `raycse losses` says the same
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("reference, words", [
    ("./nowhere.py:CosineMargin", "loss file './nowhere.py' does not exist"),
    ("./margin_d.py:NoSuchClass", "has no 'NoSuchClass'"),
    ("./margin_d.py:torch", "torch is not a subclass of raycse.losses.Term"),
    ("no_such_package.losses:Loss", "is not on the Python path"),
    ("./margin_d.py", "unknown loss './margin_d.py'"),
    ("./margin-e.py:CosineMargin", "margin-e.py is not a Python module's name"),
])
def test_a_reference_that_names_no_loss_is_one_line(reference, words, tmp_path_factory):
    tmp_path = tmp_path_factory.getbasetemp() / "names-no-loss"  # one folder: the driver imports margin_d.py once
    write_loss(tmp_path, "margin_d")
    write_loss(tmp_path, "margin-e")
    with pytest.raises(ConfigError, match="^" + str(tmp_path / "mine.yaml").replace(".", r"\.") + ": loss: ") as err:
        load_space(str(write_space(tmp_path, reference)))
    assert words in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ searched and compared
@pytest.mark.usefixtures("few_sts_data")
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_ones_own_loss_is_searched_recorded_and_compared_with_simcse(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    """One `raycse compare` of the user's loss against simcse on the CPU budget's tiny settings (one search-stage
    trial each, judged on two seeds): the user's search samples its parameter from the declared range, MLflow keeps
    it as a parameter with the file's SHA-256 as a tag, and the comparison judges it beside simcse."""
    import ray
    from mlflow.tracking import MlflowClient

    from raycse.training.ray_runtime import start_ray
    from tests.test_search import small_dev_file

    monkeypatch.chdir(tmp_path)
    loss_file = write_loss(tmp_path / "elsewhere", "margin_loss", name="cosine-margin")
    objective = small_dev_file(tmp_path)
    confirm = "{top_k: 1, choose_seeds: 0, judge_seeds: 2}"
    texts = {"simcse": ("simcse", "{tau: {type: loguniform, low: 0.02, high: 0.2}}"),
             "margin": (f"{loss_file}:CosineMargin", "{margin: declared}")}
    spaces = {}
    for label, (loss, space) in texts.items():
        spaces[label] = tmp_path / "spaces" / f"{label}.yaml"
        spaces[label].parent.mkdir(exist_ok=True)
        spaces[label].write_text(SPACE.format(model=tiny_bert_dir, loss=loss, space=space).replace(
            "test_eval: none", "test_eval: best").replace("confirm: null", f"confirm: {confirm}")
            + f"objective: {objective}\n")

    ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False)  # a Ray that raycse did not start, shipping nothing
    with pytest.raises(ConfigError, match="Ray was started before raycse without shipping .*margin_loss.py"):
        start_ray(ship=[str(loss_file)])
    ray.shutdown()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    try:  # simcse first: the second search starts Ray again, now shipping the loss file
        code = main(["compare", "--space", str(spaces["simcse"]), "--space", str(spaces["margin"]), "--budget", "cpu",
                     "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray"), "--output-dir", "out"])
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    summary = json.loads((tmp_path / "out" / "compare_summary.json").read_text())
    assert sorted(arm["loss"] for arm in summary["arms"] if arm["role"] == "tuned") == ["margin", "simcse"]
    assert [(pair["a"], pair["b"]) for pair in summary["pairs"]] == [("simcse", "margin")]
    assert "simcse - margin" in " ".join(out.split())

    client = MlflowClient(tracking_uri=uri)
    sha256 = hashlib.sha256(loss_file.read_bytes()).hexdigest()
    experiment = client.get_experiment_by_name("compare-simcse-margin-margin")
    runs = client.search_runs([experiment.experiment_id])
    parent = next(run for run in runs if "raycse.search" in run.data.tags)
    assert parent.data.tags["raycse.loss_sha256.cosine-margin"] == sha256
    trials = [run for run in runs if run.data.tags.get("raycse.stage") in ("search", "judge")]
    assert len(trials) == 3 and all(run.info.status == "FINISHED" for run in trials)
    for run in trials:
        params, tags = run.data.params, run.data.tags
        assert params["loss"] == "margin_loss:CosineMargin" and params["loss_family"] == "cosine-margin"
        assert 0.0 <= float(params["margin"]) <= 0.4  # sampled from the declared range
        assert tags["raycse.loss_sha256.cosine-margin"] == sha256
    simcse = client.get_experiment_by_name("compare-simcse-margin-simcse")
    assert not any(key.startswith("raycse.loss_sha256.") for run in client.search_runs([simcse.experiment_id])
                   for key in run.data.tags)


def test_the_space_files_schema_takes_a_reference_and_declared(tmp_path):
    """An editor that checks space files against raycse/settings/space.schema.json accepts one's own loss."""
    import jsonschema
    import yaml

    schema = json.loads((Path(__file__).resolve().parent.parent / "raycse/settings/space.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    text = yaml.safe_load(write_space(tmp_path, "./my_loss.py:CosineMargin").read_text())
    assert not list(validator.iter_errors(text))
    assert list(validator.iter_errors({**text, "loss": "no such loss"}))  # a name that is neither
