"""The encoder: SimCSE's poolers computed by hand, the model's own pooling, model-name resolution, loading
errors that name the file, row-restricted dropout, and checkpoints that AutoModel and sentence-transformers
both load."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from skips import require_module
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

from raycse.encoder.loading import check_loadable, resolve_model_path
from raycse.encoder.model import Encoder
from raycse.encoder.pooler_choice import declared_pooler, resolve_poolers
from raycse.encoder.poolers import AUTO_POOLER, POOLERS
from raycse.encoder.row_dropout import ROW_DROPOUT_ATTENTION, RowDropout
from raycse.errors import ConfigError


@pytest.fixture(scope="module")
def three_layer_bert_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """Like tiny_bert_dir but with 3 layers: with 2, 'first layer' and 'second-to-last layer' coincide and
    avg_first_last could not be told apart from avg_top2."""
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("three-layer-bert")
    config = BertConfig.from_pretrained(tiny_bert_dir)
    config.num_hidden_layers = 3
    BertModel(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(path)
    return path


def pooled_by_hand(hidden_states, attention_mask, pooler: str, mlp: torch.nn.Sequential) -> torch.Tensor:
    """SimCSE's Pooler, written out per sentence: the mean runs over each sentence's real tokens only
    (BERT pads on the right, so those are the first `length` positions)."""
    lengths = attention_mask.sum(dim=1).tolist()

    def mean_of_real_tokens(states):
        return torch.stack([states[i, :length].mean(dim=0) for i, length in enumerate(lengths)])

    last = hidden_states[-1]
    if pooler == "cls_before_pooler":
        return last[:, 0]
    if pooler == "cls":
        linear = mlp[0]
        return torch.tanh(last[:, 0] @ linear.weight.T + linear.bias)
    if pooler == "avg":
        return mean_of_real_tokens(last)
    if pooler == "avg_first_last":  # hidden_states[0] is the embedding layer; [1] the first transformer layer
        return mean_of_real_tokens((hidden_states[1] + last) / 2)
    if pooler == "avg_top2":
        return mean_of_real_tokens((hidden_states[-2] + last) / 2)
    raise AssertionError(pooler)


@pytest.mark.parametrize("pooler", POOLERS)
def test_each_pooler_equals_a_hand_computation_from_the_hidden_states(three_layer_bert_dir, sentences, pooler):
    encoder = Encoder.from_pretrained(three_layer_bert_dir, pooler="cls").eval()
    batch = encoder.tokenize(sentences, max_len=None)
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding for masking to matter"

    with torch.no_grad():
        hidden_states = encoder.backbone(**batch, output_hidden_states=True).hidden_states
        expected = pooled_by_hand(hidden_states, batch["attention_mask"], pooler, encoder.mlp)
        pooled = encoder(**batch, pooler=pooler)
    torch.testing.assert_close(pooled, expected, atol=1e-5, rtol=1e-5)
    # encode batches differently (longest first, 5 at a time) and must give the same vectors in input order
    torch.testing.assert_close(encoder.encode(sentences, batch_size=5, pooler=pooler), expected, atol=1e-5, rtol=1e-5)


def test_masking_and_layer_choice_make_a_difference(three_layer_bert_dir, sentences):
    """Guards the test above: the variants it tells apart really differ on this model."""
    encoder = Encoder.from_pretrained(three_layer_bert_dir).eval()
    batch = encoder.tokenize(sentences, max_len=None)
    with torch.no_grad():
        last = encoder.backbone(**batch).last_hidden_state
        vectors = {pooler: encoder(**batch, pooler=pooler) for pooler in POOLERS}
    assert not torch.allclose(vectors["avg"], last.mean(dim=1), atol=1e-4)  # an unmasked mean
    assert not torch.allclose(vectors["avg_first_last"], vectors["avg_top2"], atol=1e-4)
    assert not torch.allclose(vectors["cls"], vectors["cls_before_pooler"], atol=1e-4)


def test_encode_keeps_input_order_is_deterministic_and_restores_training_mode(tiny_bert_dir, sentences):
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    encoder.train()
    batched = encoder.encode(sentences, batch_size=4)
    one_by_one = torch.cat([encoder.encode([sentence], batch_size=1) for sentence in sentences])
    assert encoder.training  # put back in training mode
    assert batched.dtype == torch.float32 and batched.device.type == "cpu"
    assert batched.shape == (len(sentences), encoder.hidden_size)
    # no padding when encoded alone, no dropout in either: the same vectors
    torch.testing.assert_close(batched, one_by_one, atol=1e-5, rtol=1e-5)
    assert encoder.encode([]).shape == (0, encoder.hidden_size)


def test_encode_tokenises_a_sentence_list_once_and_then_reuses_it(tiny_bert_dir, sentences, tmp_path):
    from raycse.encoder import eval_batches

    eval_batches.clear_cache()  # kept per process: earlier tests may have encoded these sentences
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    calls = []
    tokenizer = encoder.tokenizer

    class CountingTokenizer:  # the real tokenizer, counted
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def __len__(self):
            return len(tokenizer)

        def __call__(self, batch, **kwargs):
            calls.append(len(batch))
            return tokenizer(batch, **kwargs)

    encoder.tokenizer = CountingTokenizer()
    first = encoder.encode(sentences, batch_size=4)
    again = encoder.encode(list(sentences), batch_size=4)  # an equal list: the cached batches serve it
    # one call tokenises every sentence; the batches are padded from its ids
    assert calls == [len(sentences)]
    assert torch.equal(first, again)
    other = encoder.encode(sentences[:3], batch_size=4)  # different sentences: tokenised afresh
    assert calls == [len(sentences), 3]
    torch.testing.assert_close(other, first[:3], atol=1e-5, rtol=1e-5)
    # a later trial's encoder in the same worker process: the tokens, and the loaded model, are reused
    later = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    later.tokenizer = encoder.tokenizer
    assert torch.equal(later.encode(sentences, batch_size=4), first) and len(calls) == 2
    assert later.backbone is not encoder.backbone  # a copy: trials never share weights they train
    # a judging run's best checkpoint, saved and reloaded from a folder of its own: its tokenizer is the same
    # content under another path, so its test sets are not tokenised again
    encoder.tokenizer = tokenizer
    assert torch.equal(encoder.encode(sentences, batch_size=4), first)
    encoder.save(tmp_path / "best", "avg")
    reloaded = Encoder.from_pretrained(str(tmp_path / "best"), pooler="avg")
    kept = dict(eval_batches._CACHE)
    assert torch.equal(reloaded.encode(sentences, batch_size=4), first)
    assert eval_batches._CACHE == kept
    assert eval_batches.tokenizer_fingerprint(reloaded.tokenizer) == eval_batches.tokenizer_fingerprint(tokenizer)


def test_a_tokenizer_of_other_content_or_a_shorter_length_is_tokenised_afresh(tiny_bert_dir, sentences, tmp_path):
    from transformers import AutoTokenizer

    from raycse.encoder import eval_batches

    eval_batches.clear_cache()
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    long_first = max(sentences, key=len)
    full = encoder.encode([long_first], batch_size=1)
    cut = encoder.encode([long_first], batch_size=1, max_len=4)  # truncation is part of the key
    assert not torch.equal(full, cut) and len(eval_batches._CACHE) == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tokenizer.add_tokens(["zzyzx"])  # one token more: another vocabulary, another key
    assert eval_batches.tokenizer_fingerprint(tokenizer) != eval_batches.tokenizer_fingerprint(encoder.tokenizer)
    tokenizer(sentences, truncation=True, max_length=5)  # a call's own truncation setting changes no key
    fresh = AutoTokenizer.from_pretrained(tiny_bert_dir)
    assert eval_batches.tokenizer_fingerprint(fresh) == eval_batches.tokenizer_fingerprint(encoder.tokenizer)


def test_evaluation_batches_are_cut_by_padded_tokens(tiny_bert_dir, sentences):
    from raycse.encoder import eval_batches
    from raycse.encoder.model import EVAL_BATCH_TOKENS, encode_fn, eval_batch_tokens

    eval_batches.clear_cache()
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    texts = [" ".join(["word"] * n) for n in (40, 3, 25, 1, 12, 30, 2, 7)] + list(sentences)
    budget = 64
    by_tokens = encoder.encode(texts, tokens_per_batch=budget)
    [(_, batches)] = [entry for key, entry in eval_batches._CACHE.items() if budget in key]
    padded = [batch["input_ids"].numel() for batch in batches]
    lengths = [batch["input_ids"].shape[1] for batch in batches]
    assert sum(batch["input_ids"].shape[0] for batch in batches) == len(texts)
    assert lengths == sorted(lengths, reverse=True)  # longest first
    assert all(tokens <= budget for tokens, length in zip(padded, lengths) if length <= budget)
    assert len({batch["input_ids"].shape[0] for batch in batches}) > 1  # short sentences fill larger batches
    # what the batches are cut by changes no vector beyond rounding
    torch.testing.assert_close(by_tokens, encoder.encode(texts, batch_size=4), atol=1e-5, rtol=1e-5)
    # a sentence longer than the budget is a batch of its own, never dropped
    assert encoder.encode(texts[:1], tokens_per_batch=1).shape == (1, encoder.hidden_size)
    assert eval_batch_tokens(torch.device("cpu")) == EVAL_BATCH_TOKENS["cpu"]
    assert eval_batch_tokens(torch.device("cuda")) == EVAL_BATCH_TOKENS["cuda"] > EVAL_BATCH_TOKENS["cpu"]
    torch.testing.assert_close(encode_fn(encoder, "avg")(texts), by_tokens, atol=1e-5, rtol=1e-5)


def test_a_reloaded_model_is_a_fresh_copy_until_its_files_change(tiny_bert_dir, tmp_path):
    import shutil

    import raycse.encoder.loading

    directory = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, directory)
    first = Encoder.from_pretrained(directory, pooler="avg")
    with torch.no_grad():
        first.backbone.embeddings.word_embeddings.weight.zero_()  # training changes the copy, not the cache
    second = Encoder.from_pretrained(directory, pooler="avg")
    assert second.backbone.embeddings.word_embeddings.weight.abs().sum() > 0
    first.save(directory, pooler="avg")  # new files: the cache entry no longer applies
    third = Encoder.from_pretrained(directory, pooler="avg")
    assert third.backbone.embeddings.word_embeddings.weight.abs().sum() == 0
    assert len(raycse.encoder.loading._LOADED_CACHE) <= raycse.encoder.loading.LOADED_CACHE_SIZE


def test_max_len_truncates(tiny_bert_dir):
    encoder = Encoder.from_pretrained(tiny_bert_dir)
    assert encoder.tokenize(["one two three four five six seven"], max_len=4)["input_ids"].shape == (1, 4)
    assert encoder.max_seq_length == 128  # the tiny BERT's position embeddings cap the tokenizer's 512


def test_unknown_pooler_is_a_config_error(tiny_bert_dir):
    with pytest.raises(ConfigError, match="unknown pooler 'mean'"):
        Encoder.from_pretrained(tiny_bert_dir, pooler="mean")


# ------------------------------------------------------------------------------------ model names
def test_packaged_minilm_loads_with_no_network():
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by conftest before transformers is imported
    path = Path(resolve_model_path("minilm"))
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    encoder = Encoder.from_pretrained("minilm", pooler="cls_before_pooler")
    assert encoder.hidden_size == 384
    vectors = encoder.encode(["a man is playing a guitar .", "a man plays the guitar ."])
    assert vectors.shape == (2, 384)
    assert torch.nn.functional.cosine_similarity(vectors[0], vectors[1], dim=0) > 0.8


def test_local_directories_and_hub_ids_resolve(tiny_bert_dir, tmp_path, monkeypatch):
    assert resolve_model_path(str(tiny_bert_dir)) == str(tiny_bert_dir)
    assert resolve_model_path("bert-base-uncased") == "bert-base-uncased"
    assert resolve_model_path("princeton-nlp/unsup-simcse-bert-base-uncased") == (
        "princeton-nlp/unsup-simcse-bert-base-uncased")
    # 'runs/best' is a path, not a hub id, once a folder 'runs' exists here
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ConfigError, match="model path 'runs/best' does not exist"):
        resolve_model_path("runs/best")


@pytest.mark.parametrize("missing", ["./no-such-model", "/no/such/model", "~/no-such-model", "a/b/c"])
def test_missing_local_path_is_a_config_error(missing):
    with pytest.raises(ConfigError, match=f"model path '{missing}' does not exist"):
        Encoder.from_pretrained(missing)


def test_unreachable_hub_id_is_a_one_line_config_error():
    with pytest.raises(ConfigError) as caught:
        Encoder.from_pretrained("raycse-tests/no-such-model")
    message = str(caught.value)
    assert message.startswith("cannot load model 'raycse-tests/no-such-model' from the Hugging Face hub")
    assert "\n" not in message


def test_a_directory_that_is_not_a_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot load model from"):
        Encoder.from_pretrained(str(tmp_path))


# ------------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("pooler", POOLERS)
def test_saved_checkpoint_loads_in_automodel_and_sentence_transformers(three_layer_bert_dir, sentences, tmp_path,
                                                                        pooler):
    from sentence_transformers import SentenceTransformer

    encoder = Encoder.from_pretrained(three_layer_bert_dir, pooler="cls")
    torch.nn.init.normal_(encoder.mlp[0].weight, std=0.3)  # a head unlike any fresh one, as after training
    target = tmp_path / "checkpoint"
    encoder.save(target, pooler=pooler)

    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]  # no staging directory left behind
    assert json.loads((target / "raycse_pooler.json").read_text()) == {"pooler": pooler}
    assert not (target / "2_Normalize").exists()

    backbone = AutoModel.from_pretrained(target)
    for name, tensor in encoder.backbone.state_dict().items():
        torch.testing.assert_close(backbone.state_dict()[name], tensor)

    expected = encoder.encode(sentences, pooler=pooler)
    st_vectors = torch.as_tensor(SentenceTransformer(str(target), device="cpu").encode(sentences))
    torch.testing.assert_close(st_vectors, expected, atol=1e-5, rtol=1e-4)
    assert torch.nn.functional.cosine_similarity(st_vectors, expected).min() > 0.9999

    reloaded = Encoder.from_pretrained(target)  # the saved pooler (and head) come back
    assert reloaded.pooler == pooler
    assert reloaded.mlp_from_checkpoint == (pooler == "cls")
    torch.testing.assert_close(reloaded.encode(sentences), expected, atol=1e-5, rtol=1e-4)


def test_saving_over_an_old_checkpoint_replaces_it_whole(tiny_bert_dir, tmp_path):
    encoder = Encoder.from_pretrained(tiny_bert_dir)
    target = tmp_path / "best"
    encoder.save(target, pooler="cls")
    assert (target / "2_Dense").is_dir()
    encoder.save(target, pooler="avg")

    assert [p.name for p in tmp_path.iterdir()] == ["best"]
    assert json.loads((target / "raycse_pooler.json").read_text()) == {"pooler": "avg"}
    assert not (target / "2_Dense").exists() and not (target / "raycse_mlp_head.safetensors").exists()


def test_save_refuses_a_file_in_the_way(tiny_bert_dir, tmp_path):
    (tmp_path / "taken").write_text("not a model")
    with pytest.raises(ConfigError, match="not a directory"):
        Encoder.from_pretrained(tiny_bert_dir).save(tmp_path / "taken", pooler="avg")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


# ------------------------------------------------------------------------------------ the model's own pooling
def test_packaged_minilm_declares_mean_pooling():
    assert declared_pooler("minilm") == "avg"
    assert Encoder.from_pretrained("minilm").pooler == "avg"  # no pooler given: the model's own


def write_sentence_transformers_pooling(directory: Path, pooling_config: dict, before_pooling=(),
                                        pooling_type="sentence_transformers.models.Pooling") -> Path:
    """modules.json + 1_Pooling/config.json as sentence-transformers writes them (no model needed to read them)."""
    directory.mkdir(parents=True, exist_ok=True)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    modules += [{"idx": len(modules), "name": str(len(modules)), "path": f"{len(modules)}_{kind}",
                 "type": f"sentence_transformers.models.{kind}"} for kind in before_pooling]
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": "9_Pooling", "type": pooling_type})
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": "10_Normalize",
                    "type": "sentence_transformers.models.Normalize"})
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "9_Pooling").mkdir()
    (directory / "9_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling_config}))
    return directory


def classic_flags(*on: str) -> dict:
    keys = ["cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
    return {f"pooling_mode_{key}": key in on for key in keys}


@pytest.mark.parametrize("pooling_config, expected", [
    (classic_flags("mean_tokens"), "avg"),
    (classic_flags("cls_token"), "cls_before_pooler"),
    (classic_flags("max_tokens"), None),
    (classic_flags("mean_sqrt_len_tokens"), None),
    (classic_flags("weightedmean_tokens"), None),
    (classic_flags("lasttoken"), None),
    (classic_flags("cls_token", "mean_tokens"), None),  # two modes concatenated: twice the width
    ({"pooling_mode": "mean"}, "avg"),  # sentence-transformers 6's format
    ({"pooling_mode": ["cls"]}, "cls_before_pooler"),
    ({"pooling_mode": ["mean", "max"]}, None),
    ({"pooling_mode": "lasttoken"}, None),
])
def test_declared_pooler_reads_the_sentence_transformers_pooling(tmp_path, pooling_config, expected):
    assert declared_pooler(str(write_sentence_transformers_pooling(tmp_path / "m", pooling_config))) == expected


def test_declared_pooler_needs_a_pooling_module_of_the_transformer_states(tmp_path):
    assert declared_pooler(str(tmp_path)) is None  # no files at all
    new_type = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"  # sentence-transformers 6
    assert declared_pooler(str(write_sentence_transformers_pooling(
        tmp_path / "new", {"pooling_mode": "cls"}, pooling_type=new_type))) == "cls_before_pooler"
    # a module between the Transformer and the Pooling changes what is pooled: raycse has no such pooler
    assert declared_pooler(str(write_sentence_transformers_pooling(
        tmp_path / "weighted", classic_flags("mean_tokens"), before_pooling=["WeightedLayerPooling"]))) is None
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "modules.json").write_text("[{")
    assert declared_pooler(str(tmp_path / "broken")) is None


def test_a_raycse_checkpoint_declares_its_saved_pooler_even_when_resaved_in_place(tiny_bert_dir, tmp_path):
    encoder = Encoder.from_pretrained(tiny_bert_dir)
    target = tmp_path / "best"
    encoder.save(target, pooler="avg_top2")
    assert declared_pooler(str(target)) == "avg_top2"  # raycse_pooler.json: ST's files alone say mean pooling
    encoder.save(target, pooler="cls")
    assert declared_pooler(str(target)) == "cls"  # not the cached answer for the old directory


def test_declared_pooler_of_an_unreachable_hub_id_is_none():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert declared_pooler("raycse-tests/no-such-model") is None


@pytest.mark.parametrize("model, pooler, eval_pooler, supervised, expected", [
    # auto: the declared pooler for both ...
    ("minilm", "auto", None, False, ("avg", "avg")),
    ("minilm", "auto", None, True, ("avg", "avg")),
    # ... else SimCSE's recipe: CLS + MLP for training, mlp_only_train for unsupervised scoring
    ("tiny", "auto", None, False, ("cls", "cls_before_pooler")),
    ("tiny", "auto", None, True, ("cls", "cls")),
    # explicit poolers keep the rule they always had
    ("minilm", "cls", None, False, ("cls", "cls_before_pooler")),
    ("minilm", "cls", None, True, ("cls", "cls")),
    ("tiny", "avg_first_last", None, False, ("avg_first_last", "avg_first_last")),
    # an explicit evaluation pooler wins; 'auto' there means "derive it"
    ("minilm", "auto", "cls_before_pooler", False, ("avg", "cls_before_pooler")),
    ("tiny", "cls", "avg", False, ("cls", "avg")),
    ("tiny", "auto", "auto", False, ("cls", "cls_before_pooler")),
])
def test_resolve_poolers(tiny_bert_dir, model, pooler, eval_pooler, supervised, expected):
    model = str(tiny_bert_dir) if model == "tiny" else model
    assert resolve_poolers(model, pooler, eval_pooler, supervised) == expected


def test_auto_is_accepted_by_callers_but_is_not_a_pooler(tiny_bert_dir):
    assert AUTO_POOLER == "auto" and AUTO_POOLER not in POOLERS
    with pytest.raises(ConfigError, match=r"unknown pooler 'mean' \(choose from auto, cls, "):
        resolve_poolers(str(tiny_bert_dir), "mean", None, False)
    with pytest.raises(ConfigError, match="unknown evaluation pooler 'max'"):
        resolve_poolers(str(tiny_bert_dir), "auto", "max", False)
    with pytest.raises(ConfigError, match="unknown pooler 'auto'"):  # a forward always has a concrete pooler
        encoder = Encoder.from_pretrained(tiny_bert_dir)
        encoder(input_ids=torch.tensor([[1, 2]]), attention_mask=torch.tensor([[1, 1]]), pooler="auto")


def test_a_checkpoint_saved_with_avg_declares_avg_to_raycse_and_sentence_transformers(tiny_bert_dir, sentences,
                                                                                        tmp_path):
    from sentence_transformers import SentenceTransformer

    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="cls")
    target = tmp_path / "avg"
    encoder.save(target, pooler="avg")
    assert declared_pooler(str(target)) == "avg"
    (target / "raycse_pooler.json").unlink()  # the sentence-transformers files alone say so too
    assert declared_pooler(str(target)) == "avg"
    st_vectors = torch.as_tensor(SentenceTransformer(str(target), device="cpu").encode(sentences))
    torch.testing.assert_close(st_vectors, encoder.encode(sentences, pooler="avg"), atol=1e-5, rtol=1e-4)
    assert Encoder.from_pretrained(target).pooler == "avg"


# ------------------------------------------------------------------------------------ evaluation precision
def test_encode_runs_in_float32_even_inside_a_callers_autocast(tiny_bert_dir, sentences):
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    plain = encoder.encode(sentences)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside_autocast = encoder.encode(sentences)
        batch = encoder.tokenize(sentences, max_len=None)
        with torch.no_grad():
            bf16 = encoder.eval()(**batch).float()  # what the forward gives under bf16 autocast
    torch.testing.assert_close(inside_autocast, plain, rtol=0, atol=0)
    assert not torch.allclose(bf16, plain, rtol=0, atol=1e-4)  # so autocast would have changed the vectors


# ------------------------------------------------------------------------------------ loading errors
def _truncate(path: Path) -> None:
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)


def _garble(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def _set_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))


def _to_pytorch_bin(directory: Path) -> Path:
    from safetensors.torch import load_file

    torch.save(load_file(directory / "model.safetensors"), directory / "pytorch_model.bin")
    (directory / "model.safetensors").unlink()
    return directory / "pytorch_model.bin"


def _shard(directory: Path) -> None:
    """Two safetensors shards and their index, as save_pretrained(max_shard_size=...) writes them."""
    from safetensors.torch import load_file, save_file

    weights = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    names = sorted(weights)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in halves.items():
        save_file({key: weights[key] for key in keys}, directory / shard, metadata={"format": "pt"})
    weight_map = {key: shard for shard, keys in halves.items() for key in keys}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


BROKEN_MODELS = {
    # case: (how to break a copy of the tiny BERT, the file the message must name, more text it must hold)
    "truncated safetensors": (lambda d: _truncate(d / "model.safetensors"), "model.safetensors", "truncated"),
    "garbage safetensors": (lambda d: _garble(d / "model.safetensors"), "model.safetensors", "corrupt"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "model.safetensors", "no weights file"),
    "truncated pytorch_model.bin": (lambda d: _truncate(_to_pytorch_bin(d)), "pytorch_model.bin", "corrupt"),
    "garbage pytorch_model.bin": (lambda d: _garble(_to_pytorch_bin(d)), "pytorch_model.bin", "corrupt"),
    "missing shard": (lambda d: (_shard(d), (d / "model-00002-of-00002.safetensors").unlink()),
                      "model-00002-of-00002.safetensors", "model.safetensors.index.json"),
    "truncated shard": (lambda d: (_shard(d), _truncate(d / "model-00001-of-00002.safetensors")),
                        "model-00001-of-00002.safetensors", "truncated"),
    "no config.json": (lambda d: (d / "config.json").unlink(), "config.json", "not a Hugging Face model directory"),
    "config.json not JSON": (lambda d: (d / "config.json").write_text("{'model_type': bert"), "config.json",
                             "not valid JSON"),
    "unknown model_type": (lambda d: _set_config(d, model_type="no-such-architecture"), "config.json",
                           "'no-such-architecture'"),
    "no tokenizer files": (lambda d: [(d / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")],
                           "tokenizer.json", "no tokenizer vocabulary"),
    "no tokenizer.json": (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json", "no tokenizer vocabulary"),
    "corrupt tokenizer.json": (lambda d: (d / "tokenizer.json").write_text('{"version": '), "tokenizer.json",
                               "not valid JSON"),
    "corrupt tokenizer_config.json": (lambda d: (d / "tokenizer_config.json").write_bytes(b"\xff\xfe{"),
                                      "tokenizer_config.json", "not valid JSON"),
}


@pytest.mark.parametrize("case", BROKEN_MODELS)
def test_every_loading_failure_is_one_config_error_line_naming_the_file(tiny_bert_dir, tmp_path, case):
    break_it, file, text = BROKEN_MODELS[case]
    directory = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, directory)
    torch.manual_seed(0)  # the garbage is random
    break_it(directory)
    for load in (check_loadable, Encoder.from_pretrained):
        with pytest.raises(ConfigError) as caught:
            load(str(directory))
        message = str(caught.value)
        assert message.startswith(f"cannot load model from '{directory}': ") and "\n" not in message, message
        assert file in message and text in message, message


def test_intact_model_directories_pass_the_checks_and_load(tiny_bert_dir, tmp_path, sentences):
    reference = Encoder.from_pretrained(tiny_bert_dir, pooler="avg").encode(sentences[:3])
    for name, convert in (("bin", _to_pytorch_bin), ("sharded", _shard)):
        directory = tmp_path / name
        shutil.copytree(tiny_bert_dir, directory)
        convert(directory)
        check_loadable(str(directory))
        encoder = Encoder.from_pretrained(directory, pooler="avg")
        torch.testing.assert_close(encoder.encode(sentences[:3]), reference)
    check_loadable(str(tiny_bert_dir))
    check_loadable("minilm")


def test_an_unreachable_hub_id_fails_the_preflight_in_one_line():
    with pytest.raises(ConfigError) as caught:
        check_loadable("raycse-tests/no-such-model")
    message = str(caught.value)
    assert message.startswith("cannot load model 'raycse-tests/no-such-model' from the Hugging Face hub (offline?)")
    assert "\n" not in message


# ------------------------------------------------------------------------------------ row dropout
def dropout_encoder(tiny_bert_dir, hidden: float, attention: float, **kwargs) -> Encoder:
    backbone = AutoModel.from_pretrained(tiny_bert_dir, hidden_dropout_prob=hidden,
                                         attention_probs_dropout_prob=attention, **kwargs)
    return Encoder(backbone, AutoTokenizer.from_pretrained(tiny_bert_dir), pooler="avg")


def three_views(encoder: Encoder, sentences: list[str]) -> dict[str, torch.Tensor]:
    """ImSimCSE's 3N rows: the N sentences twice (the dropout views) and once more (the dropout-off view)."""
    batch = encoder.tokenize(sentences, max_len=None)
    return {name: torch.cat([tensor] * 3) for name, tensor in batch.items()}


