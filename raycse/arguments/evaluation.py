"""An evaluation's arguments: its options and the file it writes checked, and the pooler it uses, the model checked
first (its files, that it is a text encoder)."""
from __future__ import annotations

from typing import Any

from raycse.encoder.poolers import AUTO_POOLER
from raycse.errors import ConfigError
from raycse.settings.checks import check_writable_file
from raycse.settings.options import EVAL_OPTIONS, checked


def evaluation_pooler(model: str, pooler: str = "auto", trust_remote_code: bool = False) -> str:
    """The pooler an evaluation of `model` uses: `pooler` itself, or for 'auto' the model's own. The model is
    checked first (its files, that it is a text encoder): a ConfigError naming it otherwise."""
    values = checked(EVAL_OPTIONS, {"model": model, "pooler": pooler, "trust_remote_code": trust_remote_code})
    model, pooler = values["model"], values["pooler"]  # the cheap checks first, before the model is looked at
    from raycse.encoder.loading import check_loadable
    from raycse.encoder.model import resolve_poolers

    try:
        check_loadable(model, trust_remote_code)
    except ConfigError as err:
        raise ConfigError.at("model", str(err)) from None
    if pooler != AUTO_POOLER:
        return pooler
    return resolve_poolers(model, AUTO_POOLER, None, supervised=False)[1]


def evaluation_inputs(given: dict[str, Any]) -> tuple[str, str]:
    """An evaluation's arguments checked, the file it writes and the model included: (the model, its pooler)."""
    values = checked(EVAL_OPTIONS, {option.name: given[option.name] for option in EVAL_OPTIONS})
    if given["output"] is not None:
        check_writable_file("output", given["output"])
    return values["model"], evaluation_pooler(values["model"], given["pooler"], given["trust_remote_code"])
