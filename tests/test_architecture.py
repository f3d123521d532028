"""The package's shape, as docs/architecture.md states it: layers that import only downwards, no import circle,
no module over 400 lines nor function over 60, the statistics free of Ray, Tune,
MLflow and torch, one table of samplers, and the run vocabulary (MLflow tag names) stated in raycse/records.py alone.

Imports are read from the source (every `import` statement, those inside functions included), so a lazy import
that would close a circle at run time is caught as well.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "raycse"

# Lowest first. A module may import modules of its own layer or of a lower one, never of a higher one. A name is a
# top-level module or a package (a package's modules share its layer).
LAYERS = [
    ("leaves", ["errors", "records", "files", "stats", "seeds"]),
    ("the statistics of the answer, the samplers", ["judging", "sampling"]),
    ("losses, data, encoder", ["losses", "data", "encoder"]),
    ("evaluation", ["evaluation"]),
    ("settings", ["settings"]),
    ("tracking", ["tracking"]),
    ("training", ["training"]),
    ("search, compare, report, bench, export", ["driver", "comparing", "reporting", "bench", "exporting"]),
    ("the plan of a search before it runs", ["planning"]),
    ("commands", ["api", "cli", "__main__", "__init__", "commands", "arguments"]),
]
# The modules that stand at the top of raycse/ on purpose: the commands, export, and the small leaves everything may
# use. Anything else belongs in the package of its concept.
TOP_LEVEL_MODULES = {"__init__", "__main__", "api", "cli", "comparing", "exporting", "records", "errors", "files",
                     "stats", "seeds"}
MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 400
MAX_FUNCTION_LINES = 60
# The functions allowed past MAX_FUNCTION_LINES, each with why: a table is read row by row, not followed as logic.
LONG_FUNCTIONS = {"raycse.settings.reference.section_keys": "the table of every space-file key, one row each"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for index, (_, names) in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def imports_of(module: str) -> set[str]:
    """The raycse modules `module` imports (a `from package import name` counts the submodule when there is one)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_the_top_level_holds_only_the_modules_listed_on_purpose():
    top_level = {path.stem for path in PACKAGE.glob("*.py")}
    assert top_level == TOP_LEVEL_MODULES, (
        f"new at the top of raycse/: {sorted(top_level - TOP_LEVEL_MODULES)} (move it into the package of its concept, "
        f"or list it in TOP_LEVEL_MODULES and docs/architecture.md); gone: {sorted(TOP_LEVEL_MODULES - top_level)}")
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES


PACKAGES = sorted(path.parent for path in PACKAGE.glob("*/__init__.py"))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: path.name)
def test_every_package_says_what_it_holds_and_what_it_may_import(package):
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    assert "May import" in docstring, f"raycse/{package.name}/__init__.py: its docstring names no 'May import' rule"
    may_import = docstring[docstring.index("May import"):]
    # every package this one imports (another layer's) is one its docstring allows
    imported = {target.split(".")[1] for module, targets in GRAPH.items()
                if module.startswith(f"raycse.{package.name}.") or module == f"raycse.{package.name}"
                for target in targets if len(target.split(".")) > 1 and target.split(".")[1] != package.name}
    leaves = set(LAYERS[0][1])
    unstated = sorted(name for name in imported - leaves if name not in may_import)
    assert not unstated, f"raycse/{package.name} imports {unstated}, which its docstring's 'May import' does not name"


def test_no_module_imports_a_higher_layer():
    upward = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
              for module, targets in GRAPH.items() for target in targets if layer_of(target) > layer_of(module)]
    assert not upward, "\n".join(upward)