def rows(batch: dict[str, torch.Tensor], start: int, stop: int | None = None) -> dict[str, torch.Tensor]:
    return {name: tensor[start:stop] for name, tensor in batch.items()}


def eval_mode_forward(encoder: Encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    encoder.eval()
    try:
        return encoder(**batch)
    finally:
        encoder.train()


def test_without_dropout_rows_the_forward_is_the_plain_backbones_draw_for_draw(tiny_bert_dir, sentences):
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="cls_before_pooler").train()
    plain = AutoModel.from_pretrained(tiny_bert_dir, attn_implementation="sdpa").train()
    assert encoder.supports_dropout_rows
    assert encoder.backbone.config._attn_implementation == ROW_DROPOUT_ATTENTION
    assert sum(isinstance(m, RowDropout) for m in encoder.backbone.modules()) == 1 + 3 * 2  # embeddings + 3 a layer
    batch = encoder.tokenize(sentences, max_len=None)
    torch.manual_seed(3)
    got = encoder(**batch)
    torch.manual_seed(3)
    expected = plain(**batch).last_hidden_state[:, 0]
    torch.manual_seed(4)
    other_draw = encoder(**batch)
    assert torch.equal(got, expected)
    assert not torch.allclose(got, other_draw)  # dropout is on: the equality above compared two dropout draws


