"""Gradient caching (`mini_batch_size`) is exact for every loss, and keyed dropout is what makes it so.

The acceptance test: on the tiny random BERT, in float32 with dropout on, the parameter gradients of a cached
step (batch 8 in chunks of 3, the last one partial) equal those of the plain full-batch step (mini_batch_size =
batch_size) to 1e-5 relative, for every loss and preset of the registry, unsupervised and on NLI triplets, and
every base loss with every regulariser: a newly registered loss or regulariser is covered without editing this
file. Then the same for a whole training (the dev curve), a resumed one, and the checks that keyed dropout is
dropout (rate, independence) whose masks do not depend on how a batch is cut, and that without
`mini_batch_size` nothing changed: torch's dropout, call for call.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from raycse.encoder.keyed_dropout import keep_mask, row_keys, step_key
from raycse.encoder.model import Encoder
from raycse.errors import ConfigError
from raycse.losses import BASE_LOSSES, LOSS_NAMES, PRESETS, REGULARISERS, build_loss
from raycse.settings.config import TrainConfig
from raycse.training.step_runner import StepRunner
from raycse.training.trainer import load_complementary, load_examples, train

BATCH, MINI = 8, 3  # three chunks: 3 + 3 + 2 sentences
RTOL = 1e-5
HEAD_SEED, LOSS_SEED = 5, 9


def _cases() -> list[tuple[str, str | None, bool]]:
    """(loss, regulariser, supervised): every loss and preset alone, every base loss with every regulariser;
    unsupervised where the loss allows it, and on triplets always."""
    combinations = [(name, None) for name in LOSS_NAMES]
    combinations += [(base, reg) for reg in REGULARISERS for base in BASE_LOSSES]
    cases = []
    for name, reg in combinations:
        if not build_loss(name, reg).needs_hard_neg:
            cases.append((name, reg, False))
        cases.append((name, reg, True))
    return cases


CASES = _cases()


def case_id(case) -> str:
    name, reg, supervised = case
    return f"{name}{'+' + reg if reg else ''}-{'triplets' if supervised else 'sentences'}"


@pytest.fixture(scope="module")
def nli_csv(tmp_path_factory, sentences) -> Path:
    path = tmp_path_factory.mktemp("nli") / "nli.csv"
    lines = ["sent0,sent1,hard_neg"]  # 32 triplets: 4 steps of 8
    for i, sentence in enumerate(sentences):
        lines.append(f'"{sentence}","it is true that {sentence}","{sentences[(i + 5) % len(sentences)]}"')
        lines.append(f'"today {sentence}","{sentence}","it is false that {sentence}"')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def no_dropout_bert_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT with every dropout probability 0."""
    from transformers import AutoTokenizer, BertModel

    path = tmp_path_factory.mktemp("tiny-bert-no-dropout")
    BertModel.from_pretrained(tiny_bert_dir, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0) \
        .save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(path)
    return path


def config_for(model: Path, name: str, reg: str | None, supervised: bool, nli_csv: Path, mini: int | None,
               hparams: dict | None = None, **overrides) -> TrainConfig:
    settings = dict(model=str(model), loss=name, reg=reg, hparams=hparams or {}, batch_size=BATCH,
                    mini_batch_size=mini, max_grad_norm=0.0, sup_data=str(nli_csv) if supervised else None,
                    max_sentences=32, output_dir="unused")
    settings.update(overrides)
    return TrainConfig(**settings).validate()


def dclr_phi(model: Path, batch: list) -> float:
    """A phi halfway between two middle similarities of the complementary encoder's embeddings of `batch`, so
    that DCLR removes some in-batch negatives and keeps others (the default 0.9 removes all of them on a random
    tiny BERT, whose embeddings all point one way)."""
    complementary = load_complementary(TrainConfig(model=str(model)), torch.device("cpu"))
    sentences = [row[0] if isinstance(row, tuple) else row for row in batch]
    with torch.no_grad():
        c = torch.nn.functional.normalize(complementary(**complementary.tokenize(sentences, max_len=32)), dim=-1)
    upper = torch.triu(torch.ones(len(batch), len(batch), dtype=torch.bool), diagonal=1)
    similarities = (c @ c.T)[upper].sort().values
    middle = len(similarities) // 2
    return float((similarities[middle - 1] + similarities[middle]) / 2)


