"""Which file a `--space` value names: a path, or the name of a space file shipped inside the package.

The shipped space files are package data (`raycse/settings/spaces/*.yaml`), so `raycse search --space focal` works
after a plain `pip install` from any directory. A clone shows the same files as `search_spaces/*.yaml`: that folder is
a symbolic link to raycse/settings/spaces in git, so each file exists once and the paths in the docs work from the
repository's root.
"""
from __future__ import annotations

from pathlib import Path

from raycse.errors import ConfigError, shown

PACKAGED_DIR = Path(__file__).resolve().parent / "spaces"
SUFFIXES = (".yaml", ".yml")


def packaged_spaces() -> dict[str, Path]:
    """The shipped space files by name ('focal' for spaces/focal.yaml), sorted by name."""
    return {path.stem: path for path in sorted(PACKAGED_DIR.glob("*.yaml"))}


def summary_line(path: Path) -> str:
    """A space file's one-line summary: its `description`, else the first sentence of its opening comment."""
    comment = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip().strip("'\"")
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    text = " ".join(comment)
    return text.split(". ")[0].rstrip(".") if text else ""


def is_packaged_name(value: str) -> bool:
    """A bare name ('focal'): no folder and no YAML suffix, so it cannot mean a file beside the user."""
    return "/" not in value and "\\" not in value and not value.endswith(SUFFIXES) and value not in ("", ".", "..")


def resolve_space(value: str | Path) -> Path:
    """The file a `--space` value names. Anything that exists wins (a path, as always); otherwise a bare name is looked
    up among the packaged space files, and an unknown one is an error listing them. A path that does not exist is
    returned as it is, for the loader to report."""
    path = Path(value)
    if path.exists() or not isinstance(value, str) or not is_packaged_name(value):
        return path
    packaged = packaged_spaces()
    if value in packaged:
        return packaged[value]
    raise ConfigError(f"space file {shown(value)} does not exist, and no packaged space has that name (packaged: "
                      f"{', '.join(packaged)}; or give a path to a .yaml file)")