@pytest.mark.parametrize("hidden, attention", [(0.1, 0.1), (0.0, 0.5), (0.5, 0.0)])
def test_dropout_rows_gives_dropout_to_the_first_rows_only(tiny_bert_dir, sentences, hidden, attention):
    """(0.0, 0.5): only the attention probabilities' dropout acts, so SDPA's rows are tested on their own."""
    encoder = dropout_encoder(tiny_bert_dir, hidden, attention).train()
    assert encoder.backbone.config._attn_implementation == ROW_DROPOUT_ATTENTION
    n = 6
    batch = three_views(encoder, sentences[:n])
    assert (batch["attention_mask"] == 0).any()  # padding, so the mask is split with the rows too
    weights = torch.randn(3 * n, encoder.hidden_size, generator=torch.Generator().manual_seed(0))

    torch.manual_seed(11)
    pooled = encoder(**batch, dropout_rows=2 * n)
    (pooled * weights).sum().backward()
    one_forward = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    encoder.zero_grad()

    # the reference: the two passes the trainer ran so far, a 2N-row train-mode forward and an N-row eval one
    torch.manual_seed(11)
    dropout_views = encoder(**rows(batch, 0, 2 * n))
    dropout_off = eval_mode_forward(encoder, rows(batch, 2 * n))
    (torch.cat([dropout_views, dropout_off]) * weights).sum().backward()
    two_forwards = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}

    assert encoder.training
    torch.testing.assert_close(pooled[:2 * n], dropout_views, rtol=1e-5, atol=1e-6)  # the same masks
    torch.testing.assert_close(pooled[2 * n:], dropout_off, rtol=1e-5, atol=1e-6)  # no dropout at all
    without_dropout = eval_mode_forward(encoder, rows(batch, 0, n))
    assert not torch.allclose(pooled[:n], without_dropout, atol=1e-4)  # the first rows did get dropout
    assert not torch.allclose(pooled[:n], pooled[n:2 * n], atol=1e-4)  # with independent masks: z1 != z2
    assert one_forward.keys() == two_forwards.keys() and len(one_forward) > 10
    for name, gradient in one_forward.items():
        torch.testing.assert_close(gradient, two_forwards[name], rtol=1e-4, atol=1e-6, msg=name)


