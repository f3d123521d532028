"""A key of a space file's `search:` or `resources:` is one row of one table (raycse/settings/space_keys.py): a row
added in a copy of the package is parsed from a file, checked, replaced by a budget that may replace it, and
documented in the reference and the JSON Schema, with nothing else touched. And `search.test_eval` is one
enumerated type, written as its string."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from raycse.judging.confirmation_plan import JUDGED_BUDGETS, ConfirmPlan
from raycse.sampling.samplers import SAMPLER_DEFAULTS
from raycse.settings import space as space_module
from raycse.settings.budgets import BUDGETS, FULL, JUDGED_AS
from raycse.settings.confirm import CONFIRM_KEYS
from raycse.settings.space import load_space
from raycse.settings.space_keys import SPACE_KEYS, TestScoring, defaults_of, keys_of

ROOT = Path(__file__).resolve().parent.parent
NEW_ROW = ('    SpaceKey("search.patience", int, 3, "evaluations without a better objective before a trial stops", '
           'low=1, high=10, budget=True),\n')
TABLE_START = "SPACE_KEYS: tuple[SpaceKey, ...] = (\n"

PROBE = textwrap.dedent("""
    import json, sys
    import raycse
    from raycse.errors import ConfigError
    from raycse.settings.reference import space_reference, space_schema
    from raycse.settings.space import load_space

    good, plain, bad, bad_budget = sys.argv[1:5]
    space = load_space(good)
    out = {"package": raycse.__file__, "value": space.patience, "budget": space.with_budget("cpu").patience,
           "default": load_space(plain).patience, "default_budget": load_space(plain).with_budget("cpu").patience}
    for name, path in (("bad", bad), ("bad_budget", bad_budget)):
        try:
            load_space(path)
        except ConfigError as err:
            out[name] = str(err)
    out["rows"] = [line for line in space_reference().splitlines() if "patience" in line]
    schema = space_schema()["properties"]
    out["schema"] = schema["search"]["properties"]["patience"]
    out["budget_schema"] = schema["cpu_budget"]["properties"]["patience"]
    print(json.dumps(out))
""")


def _space_file(path: Path, search: dict, budget: dict) -> str:
    raw = yaml.safe_load((ROOT / "search_spaces" / "focal.yaml").read_text(encoding="utf-8"))
    raw["search"].update(search)
    raw["cpu_budget"].update(budget)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return str(path)


def test_a_new_search_key_is_one_row_parsed_checked_replaced_by_a_budget_and_documented(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "raycse", copy / "raycse", ignore=shutil.ignore_patterns("__pycache__"))
    table = copy / "raycse" / "settings" / "space_keys.py"
    text = table.read_text(encoding="utf-8")
    assert text.count(TABLE_START) == 1
    table.write_text(text.replace(TABLE_START, TABLE_START + NEW_ROW), encoding="utf-8")  # the one change
    files = [_space_file(tmp_path / "good.yaml", {"patience": 5}, {"patience": 2}),
             _space_file(tmp_path / "plain.yaml", {}, {}),
             _space_file(tmp_path / "bad.yaml", {"patience": 0}, {}),
             _space_file(tmp_path / "bad-budget.yaml", {}, {"patience": 11})]
    done = subprocess.run([sys.executable, "-c", PROBE, *files], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(copy)}, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["package"].startswith(str(copy))  # the copy ran, not the checkout
    assert (out["value"], out["budget"], out["default"], out["default_budget"]) == (5, 2, 3, 3)
    assert out["bad"] == f"{files[2]}: search.patience: must be an integer >= 1, got 0"
    assert out["bad_budget"] == f"{files[3]}: cpu_budget: search.patience: must be an integer <= 10, got 11"
    assert "| `search.patience` | `3` | integer 1 to 10 | evaluations without a better objective before a trial " \
           "stops |" in out["rows"]
    assert "| `cpu_budget.patience` |  | as search.patience | replaces `search.patience` |" in out["rows"]
    assert out["schema"] == out["budget_schema"] == {"type": "integer", "minimum": 1, "maximum": 10}
    # and the checkout itself has no such key: a space file that gives it is refused by name
    assert "patience" not in space_module.SEARCH_KEYS


def test_the_parser_key_sets_are_the_tables():
    assert space_module.SEARCH_KEYS == {"num_samples", "max_concurrent", "seed", "test_eval", "scheduler", "sampler",
                                        "confirm"}
    assert space_module.SAMPLER_KEYS == set(SAMPLER_DEFAULTS)  # the sampler table's keys, with its defaults
    assert defaults_of("search.sampler") == SAMPLER_DEFAULTS
    assert CONFIRM_KEYS == {"top_k", "choose_seeds", "judge_seeds", "test_seeds", "looks"}
    plan = ConfirmPlan()  # search.confirm's defaults are the confirmation plan's, stated there alone
    assert defaults_of("search.confirm") == {name: getattr(plan, name) for name in CONFIRM_KEYS}
    assert {key.name for key in space_module.BUDGET_LEAVES} == {"num_samples", "max_concurrent", "test_eval"}
    assert len({key.path for key in SPACE_KEYS}) == len(SPACE_KEYS)
    held = {f.name for f in dataclasses.fields(space_module.SearchSpace)}
    assert {key.name for key in keys_of("search")} <= held  # each `search:` leaf is a field of the space
    assert {f.name for f in dataclasses.fields(space_module.Resources)} == space_module.RESOURCE_KEYS


def test_test_eval_is_one_enumerated_type_written_as_its_string():
    space = load_space(ROOT / "search_spaces" / "focal.yaml")
    assert space.test_eval is TestScoring.BEST
    assert space.test_eval.scores_any and not space.test_eval.scores_every_run
    assert TestScoring.ALL.scores_every_run and not TestScoring.NONE.scores_any
    # a space built in code may give the string; it is held as the type
    assert dataclasses.replace(space, test_eval="none").test_eval is TestScoring.NONE
    # written, logged and shown as the space file spells it
    assert json.dumps({"test_eval": space.test_eval}) == '{"test_eval": "best"}'
    assert f"{space.test_eval}" == str(space.test_eval) == "best" == space.test_eval


def test_each_budget_a_search_runs_is_judged_as_one_the_judging_knows():
    """The settings' budgets (the file's own and its sections) and the judging's two (a decision, a
    demonstration) are different things under different names; each of the first maps onto one of the second."""
    assert set(JUDGED_AS) == {FULL, *BUDGETS} and set(JUDGED_AS.values()) <= set(JUDGED_BUDGETS)
