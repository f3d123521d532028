"""Training data: corpora, NLI triplets and the batches a step draws (`corpus`), a stand-in for the papers' million
sentences (`synthetic_corpus`), token ids made once and shared across trials (`tokens`), and a file named by its URL
downloaded once per search (`downloads`). The bundled files (the Wikipedia sample and SentEval's STS tasks) are
package data in this folder; `BUNDLED_DIR` is where they are. The names below are what a setting says to mean them;
they are here, not in `corpus`, so that reading settings does not import torch.

May import: the leaves (errors, seeds) only.
"""
from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parent
BUNDLED_CORPUS = "wiki-sample"  # the 11,914 Wikipedia sentences that ship inside the package
# wiki1m's size, recombined from the bundled sample: for timing the papers' scale offline, never for quality
SYNTHETIC_WIKI1M = "synthetic-wiki1m"
BUNDLED_NLI = "sick-train"  # NLI-style triplets built from the bundled SICK train split (a demonstration set)