def test_dropout_rows_at_the_edges_and_in_eval_mode(tiny_bert_dir, sentences):
    encoder = dropout_encoder(tiny_bert_dir, 0.1, 0.1).train()
    batch = encoder.tokenize(sentences[:5], max_len=None)
    torch.manual_seed(5)
    all_rows = encoder(**batch, dropout_rows=5)
    torch.manual_seed(5)
    torch.testing.assert_close(all_rows, encoder(**batch), rtol=0, atol=0)  # every row: the ordinary forward
    no_rows = encoder(**batch, dropout_rows=0)
    torch.testing.assert_close(no_rows, eval_mode_forward(encoder, batch), rtol=1e-6, atol=1e-6)
    encoder.eval()
    torch.testing.assert_close(encoder(**batch, dropout_rows=3), encoder(**batch), rtol=0, atol=0)
    encoder.train()
    for bad in (-1, 6):
        with pytest.raises(ValueError, match=rf"dropout_rows={bad} is outside \[0, 5\]"):
            encoder(**batch, dropout_rows=bad)
    assert encoder._row_dropout.rows is None  # reset after every forward, a refused one included


SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
         "vocab_size": 100, "max_position_embeddings": 64}
# BERT-family architectures, tiny and random: attention through transformers' interface (SDPA: RoBERTa, ELECTRA,
# DistilBERT, ModernBERT) or written in the model with an nn.Dropout on the probabilities (MPNet, DeBERTa-v2).
BERT_FAMILY = {
    "roberta": ("RobertaConfig", "RobertaModel", {}),
    "electra": ("ElectraConfig", "ElectraModel", {"embedding_size": 32}),
    "distilbert": ("DistilBertConfig", "DistilBertModel", {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}),
    "mpnet": ("MPNetConfig", "MPNetModel", {}),
    "deberta-v2": ("DebertaV2Config", "DebertaV2Model", {}),
    "modernbert": ("ModernBertConfig", "ModernBertModel", {"vocab_size": 50368, "attention_dropout": 0.1,
                                                           "embedding_dropout": 0.1, "mlp_dropout": 0.1}),
}


