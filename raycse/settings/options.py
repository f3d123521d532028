"""The options of the commands beside a training's settings (search, compare, evaluate, report, export), one table
each: an option's Python name (its flag is --name-with-dashes), type, default, help and rule. The Python API
(raycse/api.py) checks its arguments by these tables and the command line makes its flags from them, so both take
the same values by the same rules.

The API's docstrings describe the options from here too (raycse/settings/docstrings.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raycse.encoder.poolers import AUTO_POOLER, POOLERS
from raycse.errors import ConfigError, shown
from raycse.settings.budgets import BUDGETS, FULL
from raycse.settings.checks import (
    CONFIRM_SEEDS_LIMIT,
    INT_LIMIT,
    SEED_LIMIT,
    check_bool,
    check_choice,
    check_int,
    check_path_text,
)
from raycse.settings.space_keys import key_at

TRACKING_HELP = "default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db"


@dataclass(frozen=True)
class Option:
    """One option of a command: its Python name (the flag is --name-with-dashes), type, default, help and rule."""

    name: str
    kind: type  # int | str | bool
    default: Any
    help: str
    low: int | None = None
    high: int | None = None
    choices: tuple | None = None
    path: bool = False  # a string that names a file or directory

    def check(self, value: Any) -> Any:
        if value is None and self.default is None:
            return None
        if self.kind is bool:
            return check_bool(self.name, value)
        if self.kind is int:
            return check_int(self.name, value, low=self.low, high=self.high)
        if self.choices:
            return check_choice(self.name, value, self.choices)
        return check_path_text(self.name, value) if self.path else check_text(self.name, value)


SEARCH_OPTIONS = (
    Option("num_samples", int, None, "search-stage trials (default: the file's)", low=1, high=INT_LIMIT),
    Option("max_concurrent", int, None, "trials at once (default: what fits)", low=1, high=INT_LIMIT),
    Option("seed", int, None, "the sampler's seed (default: the file's)", low=0, high=SEED_LIMIT),
    Option("choose_seeds", int, None, "fresh seeds on which the top configurations are chosen among (default: the "
           "file's)", low=1, high=CONFIRM_SEEDS_LIMIT),
    Option("judge_seeds", int, None, "fresh seeds on which the winner and the published point are judged, at least "
           "2 (the least that gives an interval) (default: the file's search.confirm.judge_seeds, or its "
           "budget's)", low=key_at("search.confirm.judge_seeds").low, high=key_at("search.confirm.judge_seeds").high),
    Option("confirm", bool, True, "no choosing or judging: the search stage's best, from one seed, unjudged (Python: "
           "confirm=False)"),
    Option("tracking_uri", str, None, TRACKING_HELP),
    Option("optuna_storage", str, None, "the Optuna study's storage (default: optuna.db beside a SQLite MLflow "
           "store, else in the working directory)"),
    Option("state", str, None, "one place for all of the search's state: a directory (mlflow.db, "
           "mlflow-artifacts/, optuna.db, ray_results/) or object storage (s3://bucket/prefix: Tune's state, "
           "checkpoints, MLflow artifacts; then name the two databases); the flags below override it", path=True),
    Option("storage_path", str, None, "Tune state and checkpoints (a path or s3://...; default: STATE/ray_results, "
           "else ray_results)", path=True),
    Option("budget", str, "auto", "auto: the file's own (full) budget when the Ray cluster has a GPU, its cpu_budget "
           "when it has none; paper: its paper_budget, the paper's own model, corpus and training settings "
           "(downloaded; never chosen by auto)", choices=("auto", FULL, *BUDGETS)),
    Option("resume", bool, False, "continue an interrupted search (either stage)"),
    Option("keep_checkpoints", bool, False, "keep every trial's training state (last/: weights, optimiser state, "
           "RNG states, data position; 3-4 times the weights) after the trial ends; by default a trial that ended "
           "keeps only its best/ weights"),
    Option("experiment", str, None, "the search's name: its MLflow experiment, Optuna study, Tune folder and "
           "registered model (default: the file's `experiment`), so that one file can be searched twice"),
    Option("warm_workers", bool, True, "no warm workers: each trial trains in Tune's own trial process, which every "
           "stage starts anew (by default the processes that train live for the whole search, across its stages) "
           "(Python: warm_workers=False)"),
)

COMPARE_OPTIONS = tuple(option for option in SEARCH_OPTIONS
                        if option.name not in ("confirm", "resume", "experiment")) + (
    Option("resume", bool, False, "continue an interrupted comparison (the same spaces, stores and name): each "
           "loss's finished search is read back, the interrupted one continues, the others start"),
    Option("experiment", str, None, "the comparison's name: its MLflow experiment; each loss's search is the "
           "experiment NAME-LOSS (default: compare-LOSS1-LOSS2...)"),
    Option("output_dir", str, "compare", "where compare_summary.json goes", path=True),
    Option("dry_run", bool, False, "print each loss's search plan and the shared judging, with the wall clock, "
           "GPU-hours and disk they would take; runs nothing and creates no store, folder or Ray cluster"),
)

EVAL_OPTIONS = (
    Option("model", str, "minilm", "'minilm' (packaged), a local directory or a hub id", path=True),
    Option("pooler", str, AUTO_POOLER, "auto: the model's own pooling, else SimCSE's cls_before_pooler",
           choices=(AUTO_POOLER, *POOLERS)),
    Option("tasks", str, "stsb-dev", "what to score", choices=("stsb-dev", "sts", "all")),
    Option("batch_size", int, 128, "sentences encoded at once", low=1, high=INT_LIMIT),
    Option("max_len", int, None, "truncate sentences (default: the model's limit)", low=3, high=INT_LIMIT),
    Option("trust_remote_code", bool, False, "let transformers run code shipped with the model"),
    Option("output", str, None, "write the figures as JSON here", path=True),
)

EXPORT_OPTIONS = (
    Option("tracking_uri", str, None, TRACKING_HELP),
    Option("push_to_hub", str, None, "then upload the folder to this Hugging Face Hub repository (OWNER/NAME)"),
    Option("private", bool, False, "with --push-to-hub: create the repository private"),
    Option("loss", str, None, "EXPERIMENT is a comparison (raycse compare): export this loss's tuned winner"),
)

REPORT_OPTIONS = (
    Option("tracking_uri", str, None, TRACKING_HELP),
    Option("optuna_storage", str, None, "default: the storage the search recorded"),
    Option("output_dir", str, "report", "where index.html (and its images, also inline) go", path=True),
)


def check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError.at(name, f"must be a non-empty string, got {shown(value)}")
    return value


def checked(options: tuple[Option, ...], values: dict[str, Any]) -> dict[str, Any]:
    """Each value checked by its option's rule (a ConfigError naming the option otherwise)."""
    by_name = {option.name: option for option in options}
    return {name: by_name[name].check(value) for name, value in values.items()}
