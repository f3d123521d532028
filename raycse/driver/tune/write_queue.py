"""The driver's MLflow writes for trials, made in order on one thread of their own, off Tune's event loop.

Tune runs one loop in the driver: every result of every trial passes through it, and a trial waits in
`tune.report` until the loop has taken its result. A write to MLflow made in that loop (a transaction of a SQLite
file, or a request to a tracking server) holds up every running trial for its duration; at a few dozen results a
second the writes alone fill the loop (benchmarks/scale.py). Here the loop only queues them.

Ordering is kept (one thread, first in first out), and consecutive step metrics of one run that queued up while the
thread was busy go out as one request. `flush()` waits until everything queued before it is written and raises the
first error a write met (after the Tracker's own retries): the callback flushes at each of Tune's snapshots of the
experiment, so that a snapshot never holds a result that MLflow does not, and at the experiment's end.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class StepMetrics:
    """One evaluation's metrics for a trial's run: merged with the next ones of the same trial when they queued up."""

    trial_id: str
    step: int
    metrics: dict


class WriteQueue:
    """Calls made in order on a daemon thread. `write_metrics(trial_id, [(step, metrics), ...])` receives merged
    StepMetrics; every other item is a callable. A failed call stops the queue: its error is raised by the next
    `submit` or `flush` (the search then fails as it would have, had the write been made in the loop)."""

    def __init__(self, write_metrics: Callable[[str, list[tuple[int, dict]]], None], name: str = "raycse-mlflow"):
        self.write_metrics = write_metrics
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._work, name=name, daemon=True)
        self.thread.start()

    def submit(self, item) -> None:
        self._raise()
        self.items.put(item)

    def flush(self) -> None:
        done = threading.Event()
        self.items.put(done)
        done.wait()
        self._raise()

    def close(self) -> None:
        self.flush()
        self.items.put(None)
        self.thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _work(self) -> None:
        while True:
            batch = [self.items.get()]
            while True:  # whatever queued up meanwhile, so that a trial's waiting metrics go out together
                try:
                    batch.append(self.items.get_nowait())
                except queue.Empty:
                    break
            for item in _merged(batch):
                if item is None:
                    return
                if isinstance(item, threading.Event):
                    item.set()
                elif self.error is not None:
                    continue  # stopped: nothing after a failed write is written
                else:
                    try:
                        if isinstance(item, list):
                            self.write_metrics(item[0].trial_id, [(m.step, m.metrics) for m in item])
                        else:
                            item()
                    except BaseException as err:  # noqa: BLE001 - handed to the loop's thread, raised there
                        self.error = err


def _merged(batch: list) -> list:
    """Consecutive StepMetrics of one trial as one list; everything else as it is, in order."""
    merged: list = []
    for item in batch:
        if isinstance(item, StepMetrics):
            if merged and isinstance(merged[-1], list) and merged[-1][0].trial_id == item.trial_id:
                merged[-1].append(item)
                continue
            merged.append([item])
        else:
            merged.append(item)
    return merged