@pytest.mark.parametrize("architecture", BERT_FAMILY)
def test_dropout_rows_works_across_the_bert_family(architecture):
    import transformers

    config_class, model_class, options = BERT_FAMILY[architecture]
    torch.manual_seed(0)
    backbone = getattr(transformers, model_class)(getattr(transformers, config_class)(**{**SMALL, **options}))
    encoder = Encoder(backbone, tokenizer=None, pooler="avg").train()
    assert encoder.supports_dropout_rows
    input_ids = torch.randint(5, 100, (9, 7))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = attention_mask[7, 4:] = 0
    pooled = encoder(input_ids, attention_mask, dropout_rows=6)
    torch.testing.assert_close(pooled[6:], eval_mode_forward(encoder, {"input_ids": input_ids[6:],
                                                                       "attention_mask": attention_mask[6:]}),
                               rtol=1e-5, atol=1e-6)
    without_dropout = eval_mode_forward(encoder, {"input_ids": input_ids[:3], "attention_mask": attention_mask[:3]})
    assert not torch.allclose(pooled[:3], without_dropout, atol=1e-4)


def test_dropout_rows_is_refused_where_the_backbone_applies_dropout_itself(tiny_bert_dir, sentences):
    """'eager' attention drops attention probabilities with F.dropout(training=module.training)."""
    encoder = dropout_encoder(tiny_bert_dir, 0.1, 0.1, attn_implementation="eager").train()
    assert not encoder.supports_dropout_rows
    batch = encoder.tokenize(sentences[:2], max_len=None)
    with pytest.raises(ValueError, match="dropout_rows: the bert backbone \\(attention 'eager'\\) applies dropout"):
        encoder(**batch, dropout_rows=1)
    encoder(**batch)  # an ordinary forward still works


