"""The libraries' progress bars and INFO chatter (transformers, the Hugging Face hub, MLflow), silenced before a
command runs: they would drown raycse's own output.
"""
from __future__ import annotations

import os
import sys


def quiet_libraries() -> None:
    """Said through the environment, which each library reads when it is imported, so that nothing is imported
    here."""
    import logging

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the hub's bars, and transformers' (it asks the hub)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")  # offline: one error line, not ten retry warnings
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # an unreachable server fails in seconds
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is imported, later
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if "transformers" in sys.modules:  # imported before main() ran (a notebook, a test): its env is read already
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
