"""Every measured figure of README.md and docs/ comes from one recorded result (scripts/doc_figures.py).

A figure a page cites is a span `<!-- figure:NAME -->...<!-- /figure -->` that the script fills from its record in
benchmarks/results/ (named, with its date and machine, in benchmarks/results/figures.json), or a line of a block
quoted from a record (`<!-- from:RECORD -->`). These tests fail when a page's figure disagrees with its record, when
a quoted line is not in its record, and when a page states a figure with a unit (s, min, h, %, MB, GB, ...) that is
neither generated nor a design constant that figures.json lists with its reason.

The benchmarks' pages are read too: benchmarks/README.md is an index of questions under 150 lines, each question has
a page beside it and a folder of records, `benchmarks/results/<question>/<date>-<machine>/`, each with its README;
every relative link of those pages resolves, and so does every link of README.md and docs/ into benchmarks/; their
figure spans and quotes agree with their records.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("doc_figures", ROOT / "scripts" / "doc_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURES = _script()
TABLE = FIGURES.table()
CHECKED_PAGES = [page for page in FIGURES.pages()
                 if str(page.relative_to(ROOT)) not in FIGURES.GENERATED_PAGES]
BENCHMARK_PAGES = FIGURES.benchmark_pages()


def test_every_figure_names_a_record_with_its_date_and_machine_and_reads_from_it():
    for name, spec in TABLE["figures"].items():
        if "record" in spec:
            assert (FIGURES.RESULTS / spec["record"]).is_file(), f"{name}: no record {spec['record']}"
            record = TABLE["records"].get(spec["record"])
            assert record and record.get("date") and record.get("machine"), f"{name}: {spec['record']} has no date " \
                                                                              "and machine in figures.json"
        elif "source" in spec:  # a setting of the repository's own files
            assert (ROOT / spec["source"]).is_file(), f"{name}: no file {spec['source']}"
        else:
            assert "code" in spec or "expr" in spec, f"{name}: read from neither a record nor the code"
        assert FIGURES.rendered(name, TABLE).strip(), name
    for constant in TABLE["constants"]:
        assert constant.get("why"), f"the design constant {constant['pattern']!r} says not why it is one"
    for page, script in FIGURES.GENERATED_PAGES.items():  # each checked by its own test (test_reference, test_costs)
        assert (ROOT / page).is_file() and (ROOT / script).is_file()


def test_every_page_agrees_with_the_records_it_cites():
    assert FIGURES.stale(TABLE) == [], "run python scripts/doc_figures.py (or mend the quote):\n" + \
        "\n".join(FIGURES.stale(TABLE))


@pytest.mark.parametrize("page", CHECKED_PAGES, ids=[str(page.relative_to(ROOT)) for page in CHECKED_PAGES])
def test_every_figure_with_a_unit_is_generated_from_a_record_or_a_design_constant(page):
    found = FIGURES.unmarked(page.read_text(encoding="utf-8"), TABLE)
    assert found == [], (f"{page.relative_to(ROOT)}: figures with a unit that no record gives: mark each as "
                         "<!-- figure:NAME -->...<!-- /figure --> (benchmarks/results/figures.json), quote its block "
                         "with <!-- from:RECORD -->, or list it as a design constant there:\n" + "\n".join(found))


def test_the_checks_fail_on_a_figure_that_disagrees_or_comes_from_nowhere():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    time = FIGURES.rendered("quickstart-time", TABLE)
    span = f"<!-- figure:quickstart-time -->{time}<!-- /figure -->"
    assert span in readme
    edited = readme.replace(span, "<!-- figure:quickstart-time -->6 min 39 s<!-- /figure -->")
    assert FIGURES.fill(edited, TABLE) == readme  # the script writes the record's figure back
    assert FIGURES.unmarked(readme + "\nThe quick start takes 785 s.\n", TABLE)  # an unmarked figure is caught
    assert not FIGURES.unmarked(readme + "\nEach claim is judged at 2.5% one-sided.\n", TABLE)  # a design constant
    record, start, end = FIGURES.quoted_blocks(readme)[0]  # the quick start's transcript
    assert FIGURES.misquoted(readme) == [] and (FIGURES.RESULTS / record).is_file()
    line = readme[start:end].splitlines()[1]
    quoted = readme[:start] + readme[start:end].replace(line, line + " in 475 s", 1) + readme[end:]
    assert [wrong.split(":")[0] for wrong in FIGURES.misquoted(quoted)] == [record]
    broken = readme.replace("<!-- figure:quickstart-time -->", "<!--\nfigure:quickstart-time -->")
    assert FIGURES.unmarked(broken, TABLE)  # a broken marker leaves its figure unmarked


def test_a_quoted_table_is_checked_row_by_row_and_covers_its_figures():
    judging = (ROOT / "docs" / "judging.md").read_text(encoding="utf-8")
    tables = [block for block in FIGURES.quoted_blocks(judging) if judging[block[1]:block[2]].lstrip().startswith("|")]
    assert tables, "docs/judging.md quotes its table of candidate designs from a record"
    record, start, end = tables[0]
    assert FIGURES.misquoted(judging) == [] and judging[end:].startswith("\n\n")  # the block ends with the table
    row = judging[start:end].splitlines()[2]
    changed = judging[:start] + judging[start:end].replace(row, row.replace("%", "1%", 1)) + judging[end:]
    assert [wrong.split(":")[0] for wrong in FIGURES.misquoted(changed)] == [record]
    assert FIGURES.unmarked(judging.replace(f"<!-- from:{record} -->", ""), TABLE)  # unquoted, its figures count


def test_the_benchmarks_are_filed_by_question_each_record_folder_with_its_readme():
    assert len(BENCHMARK_PAGES) > 10 and FIGURES.record_folders()
    assert FIGURES.benchmark_problems() == [], "\n".join(FIGURES.benchmark_problems())
    index = FIGURES.INDEX.read_text(encoding="utf-8")
    assert index.count("\n") < FIGURES.INDEX_MAX_LINES == 150
    for folder in FIGURES.record_folders():
        readme = (folder / "README.md").read_text(encoding="utf-8")
        assert f"[{folder.parent.name}](../../../{folder.parent.name}.md)" in readme, f"{folder}: names no question"


@pytest.mark.parametrize("page", BENCHMARK_PAGES, ids=[str(page.relative_to(ROOT)) for page in BENCHMARK_PAGES])
def test_every_link_of_a_benchmarks_page_resolves(page):
    assert FIGURES.broken_links(page) == []


@pytest.mark.parametrize("page", FIGURES.pages(), ids=[str(page.relative_to(ROOT)) for page in FIGURES.pages()])
def test_every_link_of_the_readme_and_docs_into_benchmarks_resolves(page):
    assert FIGURES.broken_links(page, only_under=FIGURES.BENCHMARKS) == []


def test_the_benchmark_checks_fail_on_a_broken_link_a_record_without_readme_and_a_long_index(tmp_path):
    index = FIGURES.INDEX
    assert FIGURES.broken_links(index, "[gone](results/no-such-question/)\n") == [
        "results/no-such-question/: no such file"]
    assert FIGURES.broken_links(index, "[x](step-speed.md#no-such-heading)\n")  # an anchor no heading makes
    assert not FIGURES.broken_links(index, "# Benchmarks\n[x](step-speed.md#how-to-run)\n[y](#benchmarks)\n"
                                           "`[z](nowhere.md)`\n```\n[w](nowhere.md)\n```\n")  # code is no link
    readme = ROOT / "README.md"
    assert FIGURES.broken_links(readme, "[r](benchmarks/results/gone/x.txt) [d](docs/gone.md)\n",
                                only_under=FIGURES.BENCHMARKS) == ["benchmarks/results/gone/x.txt: no such file"]

    benchmarks = tmp_path / "benchmarks"
    results, record = benchmarks / "results", benchmarks / "results" / "a-question" / "2026-01-01-cpu2"
    record.mkdir(parents=True)
    (results / "figures.json").write_text("{}")
    (benchmarks / "README.md").write_text("# Benchmarks\n\n| [a question](a-question.md) | its records | 1 |\n")
    (benchmarks / "a-question.md").write_text("# A question\n\n[record](results/a-question/2026-01-01-cpu2/)\n")
    assert FIGURES.benchmark_problems(results, benchmarks / "README.md") == [
        "results/a-question/2026-01-01-cpu2/: no README.md (command, commit, machine, date, headline)"]
    (record / "README.md").write_text("# A record\n")
    assert FIGURES.benchmark_problems(results, benchmarks / "README.md") == []
    (record.parent / "2026-01-02-cpu2").mkdir()
    (record.parent / "2026-01-02-cpu2" / "README.md").write_text("# Another record\n")
    assert FIGURES.benchmark_problems(results, benchmarks / "README.md") == [
        "README.md: the row of a-question.md does not count its 2 record folders"]
    shutil.rmtree(record.parent / "2026-01-02-cpu2")
    (results / "loose.json").write_text("{}")
    (results / "other-question" / "topic-2026-01-02").mkdir(parents=True)
    (results / "other-question" / "topic-2026-01-02" / "README.md").write_text("# r\n")
    (benchmarks / "README.md").write_text("# Benchmarks\n\n[a question](a-question.md) [gone](gone.md)\n" + "-\n" * 150)
    problems = FIGURES.benchmark_problems(results, benchmarks / "README.md")
    for what in ("results/loose.json: a loose file", "results/other-question/: no page other-question.md",
                 "topic-2026-01-02/: not named", "README.md: 153 lines, an index is under 150",
                 "README.md: gone.md: no such file"):
        assert any(what in problem for problem in problems), (what, problems)



def test_a_figure_on_a_benchmarks_page_is_checked_against_its_record():
    page = FIGURES.BENCHMARKS / "negative-similarities.md"
    assert page in BENCHMARK_PAGES
    text = page.read_text(encoding="utf-8")
    span = next(FIGURES.SPAN.finditer(text))
    assert FIGURES.stale_spans(page.name, text, TABLE) == []
    changed = text.replace(span[0], f"<!-- figure:{span[1]} -->{span[2]}1<!-- /figure -->", 1)
    assert [line.split(":")[0] for line in FIGURES.stale_spans(page.name, changed, TABLE)] == [page.name]
    assert FIGURES.fill(changed, TABLE) == text


# ------------------------------------------------------------------------- figures the tool itself computes
TOOL_FIGURES = [name for name, spec in TABLE["figures"].items() if "tool" in spec]


def test_every_figure_the_tool_prints_is_generated_by_the_tools_code_and_agrees_with_what_it_prints():
    """The disk a dry run states, its trials, its clock: each generated by the planner the dry run runs
    (`raycse.api:plan`, never a separate expression), and read back from the dry run's own output."""
    assert {"disk-focal-full", "disk-focal-best-only", "disk-cpu-kept", "plan-focal-full-trials"} <= set(TOOL_FIGURES)
    for name in TOOL_FIGURES:
        assert TABLE["figures"][name].get("code") == "raycse.api:plan", name
    assert FIGURES.tool_disagreements(TABLE) == [], "\n".join(FIGURES.tool_disagreements(TABLE))


