"""Fill the measured figures of README.md and docs/ from the recorded results they come from, or check them.

    python scripts/doc_figures.py           rewrite every figure span from its record
    python scripts/doc_figures.py --check   exit 1, naming each figure, when a page disagrees with its record

A page marks a figure it cites with HTML comments, which Markdown does not show:

    It took <!-- figure:quickstart-cpu-time -->5 min 34 s<!-- /figure --> on a 2-core CPU machine.

`benchmarks/results/figures.json` says where each named figure comes from: a file in `benchmarks/results/` (its
`records`, each with the date and machine of its run) read by a regular expression or a JSON path, or a constant of
the code (or what a function of the code returns for the `args` and `kwargs` given, and its `attr`: a dry run's
`raycse.api:plan` with its `disk_bytes`), and how it is written. A figure the tool also prints names the command
(`tool`, a `raycse` command line, and `tool_read`, a pattern): `tool_disagreements` runs it and fails when the
generated figure is not the printed one, so that no generator drifts from what the tool computes. A whole block quoted
from a record (a transcript in a fence, or a Markdown table) is marked once, on the line before it, and each of its
lines must be found in the record (a `...` trims a line, each piece is checked; runs of spaces count as one, so that
a trimmed table may be realigned):

    <!-- from:quick-start-cpu/2026-11-26-cpu2/mainjob-after.txt -->

The benchmarks' own pages (benchmarks/README.md, an index of questions, and a page per question) are read too: their
figure spans and quotes as above, every relative link (`broken_links`), every record folder's README and the index's
length (`benchmark_problems`). Their figures with a unit are the records' own, stated beside the command that made
them, and are not required to be spans.

`unmarked(text)` lists the figures with a unit (s, min, h, %, MB, GB, ...) of a page that are neither: the test
(tests/test_doc_figures.py) fails on them unless `figures.json` lists them as design constants (a rule's 5%, the
95% of an interval), each with why.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIGURES_FILE = RESULTS / "figures.json"
# Pages written whole by a script from the code or a record, each checked by its own test
GENERATED_PAGES = {"docs/reference.md": "scripts/reference.py", "docs/costs.md": "scripts/cost_tables.py"}

CLOSE = "<!-- /figure -->"
SPAN = re.compile(r"<!-- figure:([\w.-]+) -->(.*?)<!-- /figure -->", re.S)
FROM = re.compile(r"^[ \t]*<!-- from:(\S+) -->[ \t]*$", re.M)  # indented: a block inside a list item
# A number (a range of two, or a figure in bold), then a unit that ends there
UNIT_FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?\d[\d,]*(?:\.\d+)?)?(?:\*\*)?\s{0,3}"
    r"(?:%|(?:CPU[ -]|GPU[ -])?(?:ms|s|sec|seconds?|min|minutes?|h|hours?|days?|KB|MB|GB|TB|KiB|MiB|GiB|TiB)"
    r"(?![\w-]))")


BENCHMARKS = ROOT / "benchmarks"
INDEX = BENCHMARKS / "README.md"
INDEX_MAX_LINES = 150
RECORD_FOLDER = re.compile(r"\d{4}-\d\d-\d\d-[a-z0-9]+(?:-[a-z0-9]+)*")  # <date>-<machine>[-what]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def benchmark_pages() -> list[Path]:
    """benchmarks/README.md (the index of questions) and each question's page beside it."""
    return [INDEX, *sorted(page for page in BENCHMARKS.glob("*.md") if page != INDEX)]


