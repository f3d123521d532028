"""One seed fixes a training's random streams, and no stream of one seed is a stream of another.

A training draws from several streams: the data order of each epoch, and the dropout masks of each worker. Adding
the epoch or the rank to the seed would make seed 42's second epoch the data order of seed 43's first, and the
confirmation trains seeds 43, 44, ... side by side. `derived_seed` hashes (seed, stream, index) instead (numpy's
SeedSequence), so the streams of different seeds never coincide.
"""
from __future__ import annotations

import numpy as np

STREAMS = {"data_order": 1, "dropout": 2}


def derived_seed(seed: int, stream: str, index: int = 0) -> int:
    """A 63-bit seed for `stream` number `index` (an epoch, a rank) of a training seeded `seed`."""
    state = np.random.SeedSequence([seed % 2**63, STREAMS[stream], index]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))
