"""raycse: Ray-distributed hyperparameter search for contrastive sentence-embedding training (the SimCSE family).

`raycse.losses` holds the losses as pure functions of embeddings; `raycse.trainer.train` runs one training;
`raycse.driver.run.run_search` runs a Ray Tune + Optuna search over a `search_spaces/*.yaml` file. The command line
(`raycse eval | train | search | report | bench`) is `raycse.cli`. docs/architecture.md maps the package.
"""

__version__ = "0.1.0"