@pytest.mark.slow  # compiles the encoder with torch.compile
def test_dropout_rows_under_torch_compile(tiny_bert_dir, sentences):
    """fullgraph: setting the rows, the split attention and the row dropout trace as one graph.

    On CUDA (where the trainer compiles) with inductor, the trainer's backend. On CPU with dynamo and AOT
    autograd only (aot_eager): that is where a graph break or a data-dependent branch would show, while
    inductor's CPU code generation would add about 30 s on a 2-core machine and no path the trainer runs.
    """
    require_module("torch._dynamo", "torch.compile comes with every torch wheel CI installs")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    encoder = dropout_encoder(tiny_bert_dir, 0.1, 0.1).to(device).train()
    n = 4
    batch = {name: tensor.to(device) for name, tensor in three_views(encoder, sentences[:n]).items()}
    dropout_off = eval_mode_forward(encoder, rows(batch, 2 * n)).detach()
    without_dropout = eval_mode_forward(encoder, rows(batch, 0, n)).detach()
    torch._dynamo.reset()
    compiled = torch.compile(encoder, fullgraph=True, backend="inductor" if device.type == "cuda" else "aot_eager")
    pooled = compiled(**batch, dropout_rows=2 * n)
    pooled.sum().backward()
    assert encoder._row_dropout.rows is None
    torch.testing.assert_close(pooled[2 * n:], dropout_off, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(pooled[:n], without_dropout, atol=1e-4)
    assert not torch.allclose(pooled[:n], pooled[n:2 * n], atol=1e-4)
    gradient = encoder.backbone.embeddings.word_embeddings.weight.grad
    assert gradient is not None and torch.isfinite(gradient).all() and gradient.abs().sum() > 0
    encoder.eval()  # and the compiled module without dropout_rows is the ordinary eval forward
    torch.testing.assert_close(compiled(**rows(batch, 2 * n)), dropout_off, rtol=1e-4, atol=1e-5)
