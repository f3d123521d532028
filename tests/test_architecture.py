"""The package's shape, as docs/architecture.md states it: layers that import only downwards, no import circle,
no module over 500 lines, and the run vocabulary (MLflow tag names) stated in raycse/records.py alone.

Imports are read from the source (every `import` statement, those inside functions included), so a lazy import
that would close a circle at run time is caught as well.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "raycse"

# Lowest first. A module may import modules of its own layer or of a lower one, never of a higher one. A name is a
# top-level module or a package (a package's modules share its layer).
LAYERS = [
    ("leaves", ["errors", "records", "files", "stats", "seeds"]),
    ("losses, data, encoder", ["losses", "data", "encoder"]),
    ("evaluation", ["evaluation"]),
    ("settings", ["settings"]),
    ("tracking", ["tracking"]),
    ("training", ["training"]),
    ("search, report, bench, export", ["driver", "reporting", "bench", "exporting"]),
    ("commands", ["api", "cli", "__main__", "__init__"]),
]
# The modules that stand at the top of raycse/ on purpose: the commands, export, and the small leaves everything may
# use. Anything else belongs in the package of its concept.
TOP_LEVEL_MODULES = {"__init__", "__main__", "api", "cli", "exporting", "records", "errors", "files", "stats", "seeds"}
MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 500


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
def test_no_module_is_over_500_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines"


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
    assert "raycse.driver.trial" in GRAPH["raycse.driver.tune_runner"]
    assert "raycse.losses.infonce" in GRAPH["raycse.losses.dclr"]  # `from .infonce import ...`
    assert "raycse.encoder.model" in GRAPH["raycse.driver.scoring"]  # imported inside a function
    assert layer_of("raycse.training.trainer") > layer_of("raycse.encoder.model")
    assert layer_of("raycse.tracking.stores") > layer_of("raycse.settings.checks")


SCRIPTS = sorted((PACKAGE.parent / "benchmarks").glob("*.py")) + sorted(PACKAGE.rglob("*.py"))


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
