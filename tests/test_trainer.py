"""The training loop on a tiny random BERT: every loss trains, results.json, seeding, the best checkpoint, only the
forward passes a loss needs, and divergence detection."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from sts_reference import stsb_dev

from raycse.data.corpus import GlobalBatches
from raycse.encoder.model import Encoder
from raycse.evaluation.sts import SEVEN_TASKS
from raycse.settings.config import TrainConfig
from raycse.training.batches import BatchTokenizer, training_loader
from raycse.training.step_runner import StepRunner, dropout_disabled
from raycse.training.trainer import NONFINITE_CHECK_EVERY, TrainingDiverged, load_complementary, train

UNSUPERVISED = ("simcse", "focal", "off-dropout", "dclr", "triplet", "imsimcse", "simcse+dcl", "simcse+barlow")
SUPERVISED = ("simcse-sup", "triplet")
RESULT_KEYS = {"objective", "best_objective", "best_step", "dev_curve", "sentences_per_s", "wall_seconds", "config",
               "timings", "compile_decision", "poolers"}
TEST_EVAL_KEYS = {*SEVEN_TASKS, "avg", "alignment", "uniformity"}


@pytest.fixture(scope="module")
def nli_csv(tmp_path_factory, sentences) -> Path:
    """SimCSE's NLI format (sent0, sent1, hard_neg): 32 rows made from the shared sentences."""
    path = tmp_path_factory.mktemp("nli") / "nli.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sent0", "sent1", "hard_neg"])
        for i, sentence in enumerate(sentences):
            writer.writerow([sentence, f"it is true that {sentence}", sentences[(i + 5) % len(sentences)]])
            writer.writerow([f"today {sentence}", sentence, f"it is false that {sentence}"])
    return path


def tiny_config(model: Path, output_dir: Path, **overrides) -> TrainConfig:
    settings = dict(model=str(model), loss="simcse", batch_size=8, lr=1e-3, max_steps=2, eval_steps=2,
                    max_sentences=64, seed=3, test_eval=False, output_dir=str(output_dir))
    settings.update(overrides)
    return TrainConfig(**settings).validate()


# ------------------------------------------------------------------------------------ one full training
@pytest.fixture(scope="module")
def full_run(tiny_bert_dir, tmp_path_factory):
    """One training with the final test evaluation, watched at every evaluation (shared by several tests, all
    marked slow: the test evaluation encodes every sentence of the seven STS test sets)."""
    output_dir = tmp_path_factory.mktemp("full") / "run"
    config = tiny_config(tiny_bert_dir, output_dir, max_steps=4, eval_steps=2, test_eval=True)
    reports, listings = [], []

    def on_eval(report):
        reports.append(report)
        listings.append(sorted(p.name for p in output_dir.iterdir()))

    results = train(config, on_eval=on_eval)
    return {"config": config, "results": results, "reports": reports, "listings": listings, "dir": output_dir}


@pytest.mark.slow
def test_results_json_holds_every_figure(full_run):
    written = json.loads((full_run["dir"] / "results.json").read_text())
    assert RESULT_KEYS | TEST_EVAL_KEYS <= written.keys()
    assert written["config"] == full_run["config"].to_dict()
    assert written["steps"] == 4 and written["world_size"] == 1
    assert [point["step"] for point in written["dev_curve"]] == [2, 4]
    assert all(math.isfinite(point["train_loss"]) for point in written["dev_curve"])
    best = max(written["dev_curve"], key=lambda point: point["objective"])
    assert written["best_objective"] == best["objective"] and written["best_step"] == best["step"]
    assert all(point["objective"] == point["stsb_dev"] for point in written["dev_curve"])  # the default objective
    assert written["sentences_per_s"] > 0 and written["wall_seconds"] > 0
    for key in TEST_EVAL_KEYS:
        assert math.isfinite(written[key]), key
    assert written["avg"] == pytest.approx(sum(written[task] for task in SEVEN_TASKS) / 7)
    assert written["alignment"] >= 0 and written["uniformity"] <= 0
    # what train() returns is what it wrote
    assert json.loads(json.dumps(full_run["results"])) == written


