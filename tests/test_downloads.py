"""A corpus named by its URL is downloaded once per search (raycse/data/downloads.py): not once by the check before the
search starts and again by its tokenize stage, nor again by a resumed search. A real HTTP server on this machine
counts the requests."""
from __future__ import annotations

import contextlib
import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_search import search_args, small_dev_file, write_space

from raycse.data.corpus import read_corpus


@contextlib.contextmanager
def served(folder: Path) -> Iterator[tuple[str, Counter]]:
    """An HTTP server of `folder`'s files on a free port of 127.0.0.1: (its address, the GET requests by path)."""
    requests: Counter = Counter()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def do_GET(self):
            requests[self.path] += 1
            super().do_GET()

        def log_message(self, *args):  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_within_a_search_a_url_is_downloaded_once_and_kept_in_its_folder(tmp_path, sentences, no_proxy):
    from raycse.data import downloads

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "corpus.txt").write_text("\n".join(sentences) + "\n")
    folder = tmp_path / "search" / downloads.DOWNLOADS_DIR
    with served(tmp_path / "www") as (address, requests):
        url = f"{address}/corpus.txt"
        assert read_corpus(url) == read_corpus(url) == sentences  # outside a search: a download each
        assert requests["/corpus.txt"] == 2
        with downloads.once_per_search(folder) as kept:  # no folder yet: a new search, before its set-up
            assert read_corpus(url, max_sentences=3) == sentences[:3]
            assert read_corpus(url) == sentences and requests["/corpus.txt"] == 3
            assert not folder.exists()  # the check before the search creates nothing
            kept.keep_in(folder)  # the set-up: the folder exists now
            assert not kept.held and read_corpus(url) == sentences and requests["/corpus.txt"] == 3
        (copy,) = folder.iterdir()
        assert copy.name.endswith("-corpus.txt") and copy.read_text() == "\n".join(sentences) + "\n"
        with downloads.once_per_search(folder):  # the same search resumed
            assert read_corpus(url) == sentences and requests["/corpus.txt"] == 3
        with downloads.once_per_search(tmp_path / "another" / downloads.DOWNLOADS_DIR):  # another search
            assert read_corpus(url) == sentences and requests["/corpus.txt"] == 4


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_search_and_its_resumed_run_download_the_corpus_once(tmp_path, tiny_bert_dir, no_proxy, capsys,
                                                                monkeypatch):
    import ray

    from raycse.cli import main
    from raycse.data.corpus import BUNDLED_CORPUS_PATH

    monkeypatch.chdir(tmp_path)
    (tmp_path / "www").mkdir()
    lines = BUNDLED_CORPUS_PATH.read_text(encoding="utf-8").splitlines(keepends=True)[:400]
    (tmp_path / "www" / "corpus.txt").write_text("".join(lines), encoding="utf-8")
    try:
        with served(tmp_path / "www") as (address, requests):
            space = write_space(tmp_path, tiny_bert_dir, "url-corpus", num_samples=1, test_eval="none",
                                confirm="null", objective=small_dev_file(tmp_path))
            space.write_text(space.read_text().replace("loss: focal\n", f"loss: focal\ncorpus: {address}/corpus.txt\n"))
            assert main(search_args(tmp_path, space)) == 0
            # the check (every corner of the space) and the tokenize stage read it; the first alone downloaded it
            assert requests == {"/corpus.txt": 1}, requests
            ray.shutdown()
            assert main(search_args(tmp_path, space, "--resume")) == 0
            assert "Resuming search" in capsys.readouterr().out
            assert requests == {"/corpus.txt": 1}, requests  # the resumed run read the search's own copy
    finally:
        ray.shutdown()