def hparams_for(model: Path, name: str, reg: str | None, batch: list) -> dict:
    parts = {name, reg, *PRESETS.get(name, ())}
    return {"phi": dclr_phi(model, batch)} if "dclr" in parts else {}


def one_step_gradients(config: TrainConfig, batch: list, dtype=torch.float32, watch: list | None = None) -> dict:
    """The loss and parameter gradients of one `StepRunner.backward` (no optimiser step) under fixed seeds."""
    device = torch.device("cpu")
    loss_fn = build_loss(config.loss, config.reg, **config.hparams)
    torch.manual_seed(HEAD_SEED)
    encoder = Encoder.from_pretrained(config.model, pooler="cls").to(dtype).train()
    complementary = load_complementary(config, device).to(dtype) if loss_fn.needs_complementary else None
    runner = StepRunner(encoder, loss_fn, config, device, total_steps=10, complementary=complementary)
    if watch is not None:
        encoder.backbone.register_forward_hook(
            lambda module, args, kwargs, output: watch.append((kwargs["input_ids"].shape[0], torch.is_grad_enabled())),
            with_kwargs=True)
    torch.manual_seed(LOSS_SEED)  # DCLR's noise negatives: the same draw in every run compared
    loss = runner.backward(batch)
    grads = {name: p.grad.detach().clone() for name, p in encoder.named_parameters() if p.grad is not None}
    return {"loss": loss, "grads": grads, "stats": loss_fn.stats()}


def assert_same_gradients(actual: dict, expected: dict, what: str, rtol: float = RTOL) -> None:
    """The whole gradient to rtol, and each tensor to rtol with a tiny floor (the attention key biases' gradient
    is zero in exact arithmetic: rounding only)."""
    assert actual.keys() == expected.keys()
    flat_actual = torch.cat([actual[name].reshape(-1) for name in expected])
    flat_expected = torch.cat([g.reshape(-1) for g in expected.values()])
    assert flat_expected.norm() > 0
    error = (flat_actual - flat_expected).norm() / flat_expected.norm()
    assert error <= rtol, f"{what}: the parameter gradient differs by {error:.3g} relative"
    floor = 1e-7 * flat_expected.norm()
    for name, g in expected.items():
        difference = (actual[name] - g).norm()
        assert difference <= rtol * g.norm() + floor, f"{what}: {name} differs by {difference:.3g} (|g| {g.norm():.3g})"


def batch_of(config: TrainConfig, sentences: list[str]) -> list:
    return load_examples(config)[:BATCH] if config.supervised else sentences[:BATCH]


# ------------------------------------------------------------------------------- the acceptance test
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_cached_step_has_the_gradients_of_the_full_batch_step(tiny_bert_dir, nli_csv, sentences, case):
    name, reg, supervised = case
    reference_config = config_for(tiny_bert_dir, name, reg, supervised, nli_csv, mini=BATCH)
    batch = batch_of(reference_config, sentences)
    hparams = hparams_for(tiny_bert_dir, name, reg, batch)
    reference_config = config_for(tiny_bert_dir, name, reg, supervised, nli_csv, mini=BATCH, hparams=hparams)
    cached_config = config_for(tiny_bert_dir, name, reg, supervised, nli_csv, mini=MINI, hparams=hparams)

    passes = []
    full = one_step_gradients(reference_config, batch)
    cached = one_step_gradients(cached_config, batch, watch=passes)

    assert torch.isfinite(full["loss"]) and full["loss"].item() != 0.0
    torch.testing.assert_close(cached["loss"], full["loss"], rtol=1e-6, atol=1e-7)
    assert "mlp.0.weight" in full["grads"] and "backbone.encoder.layer.0.attention.self.query.weight" in full["grads"]
    assert_same_gradients(cached["grads"], full["grads"], case_id(case))
    assert cached["stats"].keys() == full["stats"].keys()  # DCLR's diagnostics, from the one loss on the batch
    # it did run in chunks: no forward of the encoder saw more than a chunk's rows (3 views of 3 sentences)
    assert max(rows for rows, _ in passes) <= 3 * MINI
    assert [grad for _, grad in passes].count(True) == [grad for _, grad in passes].count(False)


