import time

import torch

torch.set_num_threads(2)
from sentence_transformers import SentenceTransformer  # noqa: E402 - after the thread count

from raycse.encoder.loading import resolve_model_path  # noqa: E402
from raycse.encoder.model import Encoder  # noqa: E402
from raycse.evaluation.sts import build_objective  # noqa: E402

obj = build_objective("stsb_dev")
S = obj.sentences[:384]
enc = Encoder.from_pretrained("minilm", pooler="avg")
m = SentenceTransformer(str(resolve_model_path("minilm")), device="cpu")
print(
    "raycse backbone attn",
    enc.backbone.config._attn_implementation,
    "st",
    m[0].model.config._attn_implementation,
    flush=True,
)


def t(name, f):
    f()
    a = time.perf_counter()
    f()
    print(name, round(time.perf_counter() - a, 2), flush=True)


t("raycse tokens", lambda: enc.encode(S, pooler="avg", tokens_per_batch=2048))
t("raycse bs16", lambda: enc.encode(S, pooler="avg", batch_size=16))
t("st bs16", lambda: m.encode(S, batch_size=16))
t("st bs128", lambda: m.encode(S, batch_size=128))
with torch.inference_mode():
    feats = m.preprocess(S[:16])
    t("st one batch fwd", lambda: m(feats))
    hf = m[0].model
    t("hf one batch fwd", lambda: hf(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"]))
    t(
        "raycse backbone same batch",
        lambda: enc.backbone(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"]),
    )
print(type(hf), type(enc.backbone))