@pytest.mark.slow
def test_eval_reports_follow_the_dev_curve(full_run):
    reports, results = full_run["reports"], full_run["results"]
    assert [r.step for r in reports] == [2, 4] and all(r.total_steps == 4 for r in reports)
    assert [r.objective for r in reports] == [point["objective"] for point in results["dev_curve"]]
    assert all(r.dev_scores == {"stsb_dev": r.objective} for r in reports)
    assert all(r.checkpoint == str(full_run["dir"]) for r in reports)  # best/ and last/ are written at each one
    assert reports[-1].best_objective == results["best_objective"]
    timings = reports[-1].timings
    assert timings.startup_s > 0 and timings.train_s > 0 and timings.eval_s > 0 and timings.checkpoint_s > 0
    assert timings.compile_s == 0  # CPU: never compiled
    assert reports[-1].compile_decision.startswith("eager")


@pytest.mark.slow
def test_checkpoints_are_written_atomically(full_run):
    # At every evaluation, and at the end, the output directory holds the finished checkpoints and nothing
    # half-written: no staging (.best.*.partial, .last.*.partial) or retired (.*.old) directory is left behind.
    for listing in full_run["listings"]:
        assert listing == ["best", "last"]
    assert sorted(p.name for p in full_run["dir"].iterdir()) == ["best", "last", "results.json"]
    assert not [p for p in full_run["dir"].parent.rglob(".*")]


@pytest.mark.slow
def test_best_checkpoint_loads_in_sentence_transformers_and_transformers(full_run):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    best = full_run["dir"] / "best"
    assert AutoModel.from_pretrained(best).config.hidden_size == 32
    model = SentenceTransformer(str(best), device="cpu")

    def encode(sentences):
        return torch.as_tensor(model.encode(sentences, batch_size=128, convert_to_numpy=True))

    rescored = stsb_dev(encode)
    assert rescored == pytest.approx(full_run["results"]["best_objective"], abs=0.05)
    # unsupervised 'cls' training keeps the checkpoint without its MLP head (SimCSE's mlp_only_train)
    assert json.loads((best / "raycse_pooler.json").read_text()) == {"pooler": "cls_before_pooler"}


@pytest.mark.slow
def test_the_same_seed_gives_the_same_dev_figures(full_run, tiny_bert_dir, tmp_path):
    # The test evaluation runs after the last dev evaluation, so it cannot change the dev curve.
    again = train(tiny_config(tiny_bert_dir, tmp_path / "again", max_steps=4, eval_steps=2))
    assert again["dev_curve"] == full_run["results"]["dev_curve"]
    assert again["best_objective"] == full_run["results"]["best_objective"]

    # Everything as in `again` but the seed: so the curves can differ only through it (reaching data and dropout).
    other = train(tiny_config(tiny_bert_dir, tmp_path / "other", max_steps=4, eval_steps=2, seed=4))
    assert [p["step"] for p in other["dev_curve"]] == [2, 4]
    for mine, theirs in zip(other["dev_curve"], full_run["results"]["dev_curve"]):
        assert mine["train_loss"] != theirs["train_loss"] and mine["objective"] != theirs["objective"], (mine, theirs)


# ------------------------------------------------------------------------------------- every loss trains
@pytest.mark.slow  # a training per loss (their formulas: test_losses.py)
@pytest.mark.parametrize("loss", UNSUPERVISED)
def test_each_unsupervised_loss_and_preset_trains(tiny_bert_dir, tmp_path, loss):
    results = train(tiny_config(tiny_bert_dir, tmp_path / "out", loss=loss))
    check_trained(results, tmp_path / "out", loss)


@pytest.mark.slow  # a training per loss
@pytest.mark.parametrize("loss", SUPERVISED)
def test_each_supervised_loss_trains_on_nli_triplets(tiny_bert_dir, nli_csv, tmp_path, loss):
    results = train(tiny_config(tiny_bert_dir, tmp_path / "out", loss=loss, sup_data=str(nli_csv), batch_size=4))
    check_trained(results, tmp_path / "out", loss)
    # supervised training evaluates and saves with the training pooler ('cls' with its MLP head)
    assert json.loads((tmp_path / "out" / "best" / "raycse_pooler.json").read_text()) == {"pooler": "cls"}


