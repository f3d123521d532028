"""Models scored outside a training, as Ray tasks with a trial's resources: the untouched model (the baseline every
table and verdict carries) and saved checkpoints (the winner's test tasks)."""
from __future__ import annotations

import contextlib

from raycse.records import FINAL_KEYS, TEST_KEYS
from raycse.settings.config import TrainConfig


def score_untouched(base: TrainConfig, poolers: list[str], test_pooler: str | None) -> dict:
    """The starting model, before any step: its objective with each evaluation pooler, and (unless test_pooler is
    None) its seven test tasks with that pooler: {"by_pooler": {pooler: scores}, "test": {task: figure}}."""
    from raycse.encoder.model import Encoder, encode_fn, pick_device
    from raycse.evaluation.sts import build_objective, evaluate_encoder

    objective = build_objective(base.objective, base.objective_columns)
    encoder = Encoder.from_pretrained(base.model, trust_remote_code=base.trust_remote_code).to(pick_device())
    by_pooler = {pooler: objective(encode_fn(encoder, pooler)) for pooler in poolers}
    test = {}
    if test_pooler is not None:
        figures = evaluate_encoder(encode_fn(encoder, test_pooler), tasks="sts")
        test = {k: figures[k] for k in TEST_KEYS}
    return {"by_pooler": by_pooler, "test": test}


def score_checkpoint(path: str, eval_pooler: str) -> dict[str, float]:
    """A saved best checkpoint's seven test tasks (and SICK-R dev, alignment, uniformity)."""
    from raycse.encoder.model import Encoder, encode_fn, pick_device
    from raycse.evaluation.sts import evaluate_encoder

    with local_copy(path) as local:
        encoder = Encoder.from_pretrained(local, pooler=eval_pooler).to(pick_device())
        results = evaluate_encoder(encode_fn(encoder, eval_pooler), tasks="all")
    return {k: results[k] for k in FINAL_KEYS if k in results}


@contextlib.contextmanager
def local_copy(path: str):
    """A local directory with the contents of `path` (itself when local; downloaded from s3:// and the like)."""
    if "://" not in path:
        yield path
        return
    from ray.train import Checkpoint

    with Checkpoint(path).as_directory() as local:
        yield local