def test_the_tool_check_fails_on_a_generator_that_drifted_from_the_tool():
    """The disk figure as an expression of its own (the 4 trials a GPU the planner no longer plans) fails the check
    against the dry run, which plans 8."""
    import copy

    drifted = copy.deepcopy(TABLE)
    drifted["figures"]["disk-focal-full"] = {
        **{key: drifted["figures"]["disk-focal-full"][key] for key in ("tool", "tool_read", "scale", "format")},
        "expr": "(16 + 9 + 36) * finished + 4 * 8 * weights",
        "of": {"finished": "disk-cpu-trial-finished", "weights": "disk-cpu-weights"}}
    wrong = FIGURES.tool_disagreements(drifted, names=["disk-focal-full"])
    assert len(wrong) == 1 and wrong[0].startswith("disk-focal-full: generated "), wrong


def test_the_shipped_space_files_cite_measured_figures_through_the_docs():
    """A space file's comments say why a setting is what it is; a measured figure with a unit would drift from its
    record unchecked, so they point to the page that generates it instead."""
    spaces = sorted((ROOT / "raycse" / "settings" / "spaces").glob("*.yaml"))
    assert len(spaces) >= 8
    for path in spaces:
        comments = "\n".join(line.split("#", 1)[1] for line in path.read_text(encoding="utf-8").splitlines()
                             if "#" in line)
        assert FIGURES.unmarked(comments, TABLE) == [], path.name