def check_trained(results: dict, output_dir: Path, loss: str) -> None:
    # A non-finite loss would have raised TrainingDiverged at the last step; the mean loss must be a number.
    assert results["steps"] == 2
    assert [point["step"] for point in results["dev_curve"]] == [2]
    assert math.isfinite(results["dev_curve"][0]["train_loss"])
    assert math.isfinite(results["best_objective"]) and results["best_step"] == 2
    assert results["config"]["loss"] == loss
    assert json.loads((output_dir / "results.json").read_text())["best_objective"] == results["best_objective"]
    assert (output_dir / "best" / "model.safetensors").is_file()


# ----------------------------------------------------------------------------- only the passes a loss needs
@pytest.mark.parametrize("loss, expected_passes, complementary_passes", [
    ("simcse", [("2N", "dropout on")], []),
    ("simcse+barlow", [("2N", "dropout on")], []),
    # ImSimCSE: one forward of 3N rows, dropout on the first 2N only (the off rows' values: the test below)
    ("off-dropout", [("3N", "dropout on")], []),
    ("imsimcse", [("3N", "dropout on")], []),
    ("dclr", [("2N", "dropout on")], [("N", "frozen")]),
    ("simcse-sup", [("3N", "dropout on")], []),
])
def test_only_the_forward_passes_a_loss_needs_run(tiny_bert_dir, nli_csv, sentences, loss, expected_passes,
                                                   complementary_passes):
    supervised = loss == "simcse-sup"
    config = tiny_config(tiny_bert_dir, Path("unused"), loss=loss, batch_size=4,
                         sup_data=str(nli_csv) if supervised else None)
    from raycse.data.corpus import load_examples
    from raycse.losses import build_loss

    device = torch.device("cpu")
    loss_fn = build_loss(loss)
    encoder = Encoder.from_pretrained(str(tiny_bert_dir), pooler="cls").train()
    complementary = load_complementary(config, device) if loss_fn.needs_complementary else None
    runner = StepRunner(encoder, loss_fn, config, device, total_steps=2, complementary=complementary)
    batch = load_examples(config)[:4] if supervised else sentences[:4]
    n = len(batch)

    def recorder(log):
        def hook(module, args, kwargs, output):
            dropout_on = [m.training for m in module.modules() if isinstance(m, torch.nn.Dropout)]
            assert len(set(dropout_on)) == 1  # all dropout modules agree
            rows = kwargs["input_ids"].shape[0]
            log.append({"rows": {n: "N", 2 * n: "2N", 3 * n: "3N"}[rows], "dropout": dropout_on[0],
                        "grad": output.last_hidden_state.requires_grad})
        return hook

    passes, frozen_passes = [], []
    encoder.backbone.register_forward_hook(recorder(passes), with_kwargs=True)
    if complementary is not None:
        complementary.backbone.register_forward_hook(recorder(frozen_passes), with_kwargs=True)

    before = {name: p.detach().clone() for name, p in encoder.named_parameters()}
    loss_value = runner.step(batch)
    assert torch.isfinite(loss_value)

    described = [(p["rows"], "dropout on" if p["dropout"] else "dropout off") for p in passes]
    assert described == expected_passes
    assert all(p["grad"] for p in passes)  # the dropout-off pass keeps its gradients (ImSimCSE)
    assert [(p["rows"], "frozen") for p in frozen_passes if not p["dropout"] and not p["grad"]] == complementary_passes
    assert len(frozen_passes) == len(complementary_passes)
    assert encoder.training  # back in training mode after the dropout-off pass
    changed = [name for name, p in encoder.named_parameters() if not torch.equal(p, before[name])]
    assert "mlp.0.weight" in changed and "backbone.encoder.layer.0.attention.self.query.weight" in changed


def test_one_pass_gives_two_dropout_views_and_the_off_pass_has_no_dropout(tiny_bert_dir, sentences):
    config = tiny_config(tiny_bert_dir, Path("unused"), loss="off-dropout", batch_size=4)
    from raycse.losses import build_loss

    torch.manual_seed(0)
    encoder = Encoder.from_pretrained(str(tiny_bert_dir), pooler="cls").train()
    runner = StepRunner(encoder, build_loss("off-dropout"), config, torch.device("cpu"), total_steps=1)
    emb = runner.embeddings(sentences[:4])
    assert not torch.allclose(emb.z1, emb.z2)  # independent dropout masks within one forward of 2N rows
    with torch.no_grad(), dropout_disabled(encoder):
        without_dropout = encoder(**encoder.tokenize(sentences[:4], max_len=config.max_len))
    torch.testing.assert_close(emb.z0.detach(), without_dropout, rtol=1e-5, atol=1e-6)
    assert emb.z0.requires_grad


