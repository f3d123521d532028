"""Every key of a space file: its type, default, allowed values and meaning, and the JSON Schema editors check a file
against (space.schema.json, shipped beside the packaged space files).

A training setting's entry comes from its TrainConfig field (its annotation, default and `setting(...)` metadata), a
loss hyperparameter's from the loss registry, and a key of `search:` or `resources:` from its row of the key table
(space_keys.py), so a new setting, loss or search key is documented by itself. The sections around them (the top
level, `families:`, the budgets `cpu_budget:` and `paper_budget:`, ...) are described here; a test holds this list
equal to the keys space.py accepts.
docs/reference.md is written from these entries (scripts/reference.py, which adds the command line's flags).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raycse.losses import LOSS_NAMES, REGULARISERS, hyperparameter_catalogue, loss_hyperparameters
from raycse.settings.budgets import BUDGET_WORDS, BUDGETS
from raycse.settings.checks import INT_LIMIT, NAME_LIMIT, SEED_LIMIT
from raycse.settings.config import TrainConfig, field_kind
from raycse.settings.distributions import DISTRIBUTIONS
from raycse.settings.families import TRAIN_SEARCHABLE
from raycse.settings.space import BUDGET_LEAVES, TOP_TRAIN_KEYS
from raycse.settings.space_keys import SpaceKey, defaults_of, keys_of

SCHEMA_PATH = Path(__file__).resolve().parent / "space.schema.json"


@dataclass(frozen=True)
class Key:
    """One key of a space file: where it sits ('search.confirm.top_k'), the JSON Schema of its value, its default
    as a space file would write it ('' for none), the values allowed in words, and what it does."""

    path: str
    schema: dict
    default: str
    allowed: str
    meaning: str


# ------------------------------------------------------------------------------------------ values
def _yaml(value: Any) -> str:
    """A default as a space file writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _integer(low: int | None = None, high: int | None = None, null: bool = False) -> dict:
    schema: dict[str, Any] = {"type": ["integer", "null"] if null else "integer"}
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return schema


def _number(low: float | None = None, high: float | None = None, strict: bool = False, null: bool = False) -> dict:
    schema: dict[str, Any] = {"type": ["number", "null"] if null else "number"}
    if low is not None and low > -math.inf:
        schema["exclusiveMinimum" if strict else "minimum"] = low
    if high is not None and high < math.inf:
        schema["maximum"] = high
    return schema


def _choice(choices, null: bool = False) -> dict:
    return {"enum": [*choices, None] if null else list(choices)}


# A user's own loss by reference (./my_loss.py:MyLoss, package.module:MyLoss; docs/own-loss.md), beside the names
OWN_LOSS = {"type": "string", "pattern": "^.+:[A-Za-z_][A-Za-z0-9_]*$"}


def _loss_schema() -> dict:
    return {"anyOf": [_choice(LOSS_NAMES), OWN_LOSS]}


def _words(schema: dict) -> str:
    """The allowed values of a schema in words: '1 to 100', '> 0', 'one of a, b'."""
    if "enum" in schema:
        return " | ".join(_yaml(choice) for choice in schema["enum"])
    if "const" in schema:
        return _yaml(schema["const"])
    if "anyOf" in schema:
        return " | ".join(_words(option) for option in schema["anyOf"])
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum")
    kinds = schema.get("type", "")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    null = " or null" if "null" in kinds else ""
    if "integer" in kinds or "number" in kinds:
        kind = "integer" if "integer" in kinds else "number"
        if low is not None and high is not None and high not in (INT_LIMIT, SEED_LIMIT):
            return f"{kind} {_yaml(low)} to {_yaml(high)}{null}"
        if low is not None:
            return f"{kind} {'>' if 'exclusiveMinimum' in schema else '>='} {_yaml(low)}{null}"
        return f"{kind}{null}"
    return {"string": "text", "boolean": "true | false", "object": "mapping", "array": "list"}.get(kinds[0],
                                                                                                   kinds[0]) + null


