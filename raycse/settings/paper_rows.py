"""A space file's `paper:` section: the figures a paper reports for a family, with the model and corpus they were
measured on, so that the answer shows them only under a caption that says whether they are comparable; and that
caption (`shown_paper_row`), which every view of the row uses: the answer, the report, the dry run.

A row is comparable exactly when the search trains the row's model (by name) on the row's corpus (by its `source`,
the location the corpus is read from): the `corpus` words describe it, the `source` identifies it. A row whose own
figures disagree (the seven tasks' mean against the average it prints) carries a one-line note wherever it is shown.
"""
from __future__ import annotations

from raycse.errors import ConfigError, shown
from raycse.records import SEVEN_TASKS, TEST_KEYS, TEST_LABELS
from raycse.settings.checks import mapping as _mapping
from raycse.settings.checks import no_unknown as _no_unknown
from raycse.settings.config import check_number


def paper_rows(raw, where: str) -> dict[str, dict]:
    """The papers' rows by family: `{model, corpus, source, figures: {task: a number, or [mean, std] where the paper
    prints mean ± std}}`. The model and corpus say what the figures were measured on, `source` where that corpus is
    read from (None where the file names none): a row whose model or source differs from the search's is shown as
    not comparable."""
    rows = {}
    for family, row in _mapping(raw, where, "paper").items():
        row = _mapping(row, where, f"paper.{family}")
        _no_unknown(row, {"model", "corpus", "source", "figures"}, where, f"paper.{family}.")
        for key in ("model", "corpus", "source"):  # what the figures were measured on, and where that corpus is
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
                             "corpus": str(row.get("corpus") or "unknown corpus"), "source": row.get("source"),
                             "figures": figures}
    return rows


# A reported average is the mean of the seven tasks, each printed to two decimals: rounding moves the two apart by
# at most 0.005 + 0.005. More than that is a disagreement in the table itself.
AVERAGE_TOLERANCE = 0.01


def average_disagreement(figures: dict[str, dict]) -> str | None:
    """A one-line note where a row's printed average is not the mean of its seven tasks (by more than rounding
    explains), else None; None too where a task or the average is missing.

    Example:
        >>> row = {task: {"mean": 70.0} for task in SEVEN_TASKS}
        >>> average_disagreement({**row, "avg": {"mean": 70.0}}) is None
        True
        >>> average_disagreement({**row, "avg": {"mean": 71.0}})
        "The paper's own figures disagree: its seven tasks average 70.00, its Avg. reads 71.00."
    """
    if "avg" not in figures or any(task not in figures for task in SEVEN_TASKS):
        return None
    mean = sum(figures[task]["mean"] for task in SEVEN_TASKS) / len(SEVEN_TASKS)
    printed = figures["avg"]["mean"]
    if abs(mean - printed) <= AVERAGE_TOLERANCE + 1e-9:  # the 1e-9: a difference of exactly 0.01 in decimals
        return None
    return f"The paper's own figures disagree: its seven tasks average {mean:.2f}, its Avg. reads {printed:.2f}."


def shown_paper_row(row: dict, family: str, model: str, corpus: str) -> dict:
    """A paper's row as every view shows it, beside a search that trains `model` (its name as people know it) on
    `corpus` (where it is read from): the row, whether it is comparable, the caption that says so, and the note
    (`average_disagreement`, or None).

    Example:
        >>> row = {"model": "bert-base-uncased", "corpus": "wiki1m", "source": "https://x/wiki1m.txt", "figures": {}}
        >>> shown_paper_row(row, "focal", "bert-base-uncased", "https://x/wiki1m.txt")["comparable"]
        True
        >>> shown_paper_row(row, "focal", "bert-base-uncased", "wiki-sample")["caption"].split(". ")[1]
        'Not comparable with the rows above, which are bert-base-uncased trained on wiki-sample: other data.'
    """
    same_model = row["model"] == model
    same_data = row.get("source") is not None and row["source"] == corpus
    comparable = same_model and same_data
    other = " and ".join(words for words, differs in (("another model", not same_model),
                                                       ("other data", not same_data)) if differs)
    caption = (f"Reported by the paper for {family}: {row['model']} trained on {row['corpus']}. "
               + ("The same model and data as this search." if comparable else
                  f"Not comparable with the rows above, which are {model} trained on {corpus}: {other}."))
    return {"family": family, "model": row["model"], "corpus": row["corpus"], "source": row.get("source"),
            "figures": row["figures"], "comparable": comparable, "caption": caption,
            "note": average_disagreement(row["figures"])}


def paper_row_line(shown: dict) -> str:
    """A row as `shown_paper_row` gives it, in one line: its caption (whether it is comparable), its figures, and its
    note where the row's own figures disagree. The answer, the report and the dry run show it so.

    Example:
        >>> row = {"model": "m", "corpus": "c", "source": "s", "figures": {"avg": {"mean": 77.33, "std": 0.08}}}
        >>> paper_row_line(shown_paper_row(row, "focal", "m", "s"))
        'Reported by the paper for focal: m trained on c. The same model and data as this search. Avg. 77.33 ± 0.08.'
    """
    figures = ", ".join(f"{TEST_LABELS[key]} {_figure(shown['figures'][key])}" for key in TEST_KEYS
                        if key in shown["figures"])
    return " ".join(part for part in (shown["caption"], figures + "." if figures else "", shown.get("note")) if part)


def _figure(figure: dict) -> str:
    from raycse.stats import format_std  # scipy: not on the command line's parsing path

    std = figure.get("std")
    return f"{figure['mean']:.2f}" if std is None else f"{figure['mean']:.2f} ± {format_std(std, 3)}"