# ----------------------------------------------------------------------------------------- the data loader
def assert_same_tokens(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name


# 0: the CPU default; 1, 3: the CUDA path's worker processes (3 does not divide the 7 steps: unequal shards)
@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("rank", [0, 1])
def test_the_loader_yields_the_tokens_of_the_global_batches(tiny_bert_dir, sentences, rank, num_workers):
    # Rank r of 2 workers: the loader's stream is GlobalBatches' epochs back to back, cut after `steps` (here in
    # the second epoch), each batch tokenised exactly as Encoder.tokenize tokenises it.
    from raycse.losses import build_loss

    device = torch.device("cpu")
    config = tiny_config(tiny_bert_dir, Path("unused"), batch_size=3)
    encoder = Encoder.from_pretrained(str(tiny_bert_dir))
    runner = StepRunner(encoder, build_loss("simcse"), config, device, total_steps=7)
    batches = GlobalBatches(sentences, config.batch_size, seed=7, rank=rank, world_size=2)  # 2 steps an epoch
    expected = [batch for epoch in range(4) for batch in batches.epoch(epoch)][:7]

    torch.manual_seed(0)
    loaded = list(training_loader(batches, 4, 7, runner.tokenize, device, seed=7, num_workers=num_workers))
    # the loader draws nothing from the global generator: the training's dropout masks stay where they were
    after_loading = torch.rand(4)
    torch.manual_seed(0)
    assert torch.equal(after_loading, torch.rand(4))

    assert len(loaded) == len(expected) == 7
    for tokenized, batch in zip(loaded, expected):
        assert (tokenized.n, tokenized.supervised, tokenized.first_rows) == (len(batch), False, None)
        assert_same_tokens(tokenized.rows, encoder.tokenize(batch, max_len=config.max_len))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_loader_tokenises_triplets_as_3n_rows_and_the_sent0s_alone(tiny_bert_dir, sentences, num_workers):
    device = torch.device("cpu")
    encoder = Encoder.from_pretrained(str(tiny_bert_dir))
    triplets = [(s, f"it is true that {s}", sentences[(i + 5) % len(sentences)]) for i, s in enumerate(sentences)]
    batches = GlobalBatches(triplets, 4, seed=3, rank=1, world_size=2)
    tokenize = BatchTokenizer(encoder.tokenizer, max_len=32, first_rows=True)  # as for a loss with an N-row pass

    loaded = list(training_loader(batches, 1, len(batches), tokenize, device, seed=3, num_workers=num_workers))

    assert len(loaded) == len(batches) == 2
    for tokenized, batch in zip(loaded, batches.epoch(0)):
        sent0s, sent1s, hard_negs = (list(column) for column in zip(*batch))
        assert (tokenized.n, tokenized.supervised) == (4, True)
        assert_same_tokens(tokenized.rows, encoder.tokenize(sent0s + sent1s + hard_negs, max_len=32))
        assert_same_tokens(tokenized.first_rows, encoder.tokenize(sent0s, max_len=32))


def test_cuda_padding_rounds_lengths_up_to_multiples_of_8_without_changing_the_vectors(tiny_bert_dir, sentences):
    encoder = Encoder.from_pretrained(str(tiny_bert_dir), pooler="avg").eval()
    plain = BatchTokenizer(encoder.tokenizer, max_len=32, first_rows=False)
    padded = BatchTokenizer(encoder.tokenizer, max_len=32, first_rows=False, pad_to_multiple_of=8)
    batch = sentences[:5]
    rows, rounded = plain(batch).rows, padded(batch).rows

    length = rows["input_ids"].shape[1]
    assert length % 8 != 0  # else the test shows nothing
    assert rounded["input_ids"].shape[1] == -(-length // 8) * 8
    assert torch.equal(rounded["input_ids"][:, :length], rows["input_ids"])
    assert not rounded["attention_mask"][:, length:].any()  # the added columns are masked padding
    with torch.no_grad():
        torch.testing.assert_close(encoder(**rounded), encoder(**rows), atol=1e-5, rtol=1e-5)


def test_the_cpu_step_uses_fused_adamw_and_steps_as_the_per_tensor_one_would(tiny_bert_dir, sentences):
    """Fused AdamW on the CPU (8% of a MiniLM step, benchmarks/peer-comparison.md) is a speed change only: from the
    same weights and the same gradients, its step lands where torch's per-tensor AdamW lands."""
    from raycse.losses import build_loss

    config = tiny_config(tiny_bert_dir, Path("unused"))
    runs = []
    for fused in (None, False):  # None: the optimiser the runner builds
        torch.manual_seed(0)
        runner = StepRunner(Encoder.from_pretrained(str(tiny_bert_dir)).train(), build_loss("simcse"), config,
                            torch.device("cpu"), total_steps=3)
        start = [p.detach().clone() for p in runner.parameters]
        if fused is not None:
            runner.optimizer = torch.optim.AdamW(runner.parameters, lr=config.lr, fused=False)
            runner.scheduler = torch.optim.lr_scheduler.LambdaLR(runner.optimizer, lambda step: 1.0 - step / 3)
        for k in range(2):
            runner.step(sentences[4 * k:4 * k + 4])
        runs.append((runner.optimizer.defaults.get("fused"), [p.detach().clone() for p in runner.parameters]))
    (fused, stepped), (per_tensor, reference) = runs
    assert fused is True and not per_tensor
    # the steps moved the weights (both runs started from the same ones): the comparison below means something
    assert max((a - b).abs().max().item() for a, b in zip(stepped, start)) > 1e-5
    for a, b in zip(stepped, reference):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_compile_policy(tiny_bert_dir):
    from raycse.losses import build_loss
    from raycse.training.compile_policy import decide_compile

    config = tiny_config(tiny_bert_dir, Path("unused"))
    assert config.compile == "auto"
    runner = StepRunner(Encoder.from_pretrained(str(tiny_bert_dir)), build_loss("simcse"), config,
                        torch.device("cpu"), total_steps=1)
    assert runner.compiled is False and runner.forward is runner.encoder
    assert runner.tokenize.pad_to_multiple_of is None  # CPU batches keep their exact length

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert decide_compile("always", cpu, 10**6, 0.1, None)[0] is False  # CUDA graphs need CUDA
    assert decide_compile("always", cuda, 1, None, None)[0] is True
    assert decide_compile("never", cuda, 10**6, 0.1, None)[0] is False
    # auto: 186 steps of 10 ms save ~1.1 s compiled, far below 40 s of compiling; 15,000 steps of 36 ms save ~324 s
    short, reason = decide_compile("auto", cuda, 186, 0.010, None)
    assert short is False and reason.startswith("eager") and "186 steps" in reason
    assert decide_compile("auto", cuda, 15_000, 0.036, None)[0] is True
    # a compile measured faster on this node (a warm cache) tips a middling training over
    assert decide_compile("auto", cuda, 2_000, 0.036, 40.0)[0] is True
    assert decide_compile("auto", cuda, 2_000, 0.036, 60.0)[0] is False


# ------------------------------------------------------------------------------------------------ diverging
@pytest.fixture(scope="module")
def nan_bert_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT with NaN in one LayerNorm weight: every forward pass, hence every loss, is NaN.

    A poisoned weight makes the failure certain and immediate. A huge learning rate or a tiny temperature would
    only make divergence likely: on a random 32-wide BERT the first steps can stay finite for a while.
    """
    from transformers import AutoTokenizer, BertModel

    path = tmp_path_factory.mktemp("nan-bert")
    model = BertModel.from_pretrained(tiny_bert_dir)
    with torch.no_grad():
        model.embeddings.LayerNorm.weight[0] = float("nan")
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(path)
    return path


def test_a_non_finite_loss_raises_training_diverged(nan_bert_dir, tmp_path):
    # the only evaluation at the last step: the flag is checked every NONFINITE_CHECK_EVERY steps (no host sync
    # per step), so the NaN of step 1 is reported at that step, before any evaluation or checkpoint.
    evaluations = []
    config = tiny_config(nan_bert_dir, tmp_path / "out", max_steps=NONFINITE_CHECK_EVERY + 2,
                         eval_steps=NONFINITE_CHECK_EVERY + 2, max_sentences=None)
    with pytest.raises(TrainingDiverged) as err:
        train(config, on_eval=evaluations.append)
    assert err.value.step == NONFINITE_CHECK_EVERY
    assert "non-finite" in str(err.value)
    assert evaluations == []
    assert not (tmp_path / "out" / "best").exists() and not (tmp_path / "out" / "results.json").exists()


def test_a_non_finite_loss_on_the_last_step_is_caught_before_evaluating(nan_bert_dir, tmp_path):
    evaluations = []
    with pytest.raises(TrainingDiverged) as err:
        train(tiny_config(nan_bert_dir, tmp_path / "out", max_steps=2, eval_steps=2), on_eval=evaluations.append)
    assert err.value.step == 2 and evaluations == []


# ----------------------------------------------------------------------------------------------- resuming
class Interrupted(Exception):
    pass


@pytest.mark.slow
def test_a_resumed_training_ends_as_the_uninterrupted_one(tiny_bert_dir, tmp_path):
    # dropout masks, data order and the LR schedule all continue where last/ left them: the same curve, exactly
    settings = dict(max_steps=6, eval_steps=2, loss="dclr")  # DCLR also draws its noise negatives from the RNG
    whole = train(tiny_config(tiny_bert_dir, tmp_path / "whole", **settings))

    def stop_at_step_4(report):
        if report.step == 4:
            raise Interrupted

    config = tiny_config(tiny_bert_dir, tmp_path / "broken", **settings)
    with pytest.raises(Interrupted):
        train(config, on_eval=stop_at_step_4)
    assert not (tmp_path / "broken" / "results.json").exists()
    resumed_reports = []
    resumed = train(config, on_eval=resumed_reports.append, resume=True)

    assert [r.step for r in resumed_reports] == [6]  # steps 1-4 were not trained again
    assert resumed["dev_curve"] == whole["dev_curve"]
    assert resumed["best_objective"] == whole["best_objective"] and resumed["best_step"] == whole["best_step"]
    assert resumed["steps"] == 6


def test_resuming_without_last_is_a_clean_error(tiny_bert_dir, tmp_path):
    from raycse.errors import ConfigError

    with pytest.raises(ConfigError, match="holds no training_state.pt"):
        train(tiny_config(tiny_bert_dir, tmp_path / "fresh"), resume=True)


# ----------------------------------------------------------------------------------------------- the recipe
def test_gradients_are_clipped_to_max_grad_norm(tiny_bert_dir, sentences):
    from raycse.losses import build_loss

    def first_step_change(max_grad_norm: float) -> float:
        torch.manual_seed(0)
        encoder = Encoder.from_pretrained(str(tiny_bert_dir), pooler="cls").train()
        config = tiny_config(tiny_bert_dir, Path("unused"), max_grad_norm=max_grad_norm, lr=1.0)
        runner = StepRunner(encoder, build_loss("simcse", tau=0.01), config, torch.device("cpu"), total_steps=10)
        norms = []
        runner.optimizer.register_step_pre_hook(lambda opt, args, kwargs: norms.append(
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in runner.parameters if p.grad is not None]))))
        runner.step(sentences[:8])
        return float(norms[0])

    assert first_step_change(0.0) > 0.5  # unclipped, the gradient of this loss is far above the bound below
    assert first_step_change(0.5) == pytest.approx(0.5, rel=1e-4)


def test_dclr_diagnostics_reach_the_eval_report(tiny_bert_dir, tmp_path):
    reports = []
    train(tiny_config(tiny_bert_dir, tmp_path / "out", loss="dclr", hparams={"phi": 0.0}), on_eval=reports.append)
    stats = reports[-1].loss_stats
    assert set(stats) == {"dclr_removed_fraction", "dclr_noise_logit"}
    assert stats["dclr_removed_fraction"] == pytest.approx(1.0)  # phi = 0 drops every negative with s >= 0 ...
    reports.clear()
    train(tiny_config(tiny_bert_dir, tmp_path / "out2", loss="dclr", hparams={"phi": 1.0}), on_eval=reports.append)
    assert reports[-1].loss_stats["dclr_removed_fraction"] < 1.0  # ... phi = 1 keeps those below 1
    assert math.isfinite(reports[-1].loss_stats["dclr_noise_logit"])
