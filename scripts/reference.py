"""Write docs/reference.md and raycse/settings/space.schema.json from the code, or check that they are up to date.

    python scripts/reference.py           # rewrite both
    python scripts/reference.py --check   # exit 1, naming the stale file, when either differs from the code

The space-file keys come from raycse/settings/reference.py (TrainConfig's field metadata, the loss registry, the
space file's sections); the command line's flags from the real parser (`raycse.cli.build_parser`), every
subcommand and flag it has, with the ranges the Python API's option tables and TrainConfig state. So a new flag or
setting appears here by itself; tests/test_reference.py fails until this is rerun.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from raycse import api  # noqa: E402  (after the path above, so a clone's raycse is the one documented)
from raycse.cli import build_parser  # noqa: E402
from raycse.losses import hyperparameter_catalogue  # noqa: E402
from raycse.settings.config import TrainConfig  # noqa: E402
from raycse.settings.reference import SCHEMA_PATH, schema_text, setting_schema, space_reference, table_lines  # noqa: E402
from raycse.settings.reference import _words as words  # noqa: E402

REFERENCE = ROOT / "docs" / "reference.md"
HEADER = """# Reference

Every key of a space file and every flag of the command line, with its type, default, allowed values and meaning.
This page is generated from the code (`python scripts/reference.py`); a test fails when it is out of date. How a
search uses these settings is in [method.md](method.md); the commands' walk-through is in [cli.md](cli.md).

"""


def _option_rules() -> dict[tuple[str, str], str]:
    """(command, option) -> allowed values, from the Python API's option tables (`SEARCH_OPTIONS` is `search`'s)."""
    rules = {}
    for name in dir(api):
        options = getattr(api, name)
        if not name.endswith("_OPTIONS") or not isinstance(options, tuple):
            continue
        for option in options:
            if not isinstance(option, api.Option):
                continue
            low, high = option.low, option.high
            allowed = ""
            if option.kind is int:
                allowed = f"integer {low} to {high}" if high is not None and high <= 1000 else f"integer >= {low}"
            rules[name.removesuffix("_OPTIONS").lower(), option.name] = allowed
    return rules


def _allowed(command: str, action: argparse.Action, rules: dict) -> str:
    if action.choices:
        return " | ".join(map(str, action.choices))
    if (command, action.dest) in rules and rules[command, action.dest]:
        return rules[command, action.dest]
    if command == "train":
        fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
        if action.dest in fields and action.nargs != 0:
            allowed = words(setting_schema(fields[action.dest])).removesuffix(" or null")
            return "" if allowed == "text" else allowed
        if action.dest.startswith("hp_"):
            owners = hyperparameter_catalogue()[action.dest.removeprefix("hp_")]
            ranges = {spec.allowed.removeprefix("must be ") for spec in owners.values()}
            return ranges.pop() if len(ranges) == 1 else "; ".join(
                f"{owner}: {spec.allowed.removeprefix('must be ')}" for owner, spec in owners.items())
    return ""


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "switch"
    if isinstance(action.type, type):
        return {"int": "integer", "float": "number", "str": "text"}.get(action.type.__name__, action.type.__name__)
    return "text"


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "on" if action.default else "off"
    if action.required or action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return ""  # a switch is given or not; a flag without a default is unset until given
    return f"`{action.default}`"


def _meaning(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": "raycse"}
    text = text.replace(f" (default: {action.default})", "")
    return (text + (" (required)" if action.required and action.option_strings else "")).strip()


def _rows(command: str, parser: argparse.ArgumentParser, rules: dict) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest.upper()}` (argument)"
        rows.append([name, _kind(action), _default(action), _allowed(command, action, rules), _meaning(action)])
    return rows


def cli_reference() -> str:
    parser = build_parser()
    rules = _option_rules()
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out = ["## Command line", "",
           "Each command is `raycse`, the command's name and its flags; `--help` after a command's name prints its "
           "flags as well. Before the command's name:", "",
           *table_lines(["flag", "type", "default", "allowed", "meaning"], _rows("", parser, rules)), ""]
    for command, subparser in sub.choices.items():
        out += [f"### `raycse {command}`", "", (helps.get(command) or subparser.description or "").strip(), "",
                *table_lines(["flag", "type", "default", "allowed", "meaning"], _rows(command, subparser, rules)), ""]
    return "\n".join(out)


def render() -> dict[Path, str]:
    """What each generated file should hold."""
    return {REFERENCE: HEADER + space_reference() + "\n" + cli_reference(), SCHEMA_PATH: schema_text()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in render().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{path.relative_to(ROOT)}: {'out of date' if args.check else 'written'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