# ------------------------------------------------------------------------------------------ training settings
def setting_schema(f: dataclasses.Field) -> dict:
    """The JSON Schema of one TrainConfig field, from its annotation and metadata."""
    kind, optional = field_kind(f)
    meta = f.metadata
    if meta.get("choices"):
        return _choice(meta["choices"], null=optional)
    if kind is int:
        return _integer(meta.get("low"), INT_LIMIT if meta.get("high") is None else meta["high"], null=optional)
    if kind is float:
        return _number(meta.get("low"), meta.get("high"), meta.get("strict", False), null=optional)
    if kind is bool:
        return {"type": ["boolean", "null"] if optional else "boolean"}
    if kind is dict:
        return {"type": "object", "additionalProperties": {"type": "number"}}
    return {"type": ["string", "null"] if optional else "string", "minLength": 1}


def train_keys(prefix: str = "train.") -> list[Key]:
    keys = []
    for f in dataclasses.fields(TrainConfig):
        schema = setting_schema(f)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        meaning = f.metadata.get("help", "")
        if f.name == "loss":
            meaning = "the loss (set by `loss:` or `families:`, not here)"
        if f.metadata.get("searchable"):
            meaning += " (searchable in `space:`)"
        keys.append(Key(prefix + f.name, schema, _yaml(default), _words(schema), meaning))
    return keys


# ------------------------------------------------------------------------------------------ loss hyperparameters
def hyperparameter_keys() -> list[Key]:
    """Each loss hyperparameter a space may search (or fix in `train.hparams`), with its defaults by loss."""
    keys = []
    for name, owners in hyperparameter_catalogue().items():
        spec = next(iter(owners.values()))
        integer = all(s.integer for s in owners.values())
        schema = _integer(int(spec.low)) if integer else _number(spec.low, spec.high, spec.strict)
        defaults = ", ".join(f"{owner}: {_yaml(s.default)}" for owner, s in owners.items())
        ranges = {s.allowed.removeprefix("must be ") for s in owners.values()}
        allowed = ranges.pop() if len(ranges) == 1 else "; ".join(
            f"{owner}: {s.allowed.removeprefix('must be ')}" for owner, s in owners.items())
        keys.append(Key(name, schema, defaults, allowed, f"a hyperparameter of {', '.join(owners)}"))
    return keys


DISTRIBUTION_SCHEMA = {
    "oneOf": [
        {"const": "declared"},
        {"type": "object", "additionalProperties": False, "required": ["type", "low", "high"],
         "properties": {"type": {"enum": [d for d in DISTRIBUTIONS if d != "categorical"]},
                        "low": {"type": "number"}, "high": {"type": "number"}}},
        {"type": "object", "additionalProperties": False, "required": ["type", "choices"],
         "properties": {"type": {"const": "categorical"},
                        "choices": {"type": "array", "minItems": 1,
                                    "items": {"type": ["number", "string", "boolean", "null"]}}}},
    ],
}


def searchable_names() -> list[str]:
    return [*hyperparameter_catalogue(), *TRAIN_SEARCHABLE]


# ------------------------------------------------------------------------------------------ the sections
def key_schema(key: SpaceKey) -> dict:
    """The JSON Schema of a row of the key table, from its kind, range or choices (or the row's own schema)."""
    if key.schema is not None:
        return key.schema
    if key.allowed is not None:
        return _choice(key.allowed, null=key.null)
    if key.kind is int:
        return _integer(key.low, key.high, null=key.null)
    return _number(key.low, key.high, null=key.null)


def _rows(section: str) -> list[Key]:
    """The entries of one section's rows of the key table."""
    return [Key(key.path, key_schema(key), _yaml(key.default), _words(key_schema(key)), key.words)
            for key in keys_of(section)]


def _properties(section: str) -> dict:
    return {key.name: key_schema(key) for key in keys_of(section)}