@pytest.mark.parametrize("name, supervised", [("simcse", False), ("imsimcse", False), ("dclr", False),
                                              ("simcse-sup", True), ("off-dropout", True)])
def test_with_dropout_off_the_keyed_step_is_the_default_step(no_dropout_bert_dir, nli_csv, sentences, name,
                                                             supervised):
    # Each view layout (2N rows, ImSimCSE's 3N, triplets' 3N, a separate dropout-off pass, the complementary
    # encoder): where no dropout acts the masks cannot matter, so the keyed step must be the default step.
    # In float64: without dropout both views of a sentence are one vector, and the loss's cosines near 1 amplify
    # float32 rounding to ~1e-3 of the gradient (tests/test_distributed.py measures the same).
    default_config = config_for(no_dropout_bert_dir, name, None, supervised, nli_csv, mini=None)
    batch = batch_of(default_config, sentences)
    default = one_step_gradients(default_config, batch, dtype=torch.float64)
    for mini in (BATCH, MINI):
        keyed = one_step_gradients(config_for(no_dropout_bert_dir, name, None, supervised, nli_csv, mini=mini), batch,
                                   dtype=torch.float64)
        torch.testing.assert_close(keyed["loss"], default["loss"], rtol=1e-6, atol=1e-7)
        assert_same_gradients(keyed["grads"], default["grads"], f"{name} mini {mini}")


# ----------------------------------------------------------------------------------- keyed dropout
def test_keyed_masks_depend_on_the_row_never_on_its_chunk_or_padding():
    key = torch.tensor(step_key(42, 0))
    keys = row_keys(key, torch.arange(64))
    whole = keep_mask(torch.Size([64, 20, 48]), 0.1, keys, site=3)
    # rows 5..14 alone, padded to 12 tokens instead of 20: the same masks on every position they share
    assert torch.equal(keep_mask(torch.Size([10, 12, 48]), 0.1, keys[5:15], site=3), whole[5:15, :12])
    # attention probabilities (rows, heads, queries, keys) padded otherwise: likewise
    probabilities = keep_mask(torch.Size([64, 2, 20, 20]), 0.1, keys, site=4)
    assert torch.equal(keep_mask(torch.Size([3, 2, 9, 9]), 0.1, keys[:3], site=4), probabilities[:3, :, :9, :9])


def test_keyed_dropout_is_dropout_with_independent_masks():
    keys = row_keys(torch.tensor(step_key(7, 3)), torch.arange(256))
    mask = keep_mask(torch.Size([256, 32, 64]), 0.1, keys, site=0).float()
    assert mask.mean().item() == pytest.approx(0.9, abs=0.002)  # 524,288 draws: 0.002 is 4.8 standard errors
    # the correlations of two rows' masks (2,048 elements each) spread as those of independent ones: 1/sqrt(2048)
    rows = torch.corrcoef(mask.view(256, -1))[~torch.eye(256, dtype=torch.bool)]
    assert rows.std().item() == pytest.approx(2048**-0.5, rel=0.05) and rows.mean().abs() < 1e-3
    assert rows.abs().max() < 6 * 2048**-0.5
    positions = mask.mean(dim=0)  # every element's rate over the 256 rows
    assert positions.std() < 0.03  # binomial: sqrt(0.09 / 256) = 0.019
    for other in (keep_mask(torch.Size([256, 32, 64]), 0.1, keys, site=1),
                  keep_mask(torch.Size([256, 32, 64]), 0.1, row_keys(torch.tensor(step_key(7, 4)), torch.arange(256)),
                            site=0),
                  keep_mask(torch.Size([256, 32, 64]), 0.1, row_keys(torch.tensor(step_key(8, 3)), torch.arange(256)),
                            site=0)):
        assert abs(torch.corrcoef(torch.stack([mask.view(-1), other.float().view(-1)]))[0, 1]) < 0.01
    assert keep_mask(torch.Size([4, 8]), 0.5, keys[:4], site=0).float().mean() != 1.0


