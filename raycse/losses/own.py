"""A loss of your own: a `Term` subclass with its declaration, in a file anywhere or an importable module, named by a
reference where a built-in loss's name would go.

    ./my_loss.py:MyLoss      a file (relative to the space file that names it), imported under its stem (my_loss)
    package.module:MyLoss    a module on the Python path
    my-loss                  an entry point of the `raycse.losses` group that an installed distribution declares

`resolve` is what a search calls before anything starts: it imports the loss, checks it (a Term subclass, a valid
declaration whose name is no built-in's, one finite scalar with a gradient on a batch of random embeddings), and
returns its `LossSource`: the module the trials import it from, the SHA-256 of its file (an MLflow tag) and what Ray
ships to every node with the job (the file, or its top-level package's folder: `py_modules`), so that no node needs it
installed. `load` is what `build_loss` calls, in the driver and in each trial: the class, imported and checked.
Every mistake is a ConfigError of one line that names the reference.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, shown
from ..records import LOSS_ENTRY_POINTS
from .catalogue import LOSS_NAMES, is_built_in
from .declaration import declaration_of

PROBE_ROWS, PROBE_DIM = 8, 16  # the random batch a user's loss is tried on before a search starts


@dataclass(frozen=True)
class LossSource:
    """Where a user's loss comes from, as a search records it and ships it to its trials."""

    reference: str  # as the space file wrote it
    name: str  # its declared name
    module: str  # the module a trial imports: the file's stem, or the module of the reference
    attribute: str  # the class's name in that module
    path: str  # the file that defines the class (absolute)
    sha256: str  # of that file's bytes
    ship: str  # what Ray's runtime environment ships (py_modules): the file, or its top-level package's folder

    @property
    def key(self) -> str:
        """The loss's name in a trial's settings (TrainConfig.loss): what `load` finds on any node."""
        return f"{self.module}:{self.attribute}"


@functools.cache
def entry_points() -> dict[str, str]:
    """The losses installed distributions declare: entry point name -> 'package.module:Class'."""
    from importlib.metadata import entry_points as installed

    return {point.name: point.value for point in installed(group=LOSS_ENTRY_POINTS)}


def is_reference(name: object) -> bool:
    """Whether `name` names a user's loss: module:Class or file.py:Class, or an installed entry point's name."""
    return isinstance(name, str) and (":" in name or (not is_built_in(name) and name in entry_points()))


def split(reference: str) -> tuple[str, str]:
    """(the file or module, the class's name) of a reference; an entry point's name gives its value's."""
    if ":" not in reference:
        reference = entry_points()[reference]
    target, _, attribute = reference.rpartition(":")
    if not target or not attribute.isidentifier():
        raise ConfigError(f"loss {shown(reference)}: name a class, as ./my_loss.py:MyLoss or package.module:MyLoss")
    return target, attribute


def load_term(reference: str, base_dir: Path | None = None) -> type:
    """The Term class that `reference` names, imported and checked (relative files from `base_dir`, else here)."""
    from .term import Term

    target, attribute = split(reference)
    module = import_file(target, base_dir) if is_file(target) else import_named_module(target)
    cls = getattr(module, attribute, None)
    if cls is None:
        raise ConfigError(f"loss {shown(reference)}: {target} has no {attribute!r}")
    if not (isinstance(cls, type) and issubclass(cls, Term)):
        raise ConfigError(f"loss {shown(reference)}: {attribute} is not a subclass of raycse.losses.Term")
    declaration = declaration_of(cls, f"loss {shown(reference)}: {attribute}")
    if is_built_in(declaration.name):
        raise ConfigError(f"loss {shown(reference)}: its name {declaration.name!r} is a built-in loss's (built in: "
                          f"{', '.join(LOSS_NAMES)}): give it a name of its own")
    if ":" not in reference and declaration.name != reference:
        raise ConfigError(f"loss {shown(reference)}: the entry point's name and the loss's declared name "
                          f"({declaration.name!r}) must be the same")
    return cls


def is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def import_file(target: str, base_dir: Path | None) -> object:
    """The module of a loss file, executed once under its stem (again when the file changed since)."""
    path = Path(target).expanduser()
    path = (path if path.is_absolute() else (base_dir or Path.cwd()) / path).resolve()
    if not path.is_file():
        raise ConfigError(f"loss file {shown(target)} does not exist (looked for {path})")
    if not path.stem.isidentifier():
        raise ConfigError(f"loss file {shown(target)}: {path.name} is not a Python module's name (letters, digits "
                          "and _): the trials import it by that name")
    sha256 = file_sha256(path)
    loaded = sys.modules.get(path.stem)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() != path:
            raise ConfigError(f"loss file {shown(target)}: a module named {path.stem!r} is already imported from "
                              f"{getattr(loaded, '__file__', None) or 'elsewhere'}: rename the file")
        if getattr(loaded, "__raycse_sha256__", None) == sha256:
            return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    module.__raycse_sha256__ = sha256
    sys.modules[path.stem] = module  # so that `import my_loss` (and pickling its objects) finds it here
    try:
        spec.loader.exec_module(module)
    except BaseException:  # noqa: BLE001 - one line for whatever the file raises (an interrupt is raised again)
        del sys.modules[path.stem]
        raise_import_error(target)
    return module


