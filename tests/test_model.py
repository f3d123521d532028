"""The encoder: SimCSE's poolers computed by hand, model-name resolution, and checkpoints that
AutoModel and sentence-transformers both load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

from raycse.errors import ConfigError
from raycse.model import POOLERS, Encoder, resolve_model_path


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


def test_encode_tokenises_a_sentence_list_once_and_then_reuses_it(tiny_bert_dir, sentences):
    encoder = Encoder.from_pretrained(tiny_bert_dir, pooler="avg")
    calls = []
    tokenizer = encoder.tokenizer

    class CountingTokenizer:  # the real tokenizer, counted
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def __call__(self, batch, **kwargs):
            calls.append(len(batch))
            return tokenizer(batch, **kwargs)

    encoder.tokenizer = CountingTokenizer()
    first = encoder.encode(sentences, batch_size=4)
    tokenised = len(calls)
    again = encoder.encode(list(sentences), batch_size=4)  # an equal list: the cached batches serve it
    assert len(calls) == tokenised == -(-len(sentences) // 4)
    assert torch.equal(first, again)
    other = encoder.encode(sentences[:3], batch_size=4)  # different sentences: tokenised afresh
    assert len(calls) == tokenised + 1
    torch.testing.assert_close(other, first[:3], atol=1e-5, rtol=1e-5)


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
def test_saved_checkpoint_loads_in_automodel_and_sentence_transformers(three_layer_bert_dir, sentences, tmp_path, pooler):
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
