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
    SEARCH_MEAN_RUNNING,
    SEARCH_MEAN_RUNNING_STARTING,
    SEARCH_SLOT_USE,
    SLOT_UTILISATION,
    TEST_KEYS,
    TEST_LABELS,
    TOTAL_TIME,
    TRIAL_TIMING_KEYS,
    after_answer_phase,
    phase_of,
    trial_timing_label,
)
from raycse.settings.paper_rows import paper_row_line
from raycse.stats import Interval, format_interval, format_std

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


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table, right-aligned, floats at 4 significant digits."""
    cells = [[v if isinstance(v, str) else fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.rjust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


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


def _spread(interval: dict | None) -> str:
    """`mean ± std (n)`, the std to one significant digit below 3 values (its own error is about as large)."""
    if not interval:
        return "-"
    std = interval.get("std")
    return f"{interval['mean']:.2f}" + (f" ± {format_std(std, interval['n'])}" if std is not None else "") \
        + f" (n = {interval['n']})"


def _difference(interval: dict | None) -> str:
    """A paired difference with its interval, n and df (stats.format_interval)."""
    if not interval:
        return "-"
    return format_interval(Interval(**interval))


def choosing_table_rows(summary: dict) -> tuple[list[str], list[list[Any]]]:
    """The choosing block: each of the top-K configurations on the same fresh seeds; the best mean is the winner."""
    headers = ["search rank", "loss", "parameters", "seeds", "dev mean ± std (n)", "of planned", ""]
    cells = []
    for c in (summary.get("decision") or {}).get("configs") or []:
        block = c.get("choose")
        if not block:
            continue
        seeds = block["seeds"]
        cells.append([c.get("search_rank"), c.get("family", "-"), fmt_params(c.get("params") or {}),
                      f"{seeds[0]}-{seeds[-1]}" if seeds else "-", _spread(block.get("dev")), block["count_text"],
                      "winner" if c.get("is_winner") else ""])
    return headers, cells


def judging_table_rows(summary: dict) -> tuple[list[str], list[list[Any]]]:
    """The judging block: the winner and the published point on further fresh seeds, paired by seed."""
    decision = summary.get("decision") or {}
    headers = ["", "loss", "parameters", "seeds", "dev mean ± std (n; chose)", "of planned",
               "winner - published (dev: chose, not judged)"]
    cells = []
    for c in decision.get("configs") or []:
        block = c.get("judge")
        if not block or not (c.get("is_winner") or c.get("is_published")):
            continue
        role = " and ".join(name for name, flag in (("winner", c.get("is_winner")),
                                                     ("published point", c.get("is_published"))) if flag)
        seeds = block["seeds"]
        diff = _difference(decision.get("versus_published_dev")) if c.get("is_winner") and not c.get("is_published") \
            else ""
        cells.append([role, c.get("family", "-"), fmt_params(c.get("params") or {}),
                      f"{seeds[0]}-{seeds[-1]}" if seeds else "-", _spread(block.get("dev")), block["count_text"],
                      diff])
    return headers, cells


def test_table_rows(summary: dict) -> tuple[list[str], list[list[str]], list[str]]:
    """The answer's test table: the untouched model, the published point and the winner (its judging seeds) on the
    seven tasks and their average, each row naming model, corpus, steps and n; then winner - published paired by
    seed. Returns (headers, rows, notes): the notes give the average's paired interval and the paper's row, which
    is shown only under a caption naming its model and data."""
    table_data = summary.get("test_table") or {}
    headers = ["", *(label for _, label in TEST_COLUMNS)]
    rows, notes = [], []
    for row in table_data.get("rows") or []:
        label = (f"{row['label']} ({row['model']}, {row['corpus']}, {row['steps']} steps, n = {row['n']})"
                 if row["label"] != "untouched model" else f"untouched model ({row['model']}, one evaluation)")
        rows.append([label] + [_cell(row["figures"].get(key)) for key, _ in TEST_COLUMNS])
    difference = table_data.get("winner_minus_published") or {}
    if difference:
        rows.append(["winner - published (paired)"]
                    + [f"{difference[key]['mean']:+.2f}" if difference.get(key) else "-" for key, _ in TEST_COLUMNS])
        if difference.get("avg"):
            notes.append(f"winner - published on the test average ({table_data.get('seeds')}): "
                         f"{_difference(difference['avg'])}")
    paper = summary.get("paper")
    if paper and paper.get("figures"):
        notes.append(paper_row_line(paper))
    return headers, rows, notes



def _cell(figure: Any) -> str:
    if isinstance(figure, dict):
        mean, std = figure.get("mean"), figure.get("std")
        if mean is None:
            return "-"
        return f"{mean:.2f}" if std is None else f"{mean:.2f} ± {format_std(std, figure.get('n') or 3)}"
    return "-" if figure is None else f"{float(figure):.2f}"


def published_reference(summary: dict, rows: list[TrialRow]) -> tuple[float, str] | None:
    """The published point's objective and where it comes from: its judging-seed mean, else its search trial."""
    for c in (summary.get("decision") or {}).get("configs") or []:
        dev = (c.get("judge") or {}).get("dev")
        if c.get("is_published") and dev:
            return dev["mean"], f"mean of {dev['n']} judging seeds"
    scored = [r for r in rows if r.is_published and r.best_objective is not None]
    if scored:
        return scored[0].best_objective, "its search trial, one seed"
    return None