def test_the_step_key_is_a_function_of_seed_and_step_and_draws_nothing():
    torch.manual_seed(0)
    keys = {(seed, step): step_key(seed, step) for seed in range(4) for step in range(100)}
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(3))
    assert len(set(keys.values())) == len(keys)
    assert all(0 <= key < 2**62 for key in keys.values())
    assert step_key(3, 17) == keys[(3, 17)]


def test_keyed_forward_in_chunks_equals_the_whole_batch(tiny_bert_dir, sentences):
    encoder = Encoder.from_pretrained(str(tiny_bert_dir), pooler="cls").train()
    tokens = encoder.tokenize(sentences[:8], max_len=32)
    key, ids = torch.tensor(step_key(1, 0)), torch.arange(100, 108)
    with torch.no_grad():
        whole = encoder(**tokens, dropout_key=key, row_ids=ids)
        parts = torch.cat([encoder(**{k: v[a:a + 3] for k, v in tokens.items()}, dropout_key=key, row_ids=ids[a:a + 3])
                           for a in range(0, 8, 3)])
        again = encoder(**tokens, dropout_key=key, row_ids=ids)
        other_rows = encoder(**tokens, dropout_key=key, row_ids=ids + 8)
        encoder.eval()
        no_dropout = encoder(**tokens)
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)
    assert torch.equal(again, whole)  # no RNG involved
    assert not torch.allclose(whole, no_dropout, atol=1e-3)  # dropout acts ...
    assert not torch.allclose(other_rows, whole, atol=1e-3)  # ... with the row's own masks


def test_without_mini_batch_size_dropout_is_torchs_call_for_call(tiny_bert_dir, sentences):
    """The default path is unchanged: the step's embeddings and gradients are those of the plain Hugging Face
    model with torch's nn.Dropout and SDPA dropout under the same seed, to the bit."""
    from transformers import BertModel

    config = TrainConfig(model=str(tiny_bert_dir), batch_size=4, output_dir="unused").validate()
    torch.manual_seed(HEAD_SEED)
    encoder = Encoder.from_pretrained(str(tiny_bert_dir), pooler="cls").train()
    runner = StepRunner(encoder, build_loss("simcse"), config, torch.device("cpu"), total_steps=1)
    plain = BertModel.from_pretrained(tiny_bert_dir, attn_implementation="sdpa").train()
    assert not any(type(m).__name__ == "RowDropout" for m in plain.modules())
    head = encoder.mlp

    torch.manual_seed(11)
    emb = runner.embeddings(sentences[:4])
    torch.manual_seed(11)
    tokens = encoder.tokenize(sentences[:4] * 2, max_len=config.max_len)
    reference = head(plain(**tokens).last_hidden_state[:, 0])
    assert torch.equal(torch.cat([emb.z1, emb.z2]), reference)
    assert not torch.equal(emb.z1, emb.z2)  # two torch dropout masks

    emb.z1.sum().backward()
    reference[:4].sum().backward()
    assert torch.equal(encoder.backbone.encoder.layer[0].attention.self.query.weight.grad,
                       plain.encoder.layer[0].attention.self.query.weight.grad)