def section_keys() -> list[Key]:
    """Every key outside `train:`, in the order a space file writes them."""
    train = {f.name: setting_schema(f) for f in dataclasses.fields(TrainConfig)}
    space = {"type": "object", "propertyNames": {"enum": searchable_names()},
             "additionalProperties": {"$ref": "#/$defs/distribution"}}
    published = {"type": "object", "propertyNames": {"enum": searchable_names()},
                 "additionalProperties": {"type": ["number", "string", "boolean", "null"]}}
    keys = [
        Key("experiment", {"type": "string", "minLength": 1, "maxLength": NAME_LIMIT, "pattern": "^[^/:\\u0000-"
            "\\u001f\\u007f]+$"}, "raycse-<file name>", f"text, 1 to {NAME_LIMIT} characters, no `/`, `:` or "
            "control characters", "the MLflow experiment, the Optuna study, Tune's folder and the registered "
            "model's name"),
        Key("description", {"type": "string"}, "", "text", "one line on what the file searches"),
        Key("model", train["model"], _yaml(TrainConfig.model), "text", "the same as `train.model`"),
        Key("corpus", train["corpus"], _yaml(TrainConfig.corpus), "text", "the same as `train.corpus`"),
        Key("objective", train["objective"], _yaml(TrainConfig.objective), "text",
            "the same as `train.objective`"),
        Key("loss", _loss_schema(), "", f"{_words(_choice(LOSS_NAMES))}, or your own: ./my_loss.py:MyLoss, "
            "package.module:MyLoss, an entry point's name", "the loss of every trial (required, unless `families:` is "
            "given; your own: docs/own-loss.md)"),
        Key("reg", _choice(REGULARISERS, null=True), "null", _words(_choice(REGULARISERS, null=True)),
            "a regulariser added with weight `lambda`"),
        Key("train", {"type": "object", "additionalProperties": False, "properties": train}, "{}", "mapping",
            "the fixed training settings of every trial (below)"),
        Key("space", space, "{}", "mapping", "parameter: distribution, for each searched parameter: a loss "
            "hyperparameter or a searchable training setting"),
        Key("space.PARAM", {"$ref": "#/$defs/distribution"}, "", "`{type: uniform | loguniform | int, low, "
            "high}`, `{type: categorical, choices: [...]}` or `declared`", "how the parameter is drawn (loguniform: "
            "low > 0; int: integer ends; declared: the range and scale its loss declares)"),
        Key("published", published, "{}", "mapping", "the paper's point, run first; each a searched parameter, "
            "inside its range"),
        Key("families", {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "additionalProperties": False, "properties": {
                "loss": _loss_schema(), "reg": _choice(REGULARISERS, null=True), "space": space,
                "published": published}}}, "", "mapping", "a conditional space instead of `loss`/`space`/"
            "`published`: NAME: {loss (default: NAME), reg, space, published}; the family is itself searched"),
        Key("search", {"type": "object", "additionalProperties": False}, "{}", "mapping", "the search's settings"),
        *_rows("search"),
        Key("search.scheduler", {"type": "object", "additionalProperties": False},
            _yaml(defaults_of("search.scheduler")), "mapping", "when trials are stopped early"),
        *_rows("search.scheduler"),
        Key("search.sampler", {"type": "object", "additionalProperties": False},
            _yaml(defaults_of("search.sampler")), "mapping", "which configurations the search stage tries"),
        *_rows("search.sampler"),
        Key("search.confirm", {"type": ["object", "null"], "additionalProperties": False},
            _yaml(defaults_of("search.confirm")), "mapping or null", "how the answer is reached after the search "
            "stage (null: no choosing or judging)"),
        *_rows("search.confirm"),
        Key("resources", {"type": "object", "additionalProperties": False}, _yaml(defaults_of("resources")),
            "mapping", "what one trial gets"),
        *_rows("resources"),
        *(key for name in BUDGETS for key in _budget_keys(name, train)),
        Key("paper", {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "properties": {
                "model": {"type": "string", "minLength": 1}, "corpus": {"type": "string", "minLength": 1},
                "source": {"type": "string", "minLength": 1},
                "figures": {"type": "object", "additionalProperties": {"oneOf": [
                    {"type": "number"},
                    {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "number"}}]}}}}},
            "{}", "FAMILY: {model, corpus, source, figures}", "a paper's reported row (each task a number or "
            "[mean, std]), the model and corpus it was measured on and where that corpus is read from (`source`); "
            "shown only under a caption that says whether it is comparable: it is when the search trains that model "
            "on that source (the paper's recipe, to run: `paper_budget`), and a row whose seven tasks do not average "
            "to its avg is noted"),
    ]
    return keys


