"""Files named by an http(s) URL (a corpus, an NLI file), downloaded once per search.

A search reads its training data twice in the driver: its check of every corner of the space before anything
starts (raycse.driver.preflight), then the tokenize stage; a resumed search does both again. A corpus named by its
URL (a paper budget's million Wikipedia sentences) was downloaded each time. Within `once_per_search`, the first
read of a URL downloads it and every later read of the same URL is served the same bytes: held in memory until the
search's folder exists (`keep_in`, by the set-up), then from a file there, where a resumed search finds it too.
Outside it (`raycse train`, a trial that tokenises its own data) a read downloads, as before.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from raycse.errors import ConfigError

DOWNLOADS_DIR = "downloads"  # under a search's own folder


class Downloads:
    """The URLs one search has read: their bytes in memory, or in files of `folder` once it is set."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self.held: dict[str, bytes] = {}

    def path(self, url: str) -> Path | None:
        """Where `url`'s bytes are kept in `folder` (None without one): its hash, then its last part, for a reader."""
        if self.folder is None:
            return None
        tail = "".join(c if c.isalnum() or c in "._-" else "_" for c in url.rstrip("/").rsplit("/", 1)[-1])[-80:]
        return self.folder / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{tail}"

    def read(self, url: str) -> bytes:
        """The bytes at `url`: downloaded the first time, kept afterwards.

        Example:
            >>> downloads = Downloads()
            >>> downloads.held["https://example.org/c.txt"] = b"a sentence"
            >>> downloads.read("https://example.org/c.txt")
            b'a sentence'
        """
        if url in self.held:
            return self.held[url]
        kept = self.path(url)
        if kept is not None and kept.is_file():
            return kept.read_bytes()
        data = download(url)
        if kept is None or not _write(kept, data):
            self.held[url] = data
        return data

    def keep_in(self, folder: Path) -> None:
        """From now on keep the downloads in files of `folder` (created): those held in memory are written there.
        One that cannot be written (a full disk) stays in memory: the search goes on, and a resumed one downloads it
        again."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        self.folder = folder
        for url, data in list(self.held.items()):
            if _write(self.path(url), data):
                del self.held[url]


_current: Downloads | None = None


@contextlib.contextmanager
def once_per_search(folder: Path | None = None) -> Iterator[Downloads]:
    """Within it, `fetch(url)` downloads each URL once; `folder`, when it exists, holds the downloads of an earlier
    run of the same search (read, never created here).

    Returns:
        a context manager yielding the search's `Downloads`.

    Example:
        >>> with once_per_search() as downloads:
        ...     current() is downloads
        True
    """
    global _current
    before, _current = _current, Downloads(folder if folder is not None and folder.is_dir() else None)
    try:
        yield _current
    finally:
        _current = before


def current() -> Downloads | None:
    """The search's downloads, within `once_per_search`; else None."""
    return _current


def fetch(url: str) -> bytes:
    """The bytes at `url`: the search's copy within `once_per_search`, else a fresh download."""
    return _current.read(url) if _current is not None else download(url)


def download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except OSError as err:
        raise ConfigError(f"cannot download {url!r}: {err}") from None


def _write(path: Path, data: bytes) -> bool:
    """Written beside and renamed into place (a kill never leaves a part of a download under its name); whether it
    could be."""
    try:
        handle, staging = tempfile.mkstemp(prefix=".download.", dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(staging, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        return False
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
