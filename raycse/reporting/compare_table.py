"""What `raycse compare` prints, from compare_summary.json alone (pure: no I/O): one table of every loss's tuned
winner and published point (its configuration, mean +- std over the judging seeds on each test task and the
average, n, the budget it got), and under it the family of pairwise differences with their adjusted intervals, n
and verdicts."""
from __future__ import annotations

import functools
import textwrap

from raycse.records import TEST_LABELS
from raycse.reporting.tables import fmt_params, table
from raycse.stats import format_std


def _figure(figure: dict) -> str:
    if figure["mean"] is None:
        return "-"
    return f"{figure['mean']:.2f} ± {format_std(figure['std'], figure['n'])}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _seeds(seeds: list[int]) -> str:
    """'seed 43', 'seeds 44-45' (consecutive by construction: raycse.judging.confirmation_plan.seed_blocks)."""
    if not seeds:
        return "seeds -"
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"


def _budget(budget: dict | None) -> str:
    if not budget:
        return "-"
    steps = f"{budget['max_steps']} steps" if budget.get("max_steps") else f"{budget.get('epochs')} epoch(s)"
    n = budget.get("choose_seeds", 0)
    choose = f", top {budget['top_k']} on {n} seed{'s' if n != 1 else ''}" if budget.get("top_k", 1) > 1 else ""
    return f"{budget['trials']} trials of {steps}{choose}"


def arms_table(summary: dict) -> str:
    tasks = [*summary["tasks"], "avg"]
    headers = ["", "configuration", *(TEST_LABELS.get(task, task) for task in tasks), "n", "failed", "budget"]
    rows = []
    for arm in summary["arms"]:
        role = "published point" if arm["role"] != "tuned" else (
            "tuned winner = published point" if arm.get("is_published") else "tuned winner")
        label = f"{arm['loss']} ({role})"
        rows.append([label, fmt_params(arm["params"]) or "-", *(_figure(arm["test"][task]) for task in tasks),
                     str(arm["test"]["avg"]["n"]), f"{arm['failed']} of {arm['ran']}",
                     _budget(summary.get("budget_per_loss"))])
    return table(headers, rows)


def pairs_table(summary: dict) -> str:
    family = summary["family"]
    confidence = family.get("interval_confidence")
    headers = ["comparison (a - b)", "difference",
               f"adjusted interval ({100 * confidence:.1f}% each)" if confidence else "adjusted interval", "n",
               "p", "Holm p", "verdict"]
    rows = []
    for pair in summary["pairs"]:
        interval = ("no interval" if pair["low"] is None or pair["high"] is None
                    else f"[{pair['low']:+.2f}, {pair['high']:+.2f}]")
        verdict = pair["verdict"] if pair["verdict"] == "not distinguishable" else \
            f"{pair['a']} {pair['verdict']} than {pair['b']}"
        if pair.get("note"):
            verdict += f" ({pair['note']})"
        rows.append([f"{pair['a']} - {pair['b']}", _signed(pair["mean"]), interval, str(pair["n"]),
                     f"{pair['p']:.3g}", f"{pair['p_holm']:.3g}", verdict])
    return table(headers, rows)


def format_comparison(summary: dict) -> str:
    """The comparison's answer: the design in a sentence, the table, the family's verdicts."""
    seeds = summary.get("seeds") or {}
    judge = seeds.get("judge") or []
    family = summary["family"]
    budget = summary.get("budget_per_loss") or {}
    wrap = functools.partial(textwrap.fill, width=116, break_on_hyphens=False, break_long_words=False)
    lines = [
        f"Comparison {summary['comparison']!r} ({summary['budget']} budget; {summary.get('model')}, "
        f"{summary.get('corpus')}; objective {summary['objective']}): each loss searched with the same budget "
        f"({_budget(budget)}; search seed {seeds.get('search')}"
        + (f", choosing {_seeds(seeds['choose'])}" if seeds.get("choose") else "")
        + f"), then every tuned winner and published point judged on the same fresh {_seeds(judge)} "
        f"(n = {len(judge)}), on "
        f"{summary['judged_figure']}: data that chose nothing.",
        "",
        "Test tasks (Spearman x100; mean ± std over the judging seeds):",
        arms_table(summary),
        "",
        f"Pairwise differences on {summary['judged_figure']}, paired by judging seed: {family['comparisons']} "
        f"comparison(s) judged together, family-wise error {100 * family['alpha']:.0f}% (verdicts: "
        f"{family['verdicts']}; intervals: {family['intervals']}, simultaneous 95%).",
        pairs_table(summary),
    ]
    if summary["budget"] == "cpu":
        lines.append("CPU budget: a demonstration of the mechanism, not a decision.")
    lines.append("Each loss's search is its own experiment: " + ", ".join(
        f"{label}: {facts['experiment']}" for label, facts in summary["losses"].items())
        + f" (raycse report, raycse export; or raycse export {summary['comparison']} DIR --loss LOSS).")
    prose = (0, 5, len(lines) - 1)  # the design, the family's sentence, where each loss's search is
    return "\n".join(wrap(line) if i in prose else line for i, line in enumerate(lines))
