"""A search's folder read from another place than the one it was written in: copied, moved, or mounted elsewhere.

A search writes its stores in one folder (its working directory, or `--state`): mlflow.db, optuna.db, ray_results/
and MLflow's artifacts (mlruns/ beside a default store, mlflow-artifacts/ in a --state folder). Some of what they
record are absolute paths of that folder as it was: MLflow keeps each experiment's and run's artifact location, and
the search summary names the Optuna storage and every trial's checkpoint. Read as they are from a copy, they point
back at the original, and a command writing there (`raycse report` logs its page on the parent run) would change
the original, or fail once it is gone.

So a reader finds where the folder was from MLflow's own record: the experiment's artifact location, a path whose
last one or two parts (`mlflow-artifacts`; `mlruns/<experiment id>`) are a folder beside the store now, but which is
not under the store's folder, was written somewhere else. `Relocation` then maps every path under the old folder to
the same path under the present one; nothing outside the folder (a `--storage-path` elsewhere, a tracking server's
artifacts) is touched. Nothing is rewritten in the stores: the paths are mapped as they are read, each time.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from raycse.tracking.sqlite_wal import database_path

FILE_SCHEME, SQLITE_SCHEME = "file://", "sqlite:///"


@dataclass(frozen=True)
class Relocation:
    """Paths under `recorded` (the folder as the search wrote it) read under `current` (where it is now); equal
    when the folder was not moved."""

    recorded: str = ""
    current: str = ""

    @property
    def moved(self) -> bool:
        return self.recorded != self.current

    def path(self, text: str) -> str:
        """A path, a file:// URI or a sqlite:/// URL, mapped when it lies under the recorded folder."""
        if not self.moved:
            return text
        for prefix in (SQLITE_SCHEME, FILE_SCHEME, ""):
            if text.startswith(prefix) and _under(text[len(prefix):], self.recorded):
                return prefix + self.current + text[len(prefix) + len(self.recorded):]
        return text

    def values(self, value: Any) -> Any:
        """A JSON-like value (the search summary) with every string that is a path under the folder mapped."""
        if not self.moved:
            return value
        if isinstance(value, str):
            return self.path(value)
        if isinstance(value, dict):
            return {key: self.values(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.values(item) for item in value]
        return value


NOT_MOVED = Relocation()


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def local_path(location: str | None) -> str | None:
    """The local path of an artifact location (a plain path or a file:// URI), None for any other kind."""
    if not location:
        return None
    if location.startswith(FILE_SCHEME):
        return urllib.parse.unquote(urllib.parse.urlsplit(location).path)
    return location if location.startswith("/") else None


def relocation_of(tracking_uri: str, artifact_location: str | None) -> Relocation:
    """Where an experiment's folder was written and where it is now, from its SQLite store's path (`tracking_uri`)
    and the artifact location MLflow recorded for it; NOT_MOVED for a store that is no local SQLite file, artifacts
    that are not local, or a folder where it was written."""
    database, location = database_path(tracking_uri), local_path(artifact_location)
    if database is None or location is None:
        return NOT_MOVED
    here = str(database.expanduser().resolve().parent)
    if _under(location, here) or _under(str(Path(location).resolve()), here):  # where it was (through a symlink)
        return NOT_MOVED
    parts = PurePosixPath(location).parts
    for tail in (2, 1):  # mlruns/<experiment id> beside a default store; mlflow-artifacts in a --state folder
        if len(parts) > tail and Path(here, *parts[-tail:]).is_dir():
            return Relocation(recorded=str(PurePosixPath(*parts[:-tail])), current=here)
    return NOT_MOVED
