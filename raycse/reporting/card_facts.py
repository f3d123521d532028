"""What a model card says about a search's answer (`CardFacts`), read from `search_summary.json` by `card_facts`, the
one function that knows the summary's answer fields. raycse/exporting.py writes the card from them; nothing is
re-measured here."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycse.reporting.answer import answer_block
from raycse.reporting.tables import test_table_rows


@dataclass
class CardFacts:
    """What the card says about a search's answer. Figures are {"mean", "std", "n"} dicts (std None below 2 seeds);
    intervals add "df", "low" and "high"."""

    experiment: str
    base_model: str  # as the summary names it (a hub id, or a local directory)
    family: str
    params: dict[str, Any]
    is_published: bool
    objective: str  # what chose and judged the configurations, in words
    budget: str
    judged: bool  # False: no confirmation stage ran, and the winner's figure is its one search trial
    method: dict  # the decision's method: top_k, choose_seeds, judge_seeds, seeds by block ({} when not judged)
    winner: dict  # the winner's objective over its judging seeds
    versus_published: dict | None  # winner - published on the objective, paired over the judging seeds
    published: dict | None  # {"family", "params"}, and its objective over the judging seeds when it was judged
    baseline: float | None  # the untouched model's objective
    test_table: tuple[list[str], list[list[str]], list[str]]  # headers, rows, notes: as `raycse search` prints it
    winner_test: dict[str, dict]  # the winner's test figures over its judging seeds: what the model-index holds
    verdict: str
    searched: int  # search-stage trials
    seed_noise: float | None
    seed_noise_df: int | None
    detectable: float | None  # the smallest winner - published difference the judging stage could detect
    study_name: str
    optuna_storage: str
    registered_model: dict  # {"name", "version"}
    checkpoint: dict = field(default_factory=dict)  # the exported checkpoint's trial, as the summary lists it
    checkpoint_rule: str = ""  # why that checkpoint of the winner's runs
    versus_published_dev: dict | None = None  # the same on dev, the data that chose: shown, never judges
    answer: list[str] = field(default_factory=list)  # the answer block, as the printed answer and the page open
    winner_test_seeds: list[int] = field(default_factory=list)  # the winner's judging seeds scored on the test tasks

    def whose_test_figures(self) -> str:
        """Whose run the checkpoint is, and whose the test figures are: this checkpoint's own when its seed is the one
        scored on the test tasks, another seed's, or a mean over seeds (with this one among them, or not)."""
        seed, seeds = self.checkpoint.get("seed"), self.winner_test_seeds
        this = f"This checkpoint is seed {seed if seed is not None else '?'}'s run"
        if not self.winner_test:
            return this + "."
        if not seeds:  # a summary that lists no trial's test figures: their count alone
            n = (self.winner_test.get("avg") or {}).get("n")
            return this + (f"; the test figures are means over {n} judging seeds." if n and n > 1 else ".")
        if seeds == [seed]:
            return this + ", the one judging seed scored on the test tasks: the test figures are this checkpoint's own."
        if len(seeds) == 1:
            return this + f"; the test figures are seed {seeds[0]}'s run, the one scored on the test tasks, " \
                          "not this one's."
        among = "this checkpoint's among them" if seed in seeds else "not this checkpoint's"
        in_a_row = seeds == list(range(seeds[0], seeds[-1] + 1))
        shown = f"{seeds[0]}-{seeds[-1]}" if in_a_row else ", ".join(map(str, seeds))
        return this + f"; the test figures are means over the {len(seeds)} judging seeds scored on the test tasks " \
                      f"({shown}), {among}."


def card_facts(summary: dict) -> CardFacts:
    """The card's facts from `search_summary.json`: the one place that reads the summary's answer fields
    (the `decision` block of raycse/driver/summary.py, its `winner`, `test_table` and `registered`)."""
    winner = summary.get("winner") or {}
    decision = summary.get("decision") or {}
    judged = bool(decision) and bool(winner.get("judged"))
    registered = summary.get("registered") or {}
    trial = next((t for t in summary.get("trials") or [] if t.get("trial_id") == registered.get("trial_id")), {})
    configs = {c.get("config_key"): c for c in decision.get("configs") or []}
    published = summary.get("published")
    if published is not None:
        judge = (configs.get(published.get("config_key")) or {}).get("judge") or {}
        published = {**published, **(judge.get("dev") or {})}
    figure = ({k: winner.get(k) for k in ("mean", "std", "n")} if judged
              else {"mean": trial.get("best_objective"), "std": None, "n": 1})
    test_rows = (summary.get("test_table") or {}).get("rows") or []
    winner_test = next((row["figures"] for row in test_rows if row.get("label") == "winner"), {})
    test_seeds = sorted({t.get("seed") for t in summary.get("trials") or [] if t.get("stage") == "judge"
                         and t.get("config_key") == winner.get("config_key") and t.get("test")})
    return CardFacts(
        experiment=summary["experiment"], base_model=str(summary.get("model")), family=winner.get("family", "?"),
        params=winner.get("params") or {}, is_published=bool(winner.get("is_published")),
        objective=summary.get("objective_description") or summary.get("objective") or "objective",
        budget=summary.get("budget", "?"), judged=judged, method=decision.get("method") or {}, winner=figure,
        versus_published=winner.get("versus_published"), published=published,
        baseline=(summary.get("baseline") or {}).get("objective"), test_table=test_table_rows(summary),
        winner_test=winner_test, verdict=summary.get("verdict") or winner.get("sentence") or "",
        searched=sum(1 for t in summary.get("trials") or [] if t.get("stage") == "search"),
        seed_noise=decision.get("seed_noise"), seed_noise_df=decision.get("seed_noise_df"),
        detectable=decision.get("detectable"), study_name=summary.get("study_name", "?"),
        optuna_storage=summary.get("optuna_storage", "?"), registered_model=summary.get("registered_model") or {},
        checkpoint=trial, checkpoint_rule=registered.get("rule", ""), answer=answer_block(summary),
        versus_published_dev=decision.get("versus_published_dev"), winner_test_seeds=test_seeds)


def max_steps_bound(settings: dict[str, str], steps: Any) -> str:
    """How a card says that max_steps ended the training (its epochs setting then bounded nothing, and is not shown).

    Args:
        settings: the training settings the parent run records (`best.*`, as strings).
        steps: the steps the checkpoint's run took.

    Returns:
        ' (max_steps: N training rows at batch B)' when the run took max_steps steps, else ''.

    Example:
        >>> max_steps_bound({"max_steps": "16", "batch_size": "16"}, 16)
        ' (max_steps: 256 training rows at batch 16)'
    """
    max_steps, batch = settings.get("max_steps"), settings.get("batch_size")
    if not max_steps or str(steps) != str(max_steps):
        return ""
    rows = f": {int(max_steps) * int(batch):,} training rows at batch {batch}" if str(batch or "").isdigit() else ""
    return f" (max_steps{rows})"