def import_named_module(target: str) -> object:
    if not all(part.isidentifier() for part in target.split(".")):
        raise ConfigError(f"loss module {shown(target)} is not a module's name (and no .py file: a file is "
                          "./path/to/file.py:Class)")
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as err:
        if err.name and (target == err.name or target.startswith(f"{err.name}.")):
            raise ConfigError(f"loss module {shown(target)} is not on the Python path (a file is named as "
                              "./path/to/file.py:Class)") from None
        raise_import_error(target)
    except BaseException:  # noqa: BLE001 - one line for whatever the module raises (an interrupt is raised again)
        raise_import_error(target)


def raise_import_error(target: str) -> None:
    """The exception being handled, as one line that names the loss's file or module."""
    err = sys.exc_info()[1]
    if isinstance(err, ConfigError):  # a declaration refused while its class was defined
        raise ConfigError(f"loss {shown(target)}: {err}") from None
    if isinstance(err, SyntaxError):
        raise ConfigError(f"loss {shown(target)}: line {err.lineno}: {err.msg}") from None
    if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: not the loss's mistake to report
        raise err
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    raise ConfigError(f"loss {shown(target)}: importing it raised {type(err).__name__}"
                      + (f": {first}" if first else "")) from None


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve(reference: str, base_dir: Path | None = None) -> LossSource:
    """A user's loss, loaded, checked on a random batch, and described for the record and for shipping."""
    cls = load_term(reference, base_dir)
    probe(cls, reference)
    target, attribute = split(reference)
    module = Path(target).stem if is_file(target) else target
    defining = Path(sys.modules[cls.__module__].__file__).resolve()
    top = sys.modules[module.split(".")[0]]
    if "." not in module and not hasattr(top, "__path__"):
        ship = Path(top.__file__).resolve()  # one file: Ray ships it as a module of its own
    else:  # a package: its top-level folder, where the module's imports of its siblings find them
        ship = Path(next(iter(top.__path__))).resolve()
    return LossSource(reference=reference, name=cls.declaration.name, module=module, attribute=attribute,
                      path=str(defining), sha256=file_sha256(defining), ship=str(ship))


def probe(cls: type, reference: str) -> None:
    """A ConfigError unless the loss, at its defaults, gives one finite float scalar with a gradient on a batch of
    random embeddings (with the extra ones its declaration asks for)."""
    import torch

    from .term import Embeddings

    declaration = cls.declaration
    where = f"loss {shown(reference)} ({declaration.name})"
    generator = torch.Generator().manual_seed(0)

    def draw(grad: bool = True):
        return torch.randn(PROBE_ROWS, PROBE_DIM, generator=generator).requires_grad_(grad)

    try:
        module = cls()
        emb = Embeddings(z1=draw(), z2=draw(), z3=draw() if declaration.supervised else None,
                         z0=draw() if declaration.dropout_off_pass else None,
                         complementary=draw(False) if declaration.complementary else None)
        value = module(emb)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    except Exception as err:  # noqa: BLE001 - whatever the user's forward raises is reported, in one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ConfigError(f"{where} raised {type(err).__name__} on a batch of {PROBE_ROWS} random embeddings"
                          + (f": {first}" if first else "")) from None
    if not isinstance(value, torch.Tensor):
        raise ConfigError(f"{where} returned {type(value).__name__}, not a tensor")
    if value.dim() != 0:
        raise ConfigError(f"{where} returned a tensor of shape {tuple(value.shape)}, not a scalar: reduce it over "
                          "the batch (.mean())")
    if not value.is_floating_point() or not bool(torch.isfinite(value)):
        raise ConfigError(f"{where} returned {value.item()!r} on a batch of random embeddings, not a finite number")
    if not value.requires_grad:
        raise ConfigError(f"{where}: its value has no gradient with respect to the embeddings, so it cannot train "
                          "the encoder")


def check_shipped(source: LossSource) -> None:
    """In a trial: the loss's module, as this node imports it (shipped with the job), is the file the search started
    with; a RuntimeError saying why not otherwise."""
    shipping = (f"raycse ships {source.ship} with the job when it starts Ray; a Ray started before raycse must ship "
                "it itself: ray.init(runtime_env={'py_modules': [...]})")
    if importlib.util.find_spec(source.module.split(".")[0]) is None:
        raise RuntimeError(f"loss {source.name!r}: its module {source.module!r} is not importable on this node: "
                           f"{shipping}")
    try:
        cls = load_term(source.key)
    except ConfigError as err:
        raise RuntimeError(f"{err} (on this node; {shipping})") from None
    defining = Path(sys.modules[cls.__module__].__file__).resolve()
    if file_sha256(defining) != source.sha256:
        raise RuntimeError(f"loss {source.name!r}: {defining} on this node is not the file the search started with "
                           f"({source.path}, SHA-256 {source.sha256[:12]}...)")