SEED_NOISE_UNKNOWN = ("the choosing and judging blocks measured no seed noise (no configuration ran with 2 or more "
                      "valid seeds), so whether the trials differ by more than noise is unknown")


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
    """The text summary of a search: the search table, the choosing and judging blocks, the verdict, and the test
    table (the untouched model, the published point and the winner, same model and data).

    `rows` defaults to the trials listed in the summary; `raycse report` passes the rows read from MLflow.
    """
    rows = search_rows_from_summary(summary) if rows is None else rows
    baseline = (summary.get("baseline") or {}).get("objective")
    published = summary.get("published") or {}
    reference = published_reference(summary, rows)
    objective = summary.get("objective_description") or summary.get("objective")
    scored_at = f" -> {score(reference[0])} ({reference[1]})" if reference else ""
    from raycse.reporting.answer import answer_block

    answer = answer_block(summary)
    out = ([*answer, ""] if answer else []) + [
        f"Search {summary.get('experiment')!r} ({summary.get('budget')} budget, {summary.get('space_file')}): "
           + f"{len(rows)} search trials; objective: {objective}",
           f"Baseline (untouched model): {score(baseline)}",
           f"Published point: {published.get('family', '-')} {fmt_params(published.get('params') or {})}{scored_at}",
           "", table(*search_table_rows(rows, summary.get("searched_params") or {}))]
    headers, cells = choosing_table_rows(summary)
    if cells:
        out += ["", "Choosing (the top configurations on fresh seeds; the best mean wins):", table(headers, cells)]
    headers, cells = judging_table_rows(summary)
    if cells:
        out += ["", "Judging (the winner and the published point on further fresh seeds):", table(headers, cells)]
    out += ["", f"Verdict: {summary.get('verdict') or 'no configuration was found.'}"]
    headers, cells, notes = test_table_rows(summary)
    if cells:
        out += ["", "Test tasks (Spearman x100; the judging seeds' mean ± std):", table(headers, cells), *notes]
    return "\n".join(out)


def format_timings(timings: dict[str, float]) -> str:
    """Where a search's wall clock went: its time spent (raycse/tracking/sessions.py: every driver session's, to the
    answer) by phase, the phases after the answer, and the trials' own time by kind."""
    phases = [(phase_of(k), v) for k, v in timings.items() if phase_of(k)]
    after = [(after_answer_phase(k), v) for k, v in timings.items() if after_answer_phase(k)]
    trials = [(trial_timing_label(k), timings[k]) for k in TRIAL_TIMING_KEYS if k in timings]
    return (f"Time: {timings.get(TOTAL_TIME, 0.0):.0f} s in all to the answer ("
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases) + ")"
            + "".join(f", then the {name} {seconds:.0f} s" for name, seconds in after)
            + ". Trials, summed: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in trials)
            + f"; slot utilisation {100 * timings.get(SLOT_UTILISATION, 0.0):.0f}% of "
            f"{timings.get(CONCURRENT_SLOTS, 1):.0f} slot(s)." + _running(timings))


def _running(timings: dict[str, float]) -> str:
    """The search stage's trials running at once, measured from their start and end times."""
    if SEARCH_MEAN_RUNNING not in timings:
        return ""
    return (f" Search stage: {timings[SEARCH_MEAN_RUNNING]:.2f} trials running on average, "
            f"{timings.get(SEARCH_MEAN_RUNNING_STARTING, 0.0):.2f} while trials remained to start "
            f"({100 * timings.get(SEARCH_SLOT_USE, 0.0):.0f}% of the slots).")
