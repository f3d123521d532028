"""The tables of a search, from its summary (search_summary.json) and its trial rows: pure formatting, no I/O.

What `raycse search` prints at its end and `raycse report` prints and puts on the page. Importances are flagged as
unreliable when fewer than `MIN_TRIALS_FOR_IMPORTANCE` search trials completed, or when the completed trials'
objectives span less than `NOISE_SPREAD_FACTOR` times the seed noise that the confirmation stage measured: two
runs of one configuration with different seeds already differ by about sqrt(2) x that noise, and the range of a
handful of pure-noise draws is about 2-3 x it, so a smaller spread is what identical configurations would produce
and the forest is fitting noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raycse.records import (
    CONCURRENT_SLOTS,
    SLOT_UTILISATION,
    TEST_KEYS,
    TEST_LABELS,
    TOTAL_TIME,
    TRIAL_TIMING_KEYS,
    phase_of,
    trial_timing_label,
)

MIN_TRIALS_FOR_IMPORTANCE = 10
NOISE_SPREAD_FACTOR = 2.0
TEST_COLUMNS = tuple((key, TEST_LABELS[key]) for key in TEST_KEYS)


# ------------------------------------------------------------------------------------------ formatting
def fmt(value: Any) -> str:
    """4 significant digits for floats (tau 0.07077, lr 3e-05, tau 0.07 as written); '-' for a missing value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def score(value: float | None) -> str:
    """A measured objective at 4 significant digits, trailing zeros kept so that a column reads 81.00, 81.56."""
    return "-" if value is None or not math.isfinite(value) else f"{value:#.4g}"


def fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={fmt(value)}" for name, value in params.items())


def mean_std(mean: float | None, std: float | None) -> str:
    # the spread as the papers print it: two decimals, like the STS figures it qualifies
    return score(mean) if std is None or mean is None else f"{score(mean)} ± {std:.2f}"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table, right-aligned, floats at 4 significant digits."""
    cells = [[v if isinstance(v, str) else fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.rjust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def sts_table_rows(rows: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Rows like the papers' Table 2: the seven STS tasks and their average, 2 decimals.

    A figure is a number or a {"mean", "std"} dict (std may be missing or null): the latter prints as mean ± std.
    """
    def cell(figure: Any) -> str:
        if isinstance(figure, dict):
            mean, std = figure.get("mean"), figure.get("std")
            return "-" if mean is None else f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"
        return "-" if figure is None else f"{float(figure):.2f}"

    headers = [""] + [label for _, label in TEST_COLUMNS]
    return headers, [[name] + [cell(figures.get(key)) for key, _ in TEST_COLUMNS] for name, figures in rows.items()]


def test_row_table(rows: dict[str, dict[str, Any]]) -> str:
    return table(*sts_table_rows(rows))


# ------------------------------------------------------------------------------------------ the tables
@dataclass
class TrialRow:
    """One search-stage trial as the search table shows it."""

    trial_id: str
    family: str
    params: dict[str, Any]
    best_objective: float | None
    best_step: int | None  # the training step of the best evaluation
    last_step: int | None  # the training step of the last evaluation (where ASHA stopped it, if it did)
    status: str
    seed: int | None
    is_published: bool = False
    optuna_number: int | None = None


def best_of_history(history: list[tuple[int, float]]) -> tuple[float, int] | None:
    """(best value, its step) of an objective history; the earliest step wins a tie."""
    finite = [(step, value) for step, value in history if math.isfinite(value)]
    if not finite:
        return None
    step, value = min(finite, key=lambda point: (-point[1], point[0]))
    return value, step


def search_rows_from_summary(summary: dict) -> list[TrialRow]:
    """The search table from `search_summary.json` alone (what the end of `raycse search` has at hand)."""
    published_key = (summary.get("published") or {}).get("config_key")
    return [TrialRow(trial_id=t["trial_id"], family=t["family"], params=t["params"],
                     best_objective=t.get("best_objective"), best_step=t.get("best_step"), last_step=t.get("steps"),
                     status=t.get("status", "-"), seed=t.get("seed"), optuna_number=t.get("optuna_number"),
                     is_published=published_key is not None and t.get("config_key") == published_key)
            for t in summary.get("trials", []) if t.get("stage", "search") == "search"]


def search_table_rows(rows: list[TrialRow], searched_params: dict[str, list[str]]) -> tuple[list[str], list[list[Any]]]:
    """Best first; trials without a score (failed, diverged before scoring) last; one column per searched parameter."""
    families = list(dict.fromkeys(r.family for r in rows))
    names = list(dict.fromkeys(name for family_names in searched_params.values() for name in family_names))
    ordered = sorted(rows, key=lambda r: (r.best_objective is None, -(r.best_objective or 0.0)))
    headers = (["optuna #", "trial"] + (["loss"] if len(families) > 1 else []) + names
               + ["best objective", "best step", "last eval step", "seed", "status", "point"])
    cells = [[r.optuna_number, r.trial_id] + ([r.family] if len(families) > 1 else [])
             + [r.params.get(n) for n in names]
             + [score(r.best_objective), r.best_step, r.last_step, r.seed, r.status,
                "published" if r.is_published else ""]
             for r in ordered]
    return headers, cells


