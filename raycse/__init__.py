"""raycse: Ray-distributed hyperparameter search for contrastive sentence-embedding training (the SimCSE family).

The Python API (raycse/api.py), what the command line (`raycse eval | train | search | report | bench`, raycse.cli)
is a thin layer over:

    raycse.search(space, **options)   a Ray Tune + Optuna search over a search_spaces/*.yaml file -> SearchOutcome
    raycse.train(output_dir=..., **settings)   one training -> results.json's contents
    raycse.evaluate(model, pooler, tasks)      SentEval's STS figures of an encoder -> {name: figure}

Bad input raises `raycse.ConfigError` before anything starts. `raycse.losses` holds the losses as pure functions of
embeddings. docs/architecture.md maps the package. Importing raycse is cheap: the heavy libraries (torch, Ray,
MLflow) are imported by the functions that use them.
"""

from raycse.api import evaluate, search, train
from raycse.errors import ConfigError

__version__ = "0.1.0"
__all__ = ["ConfigError", "evaluate", "search", "train"]
