"""A space file's `paper:` section: the figures a paper reports for a family, with the model and corpus they were
measured on, so that the answer shows them only under a caption that says whether they are comparable."""
from __future__ import annotations

from raycse.errors import ConfigError, shown
from raycse.settings.checks import mapping as _mapping
from raycse.settings.checks import no_unknown as _no_unknown
from raycse.settings.config import check_number


def paper_rows(raw, where: str) -> dict[str, dict]:
    """The papers' rows by family: `{model, corpus, figures: {task: a number, or [mean, std] where the paper prints
    mean ± std}}`. The model and corpus say what the figures were measured on: a row whose model or corpus differs
    from the search's is shown as not comparable."""
    rows = {}
    for family, row in _mapping(raw, where, "paper").items():
        row = _mapping(row, where, f"paper.{family}")
        _no_unknown(row, {"model", "corpus", "figures"}, where, f"paper.{family}.")
        for key in ("model", "corpus"):  # what the figures were measured on: words shown beside them
            if row.get(key) is not None and (not isinstance(row[key], str) or not row[key].strip()):
                raise ConfigError(f"{where}: paper.{family}.{key}: must be a non-empty string, got {shown(row[key])}")
        figures = {}
        for task, value in _mapping(row.get("figures"), where, f"paper.{family}.figures").items():
            key = f"paper.{family}.figures.{task}"
            pair = value if isinstance(value, list) else [value]
            if len(pair) not in (1, 2):
                raise ConfigError(f"{where}: {key}: a number or [mean, std], got {shown(value)}")
            try:
                figures[str(task)] = {"mean": check_number(key, pair[0])}
                if len(pair) == 2:
                    figures[str(task)]["std"] = check_number(key, pair[1], low=0.0)
            except ConfigError as err:
                raise ConfigError(f"{where}: {err}") from None
        rows[str(family)] = {"model": str(row.get("model") or "unknown model"),
                             "corpus": str(row.get("corpus") or "unknown corpus"), "figures": figures}
    return rows
