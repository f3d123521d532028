"""A stand-in for the papers' corpus: as many sentences as wiki1m (1,000,000), made from the bundled Wikipedia sample,
the same on every machine, with no download. For timing the paper's scale (tokenising, the object store, a trial's
memory, steps of BERT-base's shape), never for a figure of quality: its sentences are recombined halves of real ones.

Sentence i joins the first half of one bundled sentence to the second half of another, both drawn with a seeded
generator, so the lengths follow the sample's and nearly every sentence is distinct (11,914^2 possible pairs).
"""
from __future__ import annotations

import numpy as np

WIKI1M_SENTENCES = 1_000_000  # SimCSE's wiki1m_for_simcse.txt, the corpus of every seed paper


def synthetic_sentences(sample: list[str], count: int = WIKI1M_SENTENCES, seed: int = 0) -> list[str]:
    """`count` sentences recombined from `sample`, the same for the same arguments.

    Args:
        sample: the sentences to recombine (the bundled sample: `raycse.data.corpus.read_corpus("wiki-sample")`).
        count: how many sentences to make.
        seed: the generator's seed.

    Returns:
        The sentences, in order.

    Example:
        >>> synthetic_sentences(["a b c d", "e f g h"], count=3, seed=1)
        ['a b g h', 'e f c d', 'e f c d']
    """
    rng = np.random.default_rng(seed)
    words = [sentence.split() for sentence in sample]
    heads = [" ".join(w[:len(w) // 2]) for w in words]
    tails = [" ".join(w[len(w) // 2:]) for w in words]
    first = rng.integers(len(sample), size=count)
    second = rng.integers(len(sample), size=count)
    return [f"{heads[a]} {tails[b]}".strip() for a, b in zip(first.tolist(), second.tolist())]
