"""The Args entries of the Python API's docstrings, written from where each parameter's rule is stated: the option
tables (raycse/settings/options.py) and TrainConfig's field metadata (raycse/settings/config.py). A function's
docstring holds one `<...>` line where its entries go; the decorators write them there, in Optuna's layout (the
name, then what it is, its allowed values and its default, indented below), so that `help(raycse.search)` describes
every option and no description is kept twice.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable
from typing import Any

from raycse.settings.checks import INT_LIMIT
from raycse.settings.config import TrainConfig, field_kind
from raycse.settings.options import Option


def option_described(option: Option) -> str:
    """What an option is, as a docstring says it: its meaning, allowed values and default."""
    meaning = ("False: " if option.kind is bool and option.default else "") + option.help  # the help is --no-NAME's
    return _description(meaning, _allowed(option.kind, option.low, option.high, option.choices), option.default,
                        name=option.name)


def setting_described(name: str, derived: dict[str, str] | None = None) -> str:
    """A TrainConfig field as a docstring says it: its meaning, allowed values and default (`derived`: the fields
    whose default the caller works out when the training starts, None, and how)."""
    f = {f.name: f for f in dataclasses.fields(TrainConfig)}[name]
    meta, (kind, _) = f.metadata, field_kind(f)
    meaning = meta["help"]
    if name == "loss":  # its help sends the command line to `raycse train --help`, which lists them
        from raycse.losses import LOSS_NAMES

        meaning = f"the loss: {', '.join(map(repr, LOSS_NAMES))} (`raycse losses` lists their papers)"
    high = meta.get("high") if meta.get("high") is not None else (INT_LIMIT if kind is int else None)
    allowed = _allowed(kind, meta.get("low"), high, meta.get("choices"), meta.get("strict", False))
    if derived and name in derived:
        return _description(meaning, allowed, None, derived[name], name=name)
    return _description(meaning, allowed, f.default, name=name)


def with_option_docs(options: tuple[Option, ...]) -> Callable:
    """Decorator: the docstring's `<...>` line becomes one Args entry per option of the table."""
    return lambda function: _filled(function, [(option.name, option_described(option)) for option in options])


def with_setting_docs(derived: dict[str, str]) -> Callable:
    """Decorator: the docstring's `<...>` line becomes one Args entry per parameter of the function that is a
    TrainConfig flag (`derived`: those whose default the function works out, with how)."""
    fields = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag")}

    def fill(function: Callable) -> Callable:
        names = [name for name in inspect.signature(function).parameters if name in fields]
        return _filled(function, [(name, setting_described(name, derived)) for name in names])

    return fill


def _filled(function: Callable, entries: list[tuple[str, str]]) -> Callable:
    if function.__doc__ is None:  # python -OO
        return function
    lines = function.__doc__.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.strip().startswith("<") and line.strip().endswith(">")]
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    width = 120  # the source's line, counted from the docstring's own indentation
    block = [line for name, text in entries
             for line in [f"{indent}{name}:", *textwrap.wrap(text, width, initial_indent=indent + "    ",
                                                               subsequent_indent=indent + "    ")]]
    function.__doc__ = "\n".join(lines[:at] + block + lines[at + 1:])
    return function


def _allowed(kind: type, low: float | None, high: float | None, choices: tuple | None, strict: bool = False) -> str:
    if choices:
        return "One of " + ", ".join(map(repr, choices)) + "."
    if kind is int and low is not None:
        return f"An integer from {low} to {high}." if high is not None and high <= 1000 else f"An integer >= {low}."
    if kind is float and low is not None:
        return f"A number {'>' if strict else '>='} {low:g}" + (f" and <= {high:g}." if high is not None else ".")
    return ""


# What a help text says the command line's way, said the Python way
PYTHON_WORDS = {"the flags below override it": "tracking_uri, optuna_storage and storage_path override it",
                "EXPERIMENT is a comparison (raycse compare)": "experiment is a comparison's (raycse.compare)"}
# The options whose help says only their default: what they are
MEANINGS = {"tracking_uri": "the MLflow tracking store", "optuna_storage": "the Optuna study's storage"}


def _description(meaning: str, allowed: str, default: Any, why: str | None = None, name: str = "") -> str:
    meaning = re.sub(r"\s*\(Python: [^)]*\)", "", meaning)  # the command line's note on the Python spelling
    meaning = re.sub(r"--([a-z][a-z-]*)", lambda found: found[1].replace("-", "_"), meaning)  # flags: parameters
    for cli_words, python_words in PYTHON_WORDS.items():
        meaning = meaning.replace(cli_words, python_words)
    meaning, said = _split_default(meaning)
    meaning = meaning or MEANINGS[name]
    first = meaning.split(" ", 1)[0]
    if "." not in first and not first.endswith(":"):  # not a value ('auto:', 'torch.compile')
        meaning = meaning[:1].upper() + meaning[1:]
    why = why or said
    default = f"Default: {default!r}" + (f" ({why})." if why else ".")
    return " ".join(part for part in (meaning + ("" if meaning.endswith(".") else "."), allowed, default) if part)


def _split_default(text: str) -> tuple[str, str | None]:
    """(the help without what it says of the default, what it says): 'default: X', '... (default: X)' or
    '... (Y; default: X)'."""
    if text.startswith("default: "):
        return "", text.removeprefix("default: ")
    for opener in ("(default: ", "; default: "):
        at = text.find(opener)
        if at < 0:
            continue
        end, depth = at + len(opener), 0
        while end < len(text) and (text[end] != ")" or depth):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        said = text[at + len(opener):end]
        rest = text[:at].rstrip() + text[end + 1:] if opener.startswith("(") else text[:at] + text[end:]
        return rest, said
    return text, None
