"""The shipped search-space files, for `raycse spaces`: those packaged inside raycse (what a wheel carries), else the
clone's search_spaces/ folder beside the package."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
# where the shipped files are, first found wins: package data, then a clone's folder
SPACE_FOLDERS = (_PACKAGE / "settings" / "spaces", _PACKAGE.parent / "search_spaces")


def shipped_space_files() -> dict[str, Path]:
    """The shipped space files by name ('focal' for focal.yaml), sorted by name; {} when none is found."""
    for folder in SPACE_FOLDERS:
        files = sorted(folder.glob("*.yaml"))
        if files:
            return {path.stem: path for path in files}
    return {}


def summary_line(path: Path) -> str:
    """A space file's one line: its `description`, else the first sentence of its opening comment."""
    comment = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("description:"):
            return line.partition(":")[2].strip().strip("'\"")
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    text = " ".join(comment)
    return text.split(". ")[0].rstrip(".") if text else ""