def confirmation_table_rows(summary: dict) -> tuple[list[str], list[list[Any]]]:
    """The confirmation stage: each configuration re-run over seeds, and its paired difference to the published
    point."""
    headers = ["search rank", "loss", "parameters", "n", "seeds", "mean ± std", "diff to published", "95% interval"]
    cells = []
    for c in summary.get("confirmation") or []:
        diff = c.get("diff_to_published")
        if c.get("is_published"):
            diff_cell, interval = "(published point)", ""
        elif diff is None:
            diff_cell, interval = "-", ""
        else:
            # differences of STS figures, in the figures' own unit: two decimals, signed
            diff_cell = f"{diff['mean']:+.2f}" + (f" ± {diff['std']:.2f}" if diff.get("std") is not None else "")
            interval = "-" if diff.get("low") is None else f"[{diff['low']:+.2f}, {diff['high']:+.2f}]"
        cells.append([c.get("search_rank"), c.get("family", "-"), fmt_params(c.get("params") or {}), c.get("n"),
                      ", ".join(str(s) for s in c.get("seeds") or []), mean_std(c.get("mean"), c.get("std")),
                      diff_cell, interval])
    return headers, cells


def winner_test_rows(summary: dict) -> dict[str, dict[str, Any]]:
    """The winner's seven test tasks (mean ± std over its seeds) beside the paper's row."""
    rows: dict[str, dict[str, Any]] = {}
    winner, figures = summary.get("winner") or {}, summary.get("winner_test") or {}
    if figures:
        n = max((f.get("n") or 0 for f in figures.values()), default=0)
        rows[f"raycse winner ({winner.get('family', '?')}, {n} seed{'s' if n != 1 else ''})"] = figures
    paper = summary.get("paper") or {}
    if paper.get("figures"):
        rows[paper.get("label") or f"paper ({paper.get('family', '?')})"] = paper["figures"]
    return rows


def published_reference(summary: dict, rows: list[TrialRow]) -> tuple[float, str] | None:
    """The published point's objective and where it comes from: its confirmed mean, else its search trial."""
    for c in summary.get("confirmation") or []:
        if c.get("is_published") and c.get("mean") is not None:
            return c["mean"], f"mean of {c.get('n')} seeds"
    scored = [r for r in rows if r.is_published and r.best_objective is not None]
    if scored:
        return scored[0].best_objective, "its search trial, one seed"
    return None


SEED_NOISE_UNKNOWN = ("the confirmation stage measured no seed noise (no configuration ran with 2 or more seeds), "
                      "so whether the trials differ by more than noise is unknown")


def importance_warnings(objectives: list[float], seed_noise_std: float | None) -> list[str]:
    """Why importances computed from these completed trials' objectives may be noise (see the module docstring).

    With no seed-noise estimate only the trial count is judged; the caller says once that the noise is unknown.
    """
    warnings = []
    if len(objectives) < MIN_TRIALS_FOR_IMPORTANCE:
        warnings.append(f"only {len(objectives)} search trial{'s' if len(objectives) != 1 else ''} completed "
                        f"(fewer than {MIN_TRIALS_FOR_IMPORTANCE}): the importances are little more than a guess")
    if seed_noise_std is not None and len(objectives) >= 2:
        spread = max(objectives) - min(objectives)
        if spread < NOISE_SPREAD_FACTOR * seed_noise_std:
            warnings.append(f"the completed trials' objectives span {fmt(spread)}, "
                            f"less than {fmt(NOISE_SPREAD_FACTOR)} x the seed noise ({fmt(seed_noise_std)}): "
                            "the importances rank noise")
    return warnings


def format_search_summary(summary: dict, rows: list[TrialRow] | None = None) -> str:
    """The text summary of a search: search table, confirmation, verdict, winner's test tasks beside the paper's row.

    `rows` defaults to the trials listed in the summary; `raycse report` passes the rows read from MLflow.
    """
    rows = search_rows_from_summary(summary) if rows is None else rows
    baseline = (summary.get("baseline") or {}).get("objective")
    published = summary.get("published") or {}
    reference = published_reference(summary, rows)
    objective = summary.get("objective_description") or summary.get("objective")
    scored_at = f" -> {score(reference[0])} ({reference[1]})" if reference else ""
    out = [f"Search {summary.get('experiment')!r} ({summary.get('budget')} budget, {summary.get('space_file')}): "
           + f"{len(rows)} search trials; objective: {objective}",
           f"Baseline (untouched model): {score(baseline)}",
           f"Published point: {published.get('family', '-')} {fmt_params(published.get('params') or {})}{scored_at}",
           "", table(*search_table_rows(rows, summary.get("searched_params") or {}))]
    if summary.get("confirmation"):
        out += ["", "Confirmation:", table(*confirmation_table_rows(summary))]
    verdict = (summary.get("winner") or {}).get("sentence")
    out += ["", f"Verdict: {verdict}" if verdict else "Verdict: no configuration was confirmed."]
    test_rows = winner_test_rows(summary)
    if test_rows:
        out += ["", test_row_table(test_rows)]
    return "\n".join(out)


def format_timings(timings: dict[str, float]) -> str:
    """Where a search's wall clock went, by phase, and the trials' own time by kind."""
    phases = [(phase_of(k), v) for k, v in timings.items() if phase_of(k)]
    trials = [(trial_timing_label(k), timings[k]) for k in TRIAL_TIMING_KEYS if k in timings]
    return (f"Time: {timings.get(TOTAL_TIME, 0.0):.0f} s in all ("
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases)
            + "). Trials, summed: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in trials)
            + f"; slot utilisation {100 * timings.get(SLOT_UTILISATION, 0.0):.0f}% of "
            f"{timings.get(CONCURRENT_SLOTS, 1):.0f} slot(s).")
