"""Every built-in loss, found by reading the loss files of this package, without torch: their declarations (name,
paper, hyperparameters, needs), the presets, and the names each file exports.

A loss file is a file of raycse/losses/ that holds a `Term` subclass with ``declaration = Declaration(...)`` (or a
``Preset(...)`` at its top). The command line must answer `--help` without importing torch, and the loss files import
it; so the catalogue does not run them: it parses each file and evaluates only its declarations, which are written as
expressions of literals, of the classes in raycse/losses/declaration.py, of `math`, and of constants of loss files
(``from .simcse import SIMCSE_TAU``). A test holds what it reads equal to what the imported classes declare.

Adding a built-in loss is one new file: the catalogue finds it here, the registry imports it when it is built, and the
flags, the space files' validation, `raycse losses` and the reference follow from its declaration. A user's own loss
(``./my_loss.py:MyLoss``) is not in the catalogue: raycse/losses/own.py loads it where a space file names it, and
raycse/losses/names.py says what any name means.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .declaration import REGULARISER_WEIGHT, Declaration, Hyperparameter, Preset

PACKAGE_DIR = Path(__file__).resolve().parent
# What a declaration may use besides literals and constants of loss files.
READABLE = {"Declaration": Declaration, "Hyperparameter": Hyperparameter, "Preset": Preset, "math": math}


@dataclass
class LossFile:
    """What the catalogue reads of one file of the package."""

    module: str  # the file's name without .py
    names: dict[str, Any] = field(default_factory=dict)  # its readable top-level names (a loss class: its stand-in)
    declarations: list[Declaration] = field(default_factory=list)
    presets: list[Preset] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)  # its __all__


class Declared:
    """What a loss class stands for while its file is read without being run: its declaration."""

    def __init__(self, declaration: Declaration) -> None:
        self.declaration = declaration


class Unreadable(Exception):
    """An expression that uses a name the catalogue cannot know without running the file."""


def evaluate_expression(node: ast.expr, names: dict[str, Any], where: str) -> Any:
    unknown = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - set(names))
    if unknown:
        raise Unreadable(", ".join(unknown))
    return eval(compile(ast.Expression(node), where, "eval"), {"__builtins__": {}}, dict(names))


def read_file(module: str, files: dict[str, LossFile | None]) -> LossFile:
    """Read raycse/losses/<module>.py (and, first, the files it imports names from)."""
    if module in files:
        if files[module] is None:
            raise RuntimeError(f"raycse/losses/{module}.py imports itself round a circle")
        return files[module]
    files[module] = None
    path = PACKAGE_DIR / f"{module}.py"
    read = LossFile(module, names=dict(READABLE))
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and (PACKAGE_DIR / f"{node.module}.py").is_file():
            source = read_file(node.module, files)
            read.names.update({alias.asname or alias.name: source.names[alias.name]
                               for alias in node.names if alias.name in source.names})
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            _read_constant(node, read, str(path))
        elif isinstance(node, ast.ClassDef):
            _read_class(node, read, str(path))
    files[module] = read
    return read


def _read_constant(node: ast.Assign | ast.AnnAssign, read: LossFile, where: str) -> None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        return
    try:
        value = evaluate_expression(node.value, read.names, where)
    except Exception:  # noqa: BLE001 - a constant no declaration needs (re.compile(...), ...): left unread
        return
    read.names[targets[0].id] = value
    if isinstance(value, Preset):
        read.presets.append(value)
    if targets[0].id == "__all__":
        read.exports = list(value)


def _read_class(node: ast.ClassDef, read: LossFile, where: str) -> None:
    for statement in node.body:
        if isinstance(statement, ast.Assign) and [getattr(t, "id", None) for t in statement.targets] == ["declaration"]:
            try:
                declaration = evaluate_expression(statement.value, read.names, where)
            except Unreadable as err:
                raise RuntimeError(f"{where}: the declaration of {node.name} uses {err}, which the catalogue cannot "
                                   "read without running the file (use literals, Declaration, Hyperparameter, math and "
                                   "constants of loss files)") from None
            read.declarations.append(declaration)
            read.names[node.name] = Declared(declaration)


def read_package() -> dict[str, LossFile]:
    files: dict[str, LossFile | None] = {}
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        if path.stem != "__init__":
            read_file(path.stem, files)
    return files  # every entry is read by now


def declared(files: dict[str, LossFile]) -> tuple[dict[str, Declaration], dict[str, str]]:
    """Every declaration by name, and the file that declares each loss or preset; a name declared twice is refused."""
    declarations, module_of = {}, {}
    for read in files.values():
        for item in [*read.declarations, *read.presets]:
            if item.name in module_of:
                raise RuntimeError(f"loss {item.name!r} is declared twice: in {module_of[item.name]}.py and "
                                   f"{read.module}.py")
            module_of[item.name] = read.module
        declarations.update({declaration.name: declaration for declaration in read.declarations})
    return declarations, module_of


FILES = read_package()
DECLARATIONS, MODULE_OF = declared(FILES)  # MODULE_OF: a built-in loss's (or preset's) name -> its file
_DEFAULTS = [name for name, declaration in DECLARATIONS.items() if declaration.default]
if len(_DEFAULTS) != 1:
    raise RuntimeError(f"exactly one built-in loss declares default=True, not {_DEFAULTS}")
DEFAULT_LOSS: str = _DEFAULTS[0]  # what a run trains when it names no loss, and stage 0's complementary model
# The default loss first, then by name: the order of --help, `raycse losses` and the reference.
_ORDER = sorted(DECLARATIONS, key=lambda name: (name != DEFAULT_LOSS, name))
BASES: dict[str, Declaration] = {n: DECLARATIONS[n] for n in _ORDER if not DECLARATIONS[n].regulariser}
REGULARISER_INFO: dict[str, Declaration] = {n: DECLARATIONS[n] for n in _ORDER if DECLARATIONS[n].regulariser}
PRESET_INFO: dict[str, Preset] = {p.name: p for f in FILES.values() for p in sorted(f.presets, key=lambda p: p.name)}
BASE_LOSSES: tuple[str, ...] = tuple(BASES)
REGULARISERS: tuple[str, ...] = tuple(REGULARISER_INFO)
# The presets the papers train, then the default loss with each regulariser ('simcse+dcl'): any base loss takes any
# regulariser as `base+reg`, and these are the combinations listed.
PRESETS: dict[str, tuple[str, str]] = {
    **{name: (preset.base, preset.regulariser) for name, preset in PRESET_INFO.items()},
    **{f"{DEFAULT_LOSS}+{reg}": (DEFAULT_LOSS, reg) for reg in REGULARISERS}}
LOSS_NAMES: tuple[str, ...] = BASE_LOSSES + tuple(PRESETS)
EXPORTS: dict[str, str] = {name: f.module for f in FILES.values() for name in f.exports}  # a name -> its file
LossInfo = Declaration  # the name the first versions of raycse gave a loss's description


def is_built_in(name: str) -> bool:
    """Whether `name` is a built-in loss, regulariser, preset or `base+reg` combination of them."""
    base, plus, reg = name.partition("+")
    return name in DECLARATIONS or name in PRESETS or bool(plus and base in BASES and reg in REGULARISER_INFO)


def hyperparameter_catalogue() -> dict[str, dict[str, Hyperparameter]]:
    """Every hyperparameter name any built-in loss or regulariser takes -> {loss or regulariser name: its spec there}.

    What the command line generates its loss flags from: a new loss's hyperparameters get flags by themselves.
    """
    catalogue: dict[str, dict[str, Hyperparameter]] = {}
    for owner, specs in [*((name, info.hyperparameters) for name, info in BASES.items()),
                         *((name, {REGULARISER_WEIGHT: info.weight, **info.hyperparameters})
                           for name, info in REGULARISER_INFO.items())]:
        for key, spec in specs.items():
            catalogue.setdefault(key, {})[owner] = spec
    return catalogue


__all__ = ["BASES", "BASE_LOSSES", "DEFAULT_LOSS", "LOSS_NAMES", "LossInfo", "PRESETS", "PRESET_INFO", "REGULARISERS",
           "REGULARISER_INFO", "hyperparameter_catalogue"]
