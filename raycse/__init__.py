"""raycse: Ray-distributed hyperparameter search for contrastive sentence-embedding training (the SimCSE family).

The Python API, which the command line (`raycse --help`) is a thin layer over:

    raycse.search(space, **options)        a Ray Tune + Optuna search over a space file -> SearchOutcome
    raycse.load(experiment)                a finished search's SearchOutcome, read back from MLflow
    raycse.compare([space, space, ...])   losses searched with one budget, judged together -> ComparisonOutcome
    raycse.plan(space, step_ms=..., gpus=...)   what a search would run and cost, nothing run -> DryRun
    raycse.status(experiment)              where a running (or finished) search stands -> SearchStatus
    raycse.train(output_dir=..., loss=...) one training -> TrainResult
    raycse.evaluate(model, pooler, tasks)  SentEval's STS figures of an encoder -> {name: figure}
    raycse.report(experiment)              the report page of a search -> the text `raycse report` prints
    raycse.export(experiment, folder)      the winner as a sentence-transformers folder with a model card

The package, by layer (lowest first; a module imports only its own layer or a lower one, docs/architecture.md):

    errors.py records.py files.py stats.py seeds.py   the small leaves everything may use
    judging/ sampling/         the statistics of the answer (pure), the sampler table
    losses/ data/ encoder/     the losses, the training data, the encoder
    evaluation/                the STS tasks and the objectives
    settings/                  TrainConfig and the space file, validated once, at the edge
    tracking/                  the only door to MLflow
    training/                  the training loop and one training as an MLflow run
    driver/ comparing.py reporting/ bench/ exporting.py   a search, a comparison, the report, `raycse bench`,
                               the winner's folder
    planning/                  a search's plan and cost before it runs (the dry run)
    api.py cli.py arguments/ commands/   the Python API and the command line over it

Bad input raises `raycse.ConfigError` before anything starts. `raycse.losses` holds the losses as pure functions of
embeddings. Importing raycse is cheap: the heavy libraries (torch, Ray, MLflow) are imported by the functions that
use them.
"""

from raycse.api import compare, evaluate, export, load, plan, report, search, status, train
from raycse.errors import ConfigError

__version__ = "0.1.0"
__all__ = ["ConfigError", "compare", "evaluate", "export", "load", "plan", "report", "search", "status", "train"]