def _budget_keys(name: str, train: dict) -> list[Key]:
    """The keys of a named budget's section (`cpu_budget:`, `paper_budget:`): what each replaces or merges over."""
    section = BUDGETS[name]
    keys = [Key(section, {"type": ["object", "null"], "additionalProperties": False}, "null", "mapping or null",
                BUDGET_WORDS[name])]
    keys += [Key(f"{section}.{key}", train[key], "", "text",
                 f"replaces the file's `{key}` (the same as `{section}.train.{key}`)") for key in TOP_TRAIN_KEYS]
    keys += [Key(f"{section}.{key.name}", key_schema(key), "", f"as {key.path}", f"replaces `{key.path}`")
             for key in BUDGET_LEAVES]
    for part, source in (("scheduler", "search.scheduler"), ("resources", "resources")):
        keys.append(Key(f"{section}.{part}", {"type": "object", "additionalProperties": False,
                                              "properties": _properties(source)}, "", f"as {source}",
                        f"merged key by key over `{source}`"))
    keys += [
        Key(f"{section}.train", {"type": "object", "additionalProperties": False, "properties": train}, "",
            "as train", "merged key by key over the fixed training settings (`train:` and the top-level model, "
            "corpus, objective); `null` sets an optional setting back to none"),
        Key(f"{section}.confirm", {"type": ["object", "null"], "additionalProperties": False,
                                   "properties": _properties("search.confirm")}, "", "as search.confirm, or null",
            "merged key by key "
            "over `search.confirm` and checked again as merged; null: no choosing or judging"),
        Key(f"{section}.space", {"type": "object", "propertyNames": {"enum": searchable_names()},
                                 "additionalProperties": {"oneOf": [{"$ref": "#/$defs/distribution"},
                                                                    {"type": "null"}]}}, "",
            "PARAM: a distribution or null", "a distribution replaces that parameter's in every family that "
            "searches it; null takes the parameter out of the search (and the published point), leaving its fixed "
            "value"),
    ]
    return keys


# ------------------------------------------------------------------------------------------ the schema
def space_schema() -> dict:
    """The JSON Schema of a space file: each key's value, no unknown key at any level. (Rules between keys, such as
    low below high or a published value inside its range, are left to raycse's own validation.)"""
    by_path = {key.path: dict(key.schema) for key in section_keys()}
    for path, schema in list(by_path.items()):
        if "." in path and not path.startswith("space."):  # space.PARAM: the distributions, under $defs
            parent, name = path.rsplit(".", 1)
            by_path[parent].setdefault("properties", {})[name] = schema
    top = {path: schema for path, schema in by_path.items() if "." not in path}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "raycse search-space file",
        "description": "A search-space file of `raycse search --space` (docs/reference.md).",
        "type": "object",
        "additionalProperties": False,
        "properties": top,
        "$defs": {"distribution": DISTRIBUTION_SCHEMA},
    }


def schema_text() -> str:
    return json.dumps(space_schema(), indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------------------------ the reference
def cell(text: str) -> str:
    """Text for a Markdown table's cell: a `|` in it would end the cell."""
    return text.replace("|", "\\|")


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell(text) for text in row) + " |" for row in rows)]


def _table(keys: list[Key], first: str = "key") -> list[str]:
    return table_lines([first, "default", "allowed", "meaning"],
                 [[f"`{k.path}`", f"`{k.default}`" if k.default else "", k.allowed, k.meaning] for k in keys])


def space_reference() -> str:
    """The space-file part of docs/reference.md, in Markdown."""
    sections = section_keys()
    out = ["## Space files", "",
           "A space file is strict YAML (a key written twice is an error). Every key below is checked, with the file "
           "and the key named in the error, before anything starts; `raycse/settings/space.schema.json` (shipped in "
           "the package) is the same rules as a JSON Schema for editors.", "",
           "### Top level and sections", "", *_table(sections), "",
           "### `train:` (the fixed training settings)", "",
           "Every setting of `raycse train`, under its Python name; the searchable ones may also be searched in "
           "`space:`.", "", *_table(train_keys()), "",
           "### Loss hyperparameters", "",
           "What `space:` may search (beside the searchable training settings) and `train.hparams` may fix, by "
           "their papers' names; the default is each loss's published value.", "",
           *_table(hyperparameter_keys(), first="hyperparameter"), "",
           "### Losses", "",
           "`loss:` (or a family's `loss`) and the hyperparameters each takes, with their defaults.", "",
           *table_lines(["loss", "hyperparameters (default)"],
                  [[f"`{name}`", ", ".join(f"{k} ({_yaml(v)})" for k, v in loss_hyperparameters(name).items())]
                   for name in LOSS_NAMES]), ""]
    return "\n".join(out)