def test_there_is_no_import_circle():
    # Tarjan's strongly connected components: a component of two or more modules is a circle
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    # a package's __init__ that re-exports its submodules is imported by Python before them: not a circle
    circles = [c for c in circles if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert not circles, circles


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_400_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines"


def long_functions() -> dict[str, int]:
    """`module.function` (methods as `module.Class.method`) -> lines, for every function over MAX_FUNCTION_LINES."""
    found = {}
    for module, path in MODULES.items():
        def visit(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}.{child.name}"
                    if not isinstance(child, ast.ClassDef) and child.end_lineno - child.lineno + 1 > MAX_FUNCTION_LINES:
                        found[name] = child.end_lineno - child.lineno + 1
                    visit(child, name)
        visit(ast.parse(path.read_text()), module)
    return found


def test_no_function_is_over_60_lines_but_the_named_tables():
    found = long_functions()
    over = {name: lines for name, lines in found.items() if name not in LONG_FUNCTIONS}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"
    assert set(LONG_FUNCTIONS) <= set(found), f"no longer long: drop {set(LONG_FUNCTIONS) - set(found)} from the list"


def third_party_imports(module: str) -> set[str]:
    """The top-level names of the packages outside raycse that `module` imports, lazy imports included."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"raycse"}


def reachable(start: set[str]) -> set[str]:
    """Every raycse module that importing `start` may import, transitively."""
    seen, stack = set(), list(start)
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(GRAPH[module])
    return seen


def test_the_statistics_of_the_answer_import_no_ray_tune_mlflow_or_torch():
    judging = {module for module in MODULES if module.startswith("raycse.judging")}
    assert {"raycse.judging.decision", "raycse.judging.comparison"} <= judging
    heavy = {"ray", "mlflow", "torch", "transformers", "optuna", "sentence_transformers"}
    offenders = {module: sorted(third_party_imports(module) & heavy) for module in reachable(judging)}
    assert not {module: names for module, names in offenders.items() if names}, offenders
    assert reachable(judging) - judging <= {f"raycse.{leaf}" for leaf in LAYERS[0][1]}


def test_there_is_one_table_of_samplers():
    """The sampler names are written in raycse/sampling/samplers.py alone: no if-chain on a sampler's name and no
    list of them elsewhere; the settings and the search stage read the table."""
    from raycse.sampling.samplers import FILE_SAMPLER_NAMES, SAMPLERS
    from raycse.settings.space_keys import keys_of

    names = set(SAMPLERS)
    sampler_name = next(key for key in keys_of("search.sampler") if key.name == "name")
    assert {"tpe", "prior", "random"} <= names and sampler_name.choices is FILE_SAMPLER_NAMES
    offenders = []
    for module, path in MODULES.items():
        if module == "raycse.sampling.samplers":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            constants = []
            if isinstance(node, ast.Compare):
                constants = [c.value for c in node.comparators if isinstance(c, ast.Constant)]
            elif isinstance(node, ast.Tuple | ast.List | ast.Set):
                listed = [c.value for c in node.elts if isinstance(c, ast.Constant) and c.value in names]
                constants = listed if len(listed) > 1 else []
            offenders += [f"{module}: {value!r}" for value in constants if value in names]
    assert not offenders, offenders


def test_mlflow_tag_names_are_stated_in_records_alone():
    offenders = []
    for module, path in MODULES.items():
        if module == "raycse.records":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("raycse.") \
                    and " " not in node.value:
                offenders.append(f"{module}: {node.value!r}")
    assert not offenders, offenders


def test_the_checks_above_can_fail():
    """The import reader sees lazy imports and relative ones; the layer rule would catch an upward import."""
    assert "raycse.driver.tune.trial" in GRAPH["raycse.driver.tune.runner"]
    assert "raycse.losses.infonce" in GRAPH["raycse.losses.dclr"]  # `from .infonce import ...`
    assert "raycse.encoder.model" in GRAPH["raycse.driver.tune.scoring"]  # imported inside a function
    assert layer_of("raycse.training.trainer") > layer_of("raycse.encoder.model")
    assert layer_of("raycse.tracking.stores") > layer_of("raycse.settings.checks")


SCRIPTS = sorted((PACKAGE.parent / "benchmarks").rglob("*.py")) + sorted(PACKAGE.rglob("*.py"))


def imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every absolute `from raycse... import name` in `path`, lazy ones included."""
    return [(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("raycse")
            for alias in node.names]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_every_name_imported_from_raycse_exists(path):
    """A lazy import inside a benchmark runs only when that benchmark does: a moved name must fail here first."""
    import importlib

    missing = []
    for module, name in imported_names(path):
        owner = importlib.import_module(module)
        if not hasattr(owner, name) and f"{module}.{name}" not in MODULES:
            missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports names that do not exist: {missing}"


def loss_names_in(source: str) -> set[str]:
    """The built-in losses' (and presets') names that `source` spells as a string of its own."""
    from raycse.losses.catalogue import MODULE_OF, PRESETS

    names = set(MODULE_OF) | set(PRESETS)
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names}


def test_a_loss_is_named_in_its_own_file_alone():
    """A built-in loss's name is written in the file that declares it and nowhere else in the package: code that needs
    something of a loss reads its declaration (a property: supervised, complementary, default), never its name, and
    adding a loss is one new file. A `base+reg` combination's name is made, not written."""
    from raycse.losses.catalogue import MODULE_OF

    offenders = []
    for module, path in MODULES.items():
        for name in loss_names_in(path.read_text()):
            if module != f"raycse.losses.{MODULE_OF.get(name)}":
                offenders.append(f"{module}: {name!r}")
    assert not offenders, f"loss names outside their own files (read the declaration instead): {offenders}"
    assert loss_names_in('x = f(loss="focal")\n') == {"focal"}, "the check would catch a name"
    assert loss_names_in('"""focal, as a word of a docstring"""\n') == set()


# ------------------------------------------------------------------------------------ inside the driver
# The driver's own layers, lowest first, as docs/architecture.md draws them: a module of the driver imports its own
# layer or a lower one. A name is a module of raycse/driver/ or one of its packages.
DRIVER_LAYERS = [
    ("what a search decides and records", ["outcome", "concurrency", "time_left", "progress", "confirmation",
                                           "summary", "layout"]),
    ("the stages' shared state, the checks before a search starts", ["state", "preflight"]),
    ("the Ray and Tune glue", ["tune"]),
    ("the stages", ["stages"]),
    ("the conductor, a finished search read back", ["run", "loaded", "standing"]),
]


def driver_layer_of(module: str) -> int:
    name = module.split(".")[2]
    for index, (_, names) in enumerate(DRIVER_LAYERS):
        if name in names:
            return index
    raise AssertionError(f"{module} is in no layer of the driver: add it to DRIVER_LAYERS and docs/architecture.md")


def test_no_module_of_the_driver_imports_a_higher_layer_of_the_driver():
    driver = [module for module in MODULES if module.startswith("raycse.driver.")]
    upward = [f"{module} ({DRIVER_LAYERS[driver_layer_of(module)][0]}) imports {target} "
              f"({DRIVER_LAYERS[driver_layer_of(target)][0]})"
              for module in driver for target in GRAPH[module]
              if target.startswith("raycse.driver.") and driver_layer_of(target) > driver_layer_of(module)]
    assert not upward, "\n".join(upward)
    # the rule would see the arrows it was written against: the shared state asking Tune's glue for its workers
    assert driver_layer_of("raycse.driver.tune.warm_workers") > driver_layer_of("raycse.driver.state")


# ----------------------------------------------------------------------------------------- vocabulary
# Names defined at the top of two modules of raycse, each kept on purpose, with why. Any other name means one thing.
SHARED_NAMES = {
    "train": "raycse.train is the public face of raycse.training.trainer.train: the same training, one name",
}


def top_level_names(path: Path) -> set[str]:
    """The public names a module defines at its top level (functions, classes, assignments), not those it imports."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def names_bound_twice(modules: dict[str, Path]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for module, path in modules.items():
        for name in top_level_names(path):
            where.setdefault(name, []).append(module)
    return {name: sorted(found) for name, found in where.items() if len(found) > 1}


def test_no_name_is_bound_to_two_different_things():
    """One word, one meaning: two modules that each define `Baseline` (or `BUDGETS`, `eval_metrics`, ...) make a
    reader ask which one a line means. A name defined once and imported elsewhere is one thing."""
    twice = {name: found for name, found in names_bound_twice(MODULES).items() if name not in SHARED_NAMES}
    assert not twice, twice
    assert set(SHARED_NAMES) <= set(names_bound_twice(MODULES)), "an allowed name no longer needs its exception"


def test_the_name_check_can_fail(tmp_path):
    for name, body in (("a", "class Baseline:\n    pass\n"), ("b", "Baseline = dict\nimport os\n")):
        (tmp_path / f"{name}.py").write_text(body)
    assert names_bound_twice({"a": tmp_path / "a.py", "b": tmp_path / "b.py"}) == {"Baseline": ["a", "b"]}


def unlisted_modules(package: Path) -> list[str]:
    """The modules and subpackages of `package` that its docstring does not name (as `name.py`, `name/` or `name`)."""
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    children = [child for child in sorted(package.iterdir()) if not child.name.startswith("__")
                and (child.suffix == ".py" or (child / "__init__.py").is_file())]
    return [child.name for child in children
            if not re.search(rf"(?<![\w./]){re.escape(child.stem)}(?![\w])", docstring)]


@pytest.mark.parametrize("package", [PACKAGE, *sorted(p.parent for p in PACKAGE.rglob("*/__init__.py"))],
                         ids=lambda path: str(path.relative_to(PACKAGE.parent)))
def test_every_package_docstring_lists_its_modules(package):
    assert not unlisted_modules(package), f"{package}/__init__.py does not name {unlisted_modules(package)}"


def test_the_docstring_check_can_fail(tmp_path):
    (tmp_path / "__init__.py").write_text('"""A package.\n\n    kept.py  what it keeps\n"""\n')
    (tmp_path / "kept.py").write_text("")
    (tmp_path / "forgotten.py").write_text("")
    assert unlisted_modules(tmp_path) == ["forgotten.py"]


# ------------------------------------------------------------------------------ docs/architecture.md is true
def test_every_stage_module_is_named_after_its_stage_and_conducted():
    from raycse.driver.run import STAGE_ORDER

    conducted = {type(stage).__module__: stage.name for stage in STAGE_ORDER}
    stage_modules = {m for m in MODULES if m.startswith("raycse.driver.stages.") and m != "raycse.driver.stages.base"}
    assert set(conducted) == stage_modules, "a stage module the conductor does not run, or one it runs from elsewhere"
    misnamed = {module: name for module, name in conducted.items() if module.rsplit(".", 1)[1] != name}
    assert not misnamed, misnamed


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def where_a_new_thing_goes() -> list[list[str]]:
    """The rows of architecture.md's table of changes: [kind, the one place, what follows, the test]."""
    text = ARCHITECTURE.read_text().split("## Where a new thing goes", 1)[1]
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]


def test_the_architecture_page_names_one_place_for_each_kind_of_change_and_each_exists():
    rows = where_a_new_thing_goes()
    assert [row[0] for row in rows] == ["loss", "sampler", "search stage", "setting", "search key", "objective",
                                        "statistic of the answer", "plot"]
    for kind, place, _, test in rows:
        paths = re.findall(r"`((?:raycse|tests|benchmarks)/[\w/.]+)`", place + " " + test)
        assert paths, f"{kind}: no path named"
        missing = [path for path in paths if not (PACKAGE.parent / path).exists()]
        assert not missing, f"{kind}: {missing} do not exist"
        # a name the row says to add to (SAMPLERS, STAGE_ORDER, SPACE_KEYS, OBJECTIVES) is defined in the file named
        for name, path in re.findall(r"`([A-Z_]{4,})` in `(raycse/[\w/.]+\.py)`", place):
            assert name in top_level_names(PACKAGE.parent / path), f"{kind}: {path} defines no {name}"
