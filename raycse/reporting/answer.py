"""The answer first: at most eight lines that open the printed answer, the report page and the model card (the same
function makes all three). Read from `search_summary.json`'s fields, so any view of a finished search prints it."""
from __future__ import annotations

from raycse.stats import Interval, format_interval, format_std

JUDGED_ON = {"test": "seven-task test average", "split": "held-out part of the objective's pairs"}


def _figure(interval: dict | None) -> str:
    if not interval or interval.get("mean") is None:
        return "-"
    std = interval.get("std")
    return (f"{interval['mean']:.2f}" + (f" ± {format_std(std, interval['n'])}" if std is not None else "")
            + f" (n = {interval['n']})")


def _judgment(interval: dict | None, beats: bool, below: bool, blocked: bool) -> str:
    if not interval:
        return "not judged (no figure that took no part in choosing)"
    text = format_interval(Interval(**{k: interval.get(k) for k in ("mean", "std", "n", "df", "low", "high")}))
    if interval.get("low") is None:
        return f"{text}: unjudged"
    word = ("beats" if beats else "below" if below else "blocked (fails more often)" if blocked
            and interval["low"] > 0 else "level")
    return f"{text.replace('95% interval', 'repeated 95% interval')}: {word}"


def _estimate(estimate: dict | None) -> str:
    """`; estimate +0.38, adjusted for early stopping (naive mean +0.42, over the 6 pairs ...)`, or nothing."""
    return f"; estimate {estimate['text']}" if estimate and estimate.get("adjusted") else ""


def answer_block(summary: dict) -> list[str]:
    """The answer in at most eight lines: the winner, the published point and the untouched model on the judged
    figure (each with figure, ± and n); the two judgments (interval, n, one word); failures and the stopping look;
    the budget's caveat. Empty when the search found no configuration."""
    winner = summary.get("winner") or {}
    decision = summary.get("decision") or {}
    if not winner:
        return []
    budget = summary.get("budget", "?")
    caveat = ("CPU budget: a demonstration of the mechanism, not a decision." if budget == "cpu"
              else f"{budget} budget: differences below the detectable one ({decision.get('detectable') or 0:.2f}) "
                   "go unseen.")
    if not decision:
        return [f"Winner: {winner.get('family', '?')}, its one search trial: not judged (no confirmation stage).",
                caveat]
    judged_on = JUDGED_ON.get(winner.get("judged_on") or "test", "judged figure")
    configs = {c.get("config_key"): c for c in decision.get("configs") or []}
    key = "avg" if (winner.get("judged_on") or "test") == "test" else None

    def judged_figure(config_key: str | None) -> dict | None:
        block = (configs.get(config_key) or {}).get("judge") or {}
        return (block.get("test") or {}).get(key) if key else None

    published = summary.get("published") or {}
    base = (summary.get("baseline") or {}).get("test", {}).get("avg")
    registered = summary.get("registered") or {}
    fails_more = decision.get("fails_more") or []
    lines = [
        f"Winner ({winner.get('family', '?')}): {_figure(judged_figure(winner.get('config_key')))} on the "
        f"{judged_on}, judging seeds; exported checkpoint: seed {registered.get('seed', '?')}.",
        f"Published point ({published.get('family', '-')}): "
        + ("the winner itself." if winner.get("is_published") else
           f"{_figure(judged_figure(published.get('config_key')))}."),
        f"Untouched model: {base:.2f} (n = 1, one evaluation)." if base is not None else "Untouched model: no test "
        "figure.",
        "Winner − published: " + ("-" if winner.get("is_published") else _judgment(
            decision.get("versus_published"), winner.get("beats_published"), winner.get("below_published"),
            published.get("config_key") in fails_more)) + _estimate(decision.get("estimate_published")),
        "Winner − untouched: " + _judgment(decision.get("versus_baseline"), winner.get("beats_baseline"), False,
                                           "untouched model" in fails_more),
    ]
    failures = decision.get("failures") or {}
    looks = (decision.get("method") or {}).get("looks") or []
    extra = [f"{'winner' if k == winner.get('config_key') else 'published'} {f['text']}" for k, f in failures.items()]
    if len(looks) > 1:
        extra.append(f"judging at look {decision.get('look')} of {len(looks)} ({', '.join(map(str, looks))} seeds)"
                     + (f", stopped: {decision['stopped']}" if decision.get("stopped") else ""))
    if extra:
        lines.append("Failures: " + "; ".join(extra) + ".")
    lines.append(caveat)
    return lines
