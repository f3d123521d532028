"""The command line covers the configuration: every TrainConfig field that asks for a flag, and every loss
hyperparameter of the registry, has its `raycse train` flag, and each flag sets its own setting."""
from __future__ import annotations

import dataclasses
import re

import pytest

from raycse.cli import build_parser, main
from raycse.losses import hyperparameter_catalogue
from raycse.settings.config import TrainConfig

FLAGGED_FIELDS = [f for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag", True)]
REQUIRED = ["train", "--output-dir", "out"]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def lists(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def a_value_other_than_the_default(field: dataclasses.Field) -> tuple[list[str], object]:
    """The command-line words that set `field` to something other than its default, and the value they give."""
    if field.metadata.get("choices"):
        value = next(choice for choice in reversed(field.metadata["choices"]) if choice != field.default)
        return [flag(field.name), value], value
    kind = str(field.type).split(" | ")[0]
    if kind == "bool":
        return [flag(field.name) if not field.default else "--no-" + field.name.replace("_", "-")], not field.default
    value = {"int": 7, "float": 0.25, "str": "some-value"}[kind]
    return [flag(field.name), str(value)], value


def test_every_flagged_field_and_every_hyperparameter_is_listed_by_train_help(capsys):
    text = help_of("train", capsys)
    assert FLAGGED_FIELDS and "pos_ratio" in hyperparameter_catalogue()
    missing = [flag(f.name) for f in FLAGGED_FIELDS if not lists(text, flag(f.name))]
    missing += [flag(name) for name in hyperparameter_catalogue() if not lists(text, flag(name))]
    assert missing == []
    assert lists(text, "--pos-ratio")


@pytest.mark.parametrize("field", FLAGGED_FIELDS, ids=lambda f: f.name)
def test_each_fields_flag_sets_that_field(field):
    words, value = a_value_other_than_the_default(field)
    parser = build_parser()
    assert getattr(parser.parse_args(REQUIRED), field.name) != value
    assert getattr(parser.parse_args([*REQUIRED, *words]), field.name) == value


@pytest.mark.parametrize("name", sorted(hyperparameter_catalogue()))
def test_each_hyperparameters_flag_sets_one_setting_to_its_value(name):
    integer = all(spec.integer for spec in hyperparameter_catalogue()[name].values())
    value = 3 if integer else 0.375
    parser = build_parser()
    before = vars(parser.parse_args(REQUIRED))
    after = vars(parser.parse_args([*REQUIRED, flag(name), str(value)]))
    changed = {key: after[key] for key in after if after[key] != before[key]}
    assert list(changed.values()) == [value] and type(changed.popitem()[1]) is type(value)


def test_search_help_lists_the_stage_and_storage_flags(capsys):
    text = help_of("search", capsys)
    for option in ("--choose-seeds", "--judge-seeds", "--no-confirm", "--optuna-storage"):
        assert lists(text, option), option