# ------------------------------------------------------------------------------------ configuration
@pytest.mark.parametrize("mini, message", [
    (0, "mini_batch_size: must be an integer >= 1, got 0"),
    (9, "mini_batch_size: must be at most batch_size (8), got 9"),
    (2.5, "mini_batch_size: must be an integer from 1 to 2147483647, got a number 2.5"),
])
def test_mini_batch_size_is_validated(tiny_bert_dir, mini, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        TrainConfig(model=str(tiny_bert_dir), batch_size=8, mini_batch_size=mini).validate()
    assert err.value.key == "mini_batch_size"


def test_the_command_line_names_the_flag(tiny_bert_dir, tmp_path, capsys):
    from raycse.cli import main

    status = main(["train", "--model", str(tiny_bert_dir), "--batch-size", "8", "--mini-batch-size", "16",
                   "--output-dir", str(tmp_path / "out")])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("raycse: error: --mini-batch-size: must be at most batch_size (8), got 16")
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_the_simcse_space_searches_large_batches_with_a_mini_batch():
    from raycse.settings.config import searchable_settings
    from raycse.settings.space import load_space

    assert "mini_batch_size" in searchable_settings()
    space = load_space(Path(__file__).parent.parent / "search_spaces" / "simcse.yaml")
    family = next(iter(space.families.values()))
    assert min(family.space["batch_size"].choices) >= 64 and max(family.space["batch_size"].choices) == 512
    assert space.base.mini_batch_size == 64
    cpu = space.with_cpu_budget()
    assert "batch_size" not in next(iter(cpu.families.values())).space
    assert cpu.base.mini_batch_size is None and cpu.base.batch_size == 16  # the CPU budget costs what it did


# ------------------------------------------------------------------------------------- whole trainings
def tiny_training(model: Path, output_dir: Path, **overrides) -> TrainConfig:
    settings = dict(model=str(model), loss="focal", batch_size=BATCH, lr=1e-3, max_steps=4, eval_steps=2,
                    max_sentences=64, seed=3, test_eval=False, output_dir=str(output_dir))
    settings.update(overrides)
    return TrainConfig(**settings).validate()


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_a_cached_training_follows_the_dev_curve_of_the_full_batch_training(tiny_bert_dir, nli_csv, tmp_path, loss):
    supervised = build_loss(loss).needs_hard_neg
    extra = {"sup_data": str(nli_csv), "max_sentences": None} if supervised else {}
    full = train(tiny_training(tiny_bert_dir, tmp_path / "full", loss=loss, mini_batch_size=BATCH, **extra))
    cached = train(tiny_training(tiny_bert_dir, tmp_path / "cached", loss=loss, mini_batch_size=MINI, **extra))
    # The bar: the dev curve to 0.01 (STS-B Spearman x 100). The gradients agree to ~1e-6, but AdamW divides
    # each by its own root mean square, so a parameter whose gradient is rounding only (the attention key biases)
    # moves by lr either way: the curves then differ by ~1e-4, not by 0.
    assert [p["step"] for p in cached["dev_curve"]] == [2, 4]
    for point, expected in zip(cached["dev_curve"], full["dev_curve"], strict=True):
        assert point["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-4)
        assert point["objective"] == pytest.approx(expected["objective"], abs=0.01)
    assert cached["config"]["mini_batch_size"] == MINI


class Interrupted(Exception):
    pass


@pytest.mark.slow
def test_a_resumed_cached_training_ends_as_the_uninterrupted_one(tiny_bert_dir, tmp_path):
    # The keyed masks of steps 5 and 6 come from the step count that last/ restores: the same curve, exactly.
    settings = dict(max_steps=6, eval_steps=2, loss="dclr", mini_batch_size=MINI)  # DCLR also draws noise
    whole = train(tiny_training(tiny_bert_dir, tmp_path / "whole", **settings))

    def stop_at_step_4(report):
        if report.step == 4:
            raise Interrupted

    config = tiny_training(tiny_bert_dir, tmp_path / "broken", **settings)
    with pytest.raises(Interrupted):
        train(config, on_eval=stop_at_step_4)
    reports = []
    resumed = train(config, on_eval=reports.append, resume=True)
    assert [r.step for r in reports] == [6]
    assert resumed["dev_curve"] == whole["dev_curve"]
    assert json.loads((tmp_path / "broken" / "results.json").read_text())["config"]["mini_batch_size"] == MINI
