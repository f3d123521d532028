"""The generated reference and schema match the code; the schema holds every shipped space file and refuses what the
loader refuses; and every `raycse ...` command the README and docs/ show parses with the real command line."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
from benchmark_modules import load_script

from raycse.cli import build_parser
from raycse.errors import ConfigError
from raycse.sampling.samplers import SAMPLER_DEFAULTS
from raycse.settings import space as space_module
from raycse.settings.budgets import BUDGETS
from raycse.settings.confirm import CONFIRM_KEYS
from raycse.settings.reference import SCHEMA_PATH, section_keys, space_schema
from raycse.settings.space import load_space, parse_space
from raycse.settings.space_files import PACKAGED_DIR
from raycse.settings.strict_yaml import load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _script():
    return load_script("reference")


def test_the_generated_reference_and_schema_are_up_to_date():
    for path, text in _script().render().items():
        assert path.read_text(encoding="utf-8") == text, (f"{path.relative_to(ROOT)} is out of date: run "
                                                          "python scripts/reference.py")


def test_every_key_the_loader_takes_is_documented_and_no_other():
    documented = {key.path for key in section_keys()}
    sections = {"": space_module.TOP_KEYS, "search.": space_module.SEARCH_KEYS,
                "search.scheduler.": space_module.SCHEDULER_KEYS, "search.sampler.": set(SAMPLER_DEFAULTS),
                "search.confirm.": CONFIRM_KEYS, "resources.": space_module.RESOURCE_KEYS,
                **{f"{section}.": space_module.BUDGET_KEYS for section in BUDGETS.values()}}
    accepted = {prefix + key for prefix, keys in sections.items() for key in keys}
    assert accepted - documented == set(), "keys space.py accepts that the reference does not describe"
    assert documented - accepted - {"space.PARAM"} == set(), "keys the reference describes that space.py refuses"


def _validator():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", sorted(PACKAGED_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_space_file_validates_against_the_schema(path):
    raw = load_settings(path.read_text(encoding="utf-8"), str(path))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(raw)]
    assert errors == []


@pytest.mark.parametrize("change", [
    lambda raw: raw.update(epochs=1),                                   # an unknown top-level key
    lambda raw: raw["search"].update(num_samples="many"),               # a wrong type
    lambda raw: raw["search"].update(num_samples=0),                    # out of range
    lambda raw: raw["train"].update(batch_sise=16),                     # a misspelt training setting
    lambda raw: raw["space"].update(tau={"type": "normal", "low": 0.01, "high": 0.1}),  # an unknown distribution
    lambda raw: raw["space"].update(temperature={"type": "uniform", "low": 0.01, "high": 0.1}),  # not searchable
    lambda raw: raw["cpu_budget"].update(sampler={"name": "random"}),   # not a budget key
    lambda raw: raw["search"]["confirm"].update(judge_seeds=1),         # fewer than an interval needs
], ids=["top-level", "type", "range", "train-key", "distribution", "parameter", "budget-key", "judge-seeds"])
def test_the_schema_refuses_what_the_loader_refuses(change):
    path = PACKAGED_DIR / "focal.yaml"
    raw = load_settings(path.read_text(encoding="utf-8"), str(path))
    assert not list(_validator().iter_errors(raw))
    change(raw)
    assert list(_validator().iter_errors(raw)), "the schema took it"
    with pytest.raises(ConfigError):
        parse_space(raw, "focal.yaml")


def test_the_schema_is_what_the_code_says():
    assert json.loads(SCHEMA_PATH.read_text(encoding="utf-8")) == space_schema()
    load_space(PACKAGED_DIR / "focal.yaml")  # and the file it was checked on loads


# ------------------------------------------------------------------------------------------ the front page
def test_the_readme_is_a_front_page_with_the_newcomers_path_first():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    path = ["Install", "Quick start", "The report page", "The MLflow UI", "Export the winner", "Python API"]
    assert headings[:len(path)] == path
    install = "pip install -c requirements/constraints.txt torch==2.13.0 -e '.[test]'"  # what .ci/run installs with
    assert install in text and install in (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text() and "python -m pytest -q\n" in text
    for page in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md|LICENSE)(?:#[\w-]+)?\)", text):
        assert (ROOT / page).is_file(), page
    assert "Apache License" in (ROOT / "LICENSE").read_text() and (ROOT / "CHANGELOG.md").is_file()


def test_user_docs_carry_no_issue_numbers_or_commit_hashes():
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\bissue \d+|\bcommit [0-9a-f]{7}|\([0-9a-f]{7}\)", text, flags=re.IGNORECASE), path.name


# ------------------------------------------------------------------------------------------ commands in the docs
_SHELL_BREAKS = ("&&", "||", "|", ";", ">", ">>", "2>&1", "#")


def _words(line: str) -> list[str]:
    """A shell line's words up to the first shell operator or comment."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    out = []
    for word in words:
        if word in _SHELL_BREAKS:
            break
        out.append(word)
    return out


def doc_commands() -> list[tuple[str, int, list[str], bool]]:
    """(file, line, the words after `raycse`, whether it is a whole command from a code block) for every `raycse ...`
    a doc shows: each line of a fenced block (after `&&` too), and each inline `raycse ...` code span."""
    found = []
    for path in DOCS:
        fenced, pending = False, ""
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced and line.rstrip().endswith("\\"):  # a shell line continued on the next
                pending += line.rstrip()[:-1] + " "
                continue
            line, pending = pending + line, ""
            if fenced:
                for part in re.split(r"&&|;", line):
                    part = part.strip().removeprefix("$ ").strip()
                    if part.startswith("raycse "):
                        found.append((path.name, number, _words(part)[1:], True))
                continue
            for span in re.findall(r"`(raycse [^`]+)`", line):
                found.append((path.name, number, _words(span)[1:], False))
    return found


COMMANDS = doc_commands()
def _case(where: str, number: int, words: list[str], whole: bool):
    return pytest.param(where, number, words, whole, id=f"{where}:{number}:{' '.join(words)[:40]}")


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20 and any(whole for *_, whole in COMMANDS)


@pytest.mark.parametrize("where, number, words, whole", [_case(*command) for command in COMMANDS])
def test_every_raycse_command_in_the_docs_parses(where, number, words, whole):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    if whole or any(word.startswith("-") for word in words):
        if not whole:  # a command named in prose: its flags must exist; its required arguments may be left out
            command = words[0] if words and words[0] in sub.choices else None
            known = {flag for action in (sub.choices[command] if command else parser)._actions
                     for flag in action.option_strings}
            unknown = [w.split("=")[0] for w in words if w.startswith("-") and w.split("=")[0] not in known]
            assert command is not None or words[0].startswith("-"), f"{where}:{number}: unknown command {words}"
            assert not unknown, f"{where}:{number}: raycse {' '.join(words)}: no such flag {unknown}"
            return
        try:
            parser.parse_args(words)
        except ConfigError as err:
            pytest.fail(f"{where}:{number}: raycse {' '.join(words)}: {err}")
        except SystemExit as done:  # --help, --version
            assert done.code in (0, None), f"{where}:{number}: raycse {' '.join(words)} exits {done.code}"
    else:
        assert words and words[0] in sub.choices, f"{where}:{number}: `raycse {' '.join(words)}`: no such command"
