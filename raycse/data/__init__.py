"""Training data: corpora, NLI triplets and the batches a step draws (`corpus`), and token ids made once and shared
across trials (`tokens`). The bundled files (the Wikipedia sample and SentEval's STS tasks) are package data in this
folder; `BUNDLED_DIR` is where they are.

May import: the leaves (errors, seeds) only.
"""
from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parent