def table() -> dict:
    return json.loads(FIGURES_FILE.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------- values
def _json_path(value, path: str | list[str]):
    """`a.b.0.c` (or the list of its parts, for keys with a dot); on a list, `[key=v]` keeps the items whose key is v
    (one item, or a list), `[key^=v]` those whose key starts with v (a list), and a name maps over the items."""
    for part in path if isinstance(path, list) else re.findall(r"\[[^\]]*\]|[^.]+", path):
        if isinstance(value, list) and part.startswith("["):
            key, prefix, wanted = re.fullmatch(r"\[([^=^]+)(\^?)=(.*)\]", part).groups()
            value = [item for item in value if str(item.get(key)).startswith(wanted)
                     and (prefix or str(item.get(key)) == wanted)]
            value = value[0] if len(value) == 1 and not prefix else value
        elif isinstance(value, list) and not part.isdigit():
            value = [item[part] for item in value]
        else:
            value = value[int(part)] if isinstance(value, list) else value[part]
    return value


REDUCE = {"mean": statistics.fmean, "sum": sum, "len": len, "max": max, "min": min,
          "distinct": lambda values: len(set(values))}


def value(name: str, figures: dict | None = None) -> float | str:
    """The figure `name` as its record holds it (a number, or the text a pattern picked)."""
    figures = figures or table()
    spec = figures["figures"][name]
    if "expr" in spec:  # arithmetic on other figures, e.g. "a / b" with "of": {"a": "step-dclr", "b": "step-simcse"}
        names = {key: float(value(other, figures)) for key, other in spec["of"].items()}
        return eval(spec["expr"], {"__builtins__": {}}, names)  # the repository's own table, no names but these
    if "code" in spec:
        module, constant = spec["code"].split(":")
        sys.path.insert(0, str(ROOT))
        found = getattr(importlib.import_module(module), constant)
        if "args" in spec or "kwargs" in spec:
            found = _called(found, spec.get("args", []), spec.get("kwargs", {}))
        return _attribute(found, spec["attr"], spec.get("call", {})) if "attr" in spec else found
    # a record in benchmarks/results/, or a file of the repository's own (a setting of the code or a cluster file)
    text = (RESULTS / spec["record"] if "record" in spec else ROOT / spec["source"]).read_text(encoding="utf-8")
    if "json" in spec:
        found = _json_path(json.loads(text), spec["json"])
    else:
        matches = re.findall(spec["read"], text, re.M)
        if not matches:
            raise KeyError(f"figure {name}: {spec['read']!r} finds nothing in {spec['record']}")
        found = matches[spec.get("nth", 0)]
        found = float(found.replace(",", "")) if re.fullmatch(r"-?[\d,]+(?:\.\d+)?", found) else found
    if spec.get("reduce"):
        found = REDUCE[spec["reduce"]](found)
    if "round" in spec:
        found = round(found, spec["round"])
    return found


_CALLS: dict[str, object] = {}  # a function of the code called once per arguments (a plan is asked for many figures)


def _called(function, args: list, kwargs: dict):
    key = json.dumps([function.__module__, function.__qualname__, args, kwargs], sort_keys=True)
    if key not in _CALLS:
        _CALLS[key] = function(*args, **kwargs)
    return _CALLS[key]


def _attribute(found, path: str, call: dict):
    """`a.b.c` of an object; `[name=v]` on a list keeps its one item whose `name` is v; a method at the end is
    called, with `call` (`cost.wall_seconds` and {"expected": false})."""
    for part in re.findall(r"\[[^\]]*\]|[^.]+", path):
        if part.startswith("["):
            key, wanted = part[1:-1].split("=", 1)
            (found,) = [item for item in found if str(getattr(item, key)) == wanted]
        else:
            found = getattr(found, part)
    return found(**call) if callable(found) else found


def record_of(name: str, figures: dict | None = None) -> dict:
    """The record a figure is read from: its `date`, `machine` and `what` ({} for a figure of the code)."""
    figures = figures or table()
    return figures["records"].get(figures["figures"][name].get("record", ""), {})


def duration(seconds: float) -> str:
    """334 -> '5 min 34 s'; under a minute: '53 s'."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def rendered(name: str, figures: dict | None = None) -> str:
    """The figure as its pages write it: its `format` with value, duration, minutes, scaled, date and machine."""
    figures = figures or table()
    spec = figures["figures"][name]
    found = value(name, figures)
    record = record_of(name, figures)
    fields = {"value": found, "date": record.get("date", ""), "machine": record.get("machine", "")}
    if isinstance(found, (int, float)):
        fields.update(duration=duration(found), minutes=found / 60, scaled=found * spec.get("scale", 1))
    return spec.get("format", "{value}").format(**fields)


def fill(text: str, figures: dict | None = None) -> str:
    """The page with every figure span written from its record."""
    figures = figures or table()
    return SPAN.sub(lambda m: f"<!-- figure:{m[1]} -->{rendered(m[1], figures)}<!-- /figure -->", text)


# --------------------------------------------------------------------------------------------- quotes
def quoted_blocks(text: str) -> list[tuple[str, int, int]]:
    """(record, start, end) of each fenced block or Markdown table marked `<!-- from:RECORD -->` on the line before
    it; a marker that neither follows marks nothing (`misquoted` names it)."""
    blocks = []
    for marker in FROM.finditer(text):
        start = marker.end() + 1
        fence = re.match(r"(```+|~~~+)[^\n]*\n", text[start:])
        table = re.match(r"(?:[ \t]*\|[^\n]*(?:\n|$))+", text[start:])  # the table's rows, up to its first other line
        if table and not fence:
            blocks.append((marker[1], start, start + len(table[0].rstrip("\n"))))
            continue
        close = text.find("\n" + fence[1], start + fence.end() - 1) if fence else -1
        blocks.append((marker[1], start, close + 1 + len(fence[1]) if close >= 0 else start))
    return blocks


def misquoted(text: str) -> list[str]:
    """Each line (each piece between `...`) of a quoted block that its record does not hold, as 'record: piece'."""
    wrong = []
    for record, start, end in quoted_blocks(text):
        path = RESULTS / record
        if start == end or not path.is_file():
            wrong.append(f"{record}: " + ("the marker is not on the line before a fenced block or a table"
                                          if start == end else "no such record in benchmarks/results/"))
            continue
        held = " ".join(path.read_text(encoding="utf-8").split())  # a quote may realign a table's columns
        for line in text[start:end].splitlines():
            if line.startswith(("```", "~~~")):
                continue
            for piece in (" ".join(piece.split()) for piece in line.split("...")):
                if piece and piece not in held:
                    wrong.append(f"{record}: {piece[:100]!r}")
    return wrong


# --------------------------------------------------------------------------------------------- the check
def unmarked(text: str, figures: dict | None = None) -> list[str]:
    """The figures with a unit that are neither a figure span, nor in a quoted block, nor a design constant."""
    figures = figures or table()
    spans = [(m.start(), m.end()) for m in SPAN.finditer(text)]
    spans += [(start, end) for _, start, end in quoted_blocks(text)]
    constants = [re.compile(entry["pattern"].replace(" ", r"\s+")) for entry in figures["constants"]]  # or a line break
    allowed = [(m.start(), m.end()) for pattern in constants for m in pattern.finditer(text)]
    found = []
    for match in UNIT_FIGURE.finditer(text):
        inside = any(start <= match.start() and match.end() <= end for start, end in spans + allowed)
        if not inside:
            line = text[:match.start()].count("\n") + 1
            context = text[max(0, match.start() - 40):match.end() + 10].replace("\n", " ")
            found.append(f"line {line}: {match[0]!r} in ...{context}...")
    return found


def stale_spans(name: str, text: str, figures: dict | None = None) -> list[str]:
    """A page's figure spans that differ from their records, its broken markers and its misquoted lines."""
    figures = figures or table()
    markers = {at for m in SPAN.finditer(text) for at in (m.start(), m.end() - len(CLOSE))}
    wrong = [f"{name}: line {text[:m.start()].count(chr(10)) + 1}: a figure marker that opens or closes no span"
             for m in re.finditer(r"<!--\s*/?\s*figure", text) if m.start() not in markers]
    for match in SPAN.finditer(text):
        if match[1] not in figures["figures"]:
            wrong.append(f"{name}: figure {match[1]!r} is not in benchmarks/results/figures.json")
        elif match[2] != rendered(match[1], figures):
            wrong.append(f"{name}: figure {match[1]} reads {match[2]!r}, its record "
                         f"{rendered(match[1], figures)!r}")
    return wrong + [f"{name}: {line}" for line in misquoted(text)]


def stale(figures: dict | None = None) -> list[str]:
    """Every figure span that differs from its record, and every misquoted line, of README.md, docs/ and the
    benchmarks' pages, as 'page: what'."""
    figures = figures or table()
    return [line for page in pages() + benchmark_pages()
            for line in stale_spans(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8"), figures)]


def tool_text(command: list[str]) -> str:
    """What `raycse COMMAND` prints (run in this process, once per command), for the figures the tool states."""
    key = json.dumps(command)
    if key not in _CALLS:
        import contextlib
        import io

        sys.path.insert(0, str(ROOT))
        from raycse.cli import main as raycse_main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = raycse_main(list(command))
        _CALLS[key] = out.getvalue() if code == 0 else f"exit {code}: {out.getvalue()}"
    return _CALLS[key]


def tool_disagreements(figures: dict | None = None, names: list[str] | None = None) -> list[str]:
    """Each figure with a `tool` (a `raycse` command line) and a `tool_read` (a pattern with one group) whose
    generated value (times `tool_scale`, else `scale`: the tool's unit), at the precision the tool prints it, is not
    the one the tool prints: a generator that drifted from what the tool computes for the same input (the disk a dry
    run states, its trials). 'figure: what'."""
    figures = figures or table()
    wrong = []
    for name, spec in figures["figures"].items():
        if "tool" not in spec or (names is not None and name not in names):
            continue
        printed = re.findall(spec["tool_read"], tool_text(spec["tool"]), re.M)
        if not printed:
            wrong.append(f"{name}: `raycse {' '.join(spec['tool'])}` prints nothing that {spec['tool_read']!r} reads")
            continue
        text = printed[0].replace(",", "")
        decimals = len(text.split(".")[1]) if "." in text else 0
        generated = float(value(name, figures)) * spec.get("tool_scale", spec.get("scale", 1))
        if round(generated, decimals) != float(text):
            wrong.append(f"{name}: generated {round(generated, decimals)}, `raycse {' '.join(spec['tool'])}` "
                         f"prints {text}")
    return wrong


# --------------------------------------------------------------------------------------------- links, records
def _without_fences(text: str) -> str:
    """The page without its fenced blocks, where a link or a heading is only an example."""
    return re.sub(r"^([ \t]*)(```+|~~~+).*?^\1\2[ \t]*$", "", text, flags=re.S | re.M)


def anchors(text: str) -> set[str]:
    """The anchors a Markdown page's headings get, as GitHub makes them (a repeated one gets -1, -2, ...), and its
    `<a id="...">` anchors."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", _without_fences(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug if slug not in seen else f"{slug}-{seen[slug]}"] = 0
        seen[slug] = seen.get(slug, 0) + 1
    return set(seen) | set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))  # and an anchor of its own


def links(text: str) -> list[str]:
    """Every link target of a Markdown page, inline code and fenced blocks left out."""
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", re.sub(r"`[^`\n]*`", "", _without_fences(text)))


def broken_links(page: Path, text: str | None = None, only_under: Path | None = None) -> list[str]:
    """Each relative link of `page` (or of `text`, read as that page) whose file or folder does not exist, or whose
    #anchor names no heading of the Markdown page it points to; with `only_under`, only the links into that folder."""
    text = page.read_text(encoding="utf-8") if text is None else text
    wrong = []
    for target in links(text):
        if re.match(r"[a-z][\w+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page.resolve()
        if only_under is not None and not resolved.is_relative_to(only_under.resolve()):
            continue
        if not resolved.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(
                text if resolved == page.resolve() else resolved.read_text(encoding="utf-8")):
            wrong.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return wrong


def record_folders(results: Path = RESULTS) -> list[Path]:
    """results/<question>/<date>-<machine>/: each holds one run's records and a README.md."""
    return sorted(folder for question in results.iterdir() if question.is_dir()
                  for folder in question.iterdir() if folder.is_dir())


def benchmark_problems(results: Path = RESULTS, index: Path = INDEX) -> list[str]:
    """What is amiss in benchmarks/ beyond the figures: a file of results/ outside a question's record folder (but
    figures.json), a record folder misnamed or without its README.md, a question without its page, or with its page
    missing from the index, a page's link that does not resolve, and an index of more than INDEX_MAX_LINES lines."""
    wrong = []
    index_text = index.read_text(encoding="utf-8")
    for item in sorted(results.iterdir()):
        if item.is_file() and item.name != "figures.json":
            wrong.append(f"{item.relative_to(results.parent)}: a loose file; records go in "
                         "results/<question>/<date>-<machine>/")
        elif item.is_dir():
            if not (index.parent / f"{item.name}.md").is_file():
                wrong.append(f"results/{item.name}/: no page {item.name}.md for this question")
            elif f"({item.name}.md)" not in index_text:
                wrong.append(f"{index.name}: does not link the question {item.name}.md")
            else:  # the index's count of the question's record folders is the folder's own
                folders = sum(1 for folder in item.iterdir() if folder.is_dir())
                row = next((line for line in index_text.splitlines() if f"({item.name}.md)" in line), "")
                if not row.rstrip().endswith(f"| {folders} |"):
                    wrong.append(f"{index.name}: the row of {item.name}.md does not count its {folders} record folders")
            wrong += [f"{loose.relative_to(results.parent)}: a loose file; records go in a <date>-<machine>/ folder"
                      for loose in sorted(item.iterdir()) if loose.is_file()]
    for folder in record_folders(results):
        name = folder.relative_to(results.parent)
        if not RECORD_FOLDER.fullmatch(folder.name):
            wrong.append(f"{name}/: not named <date>-<machine>[-what]")
        if not (folder / "README.md").is_file():
            wrong.append(f"{name}/: no README.md (command, commit, machine, date, headline)")
    lines = index_text.count("\n")
    if lines >= INDEX_MAX_LINES:
        wrong.append(f"{index.name}: {lines} lines, an index is under {INDEX_MAX_LINES}")
    for page in [index, *sorted(p for p in index.parent.glob("*.md") if p != index)]:
        wrong += [f"{page.relative_to(index.parent.parent)}: {link}" for link in broken_links(page)]
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the pages with their records, write nothing")
    args = parser.parse_args()
    figures = table()
    if args.check:
        wrong = stale(figures) + benchmark_problems() + tool_disagreements(figures)
        for line in wrong:
            print(line, file=sys.stderr)
        return 1 if wrong else 0
    for page in pages() + benchmark_pages():
        text = page.read_text(encoding="utf-8")
        if fill(text, figures) != text:
            page.write_text(fill(text, figures), encoding="utf-8")
            print(f"{page.relative_to(ROOT)}: figures written")
    wrong = [line for page in pages() + benchmark_pages() for line in misquoted(page.read_text(encoding="utf-8"))]
    wrong += benchmark_problems()
    for line in wrong:
        print(f"misquoted: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
