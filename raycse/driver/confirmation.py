"""Which configurations the confirmation stage retrains over seeds, and how they compare once it has.

The top-K configurations by search score and the published point are trained until each has S seeds (base seed,
base + 1, ...; a search run that trained its full budget counts as the base seed's run of its configuration).
The answer is the configuration with the best mean, with its paired difference to the published point.
"""
from __future__ import annotations

import math

from raycse import stats
from raycse.driver.outcome import Baseline, ConfirmedConfig, PlannedConfig, TrialRecord
from raycse.records import DIVERGED, FINISHED
from raycse.space import Confirm, SearchSpace


def confirm_plan(plan: SearchSpace, searched: list[TrialRecord]) -> list[PlannedConfig]:
    """The configurations to confirm and the seeds each still needs."""
    confirm = plan.confirm or Confirm(top_k=1, seeds=1)
    seeds = [plan.base.seed + i for i in range(confirm.seeds)]
    ranked: list[TrialRecord] = []
    for record in sorted((r for r in searched if r.best_objective is not None and r.status != DIVERGED),
                         key=lambda r: (-r.best_objective, r.trial_id)):
        if record.config_key not in {r.config_key for r in ranked}:
            ranked.append(record)
    chosen = [(record.config_key, plan.sampled_of(record.family, record.params), rank)
              for rank, record in enumerate(ranked[:max(confirm.top_k, 1)], start=1)]
    # the published point to beat: in a conditional space (all.yaml), that of the leading configuration's family
    published = plan.published_sampled(ranked[0].family if ranked and plan.conditional else None)
    if published is not None and plan.config_key(published) not in {key for key, _, _ in chosen}:
        chosen.append((plan.config_key(published), published, None))
    entries = []
    for key, sampled, rank in chosen:
        finished = {r.seed for r in searched if r.config_key == key and r.status == FINISHED}
        entries.append(PlannedConfig(
            config_key=key, sampled=sampled, search_rank=rank,
            is_published=published is not None and key == plan.config_key(published),
            seeds=seeds, seeds_to_run=[s for s in seeds if s not in finished] if plan.confirm else []))
    return entries


def confirmation(plan: SearchSpace, entries: list[PlannedConfig], searched: list[TrialRecord],
                 confirmed: list[TrialRecord]) -> list[ConfirmedConfig]:
    """Each confirmed configuration's values over seeds, and its paired difference to the published point."""
    runs_of = {}
    for record in [r for r in searched if r.status == FINISHED] + confirmed:
        runs_of.setdefault((record.config_key, record.seed), record)
    configs = []
    for entry in entries:
        seeds, values, runs = [], [], []
        seeds_wanted = entry.seeds if plan.confirm else [plan.base.seed]
        for seed in seeds_wanted:
            run = runs_of.get((entry.config_key, seed))
            if run is None and not plan.confirm:  # no confirmation: the search run itself, finished or not
                run = next((r for r in searched if r.config_key == entry.config_key), None)
            if run is not None and run.best_objective is not None:
                seeds.append(seed)
                values.append(run.best_objective)
                runs.append(run)
        configs.append(ConfirmedConfig(
            config_key=entry.config_key, family=plan.family_of(entry.sampled), params=plan.params_of(entry.sampled),
            is_published=entry.is_published, search_rank=entry.search_rank, seeds=seeds, values=values,
            runs=runs, summary=stats.summarise(values) if values else None))
    published = next((c for c in configs if c.is_published), None)
    if published is not None:
        for config in configs:
            if config is published:
                continue
            common = [s for s in config.seeds if s in published.seeds]
            if common:
                config.diff_to_published = stats.paired_interval(
                    [config.values[config.seeds.index(s)] for s in common],
                    [published.values[published.seeds.index(s)] for s in common])
    return configs


def winner_of(configs: list[ConfirmedConfig]) -> ConfirmedConfig | None:
    """The configuration with the best mean over its seeds."""
    return max((c for c in configs if c.summary), key=lambda c: c.summary.mean, default=None)


def verdict(winner: ConfirmedConfig | None, baseline: Baseline, plan: SearchSpace) -> str:
    """The answer in words: the winner against the published point and against the untouched model."""
    if winner is None:
        return "No configuration produced a score: see the failed trials."
    mean = winner.summary.mean
    over = f"over {winner.summary.n} seed{'s' if winner.summary.n > 1 else ''}" if plan.confirm else "from one seed"
    parts = []
    if winner.is_published:
        parts.append(f"The published point is the best configuration (mean {mean:.2f} {over}); no searched "
                     "configuration beat it.")
    elif winner.diff_to_published is None:
        parts.append(f"The winner scores a mean of {mean:.2f} {over}; the published point has no score to compare.")
    else:
        diff = winner.diff_to_published
        if diff.low is None:
            parts.append(f"The winner scores {mean:.2f} {over}, {diff.mean:+.2f} against the published point on the "
                         "same seed; with one seed there is no interval, so it is not distinguishable from the "
                         "published point at this budget.")
        elif diff.covers_zero:
            parts.append(f"The winner (mean {mean:.2f} {over}) is not distinguishable from the published point at "
                         f"this budget: paired difference {diff.mean:+.2f}, 95% interval [{diff.low:+.2f}, "
                         f"{diff.high:+.2f}] covers 0.")
        else:
            better = "beats" if diff.mean > 0 else "falls below"
            parts.append(f"The winner (mean {mean:.2f} {over}) {better} the published point: paired difference "
                         f"{diff.mean:+.2f}, 95% interval [{diff.low:+.2f}, {diff.high:+.2f}].")
    base = baseline.objective
    # The untouched model has no seed: its score is a constant, so the winner's own interval decides.
    low = None
    if winner.summary.std is not None:
        low = mean - stats.t_quantile(winner.summary.n) * winner.summary.std / math.sqrt(winner.summary.n)
    if mean > base and (low is None or low > base):
        parts.append(f"It is {mean - base:+.2f} above the untouched model ({base:.2f})"
                     + (f", beyond its seed spread (95% interval of its mean from {low:.2f})." if low else "."))
    elif mean > base:
        parts.append(f"It is {mean - base:+.2f} above the untouched model ({base:.2f}), within its seed spread "
                     f"(95% interval of its mean from {low:.2f}): training may not have helped at this budget.")
    else:
        parts.append(f"No configuration beats the untouched model ({base:.2f}): training did not help at this "
                     "budget. The registered model is the winner's best checkpoint, not the untouched model.")
    if not plan.confirm:
        parts.append("No confirmation stage ran: one seed per configuration, and in this field one seed moves STS "
                     "figures by up to ~2 points, so differences below that may be noise.")
    return " ".join(parts)
