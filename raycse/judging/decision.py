"""The decision behind a search's answer: which configuration wins, and whether it beats what it is set against.

A figure that chose something is never the figure that judges it. The best of several configurations, each
scored on one seed, is the luckiest of them as much as the best; if its own figure is then counted in its
mean, the answer is biased upwards and an interval quoted as if it had been the only comparison is too narrow
(simulated on the full budget: +1.0 seed-std of bias, "beats the published point" 8.9% of the time at a
nominal 2.5%; `benchmarks/selection_bias.py`). So a search's answer separates choosing from judging:

    search stage   every trial trains with the base seed (42). Its figures only RANK configurations
                   (`rank_for_confirmation`): finished trials first, by their best dev objective over the whole
                   run; then, if fewer than top_k finished, the ASHA-stopped ones, by their best value up to the
                   last rung step that every one of them reached, so that all are read at the same budget.
                   Diverged and failed trials are never ranked.
    choosing       when top_k > 1, the top_k configurations are trained on `choose_seeds` fresh seeds
                   (base + 1, ...); the winner is the best mean over its valid seeds there (`choose_winner`).
                   When top_k == 1 there is no choosing block: the search stage chose the winner.
    judging        the winner and the published point (the COMPARATOR, a candidate only if it ranked among the
                   top_k itself) are trained on `judge_seeds` further fresh seeds. Only these seeds judge:
                   winner - published and winner - untouched model on the JUDGED figure (one no choice
                   read: the seven-task test average, or the held-out pairs), failed seeds counted against their
                   configuration, in sequential looks with repeated 95% intervals (raycse/judging/judgment.py);
                   the reported estimate is adjusted for early stopping (sequential_estimate.py).

Diverged and failed seeds never enter a choosing or dev mean: they are counted (`n = 4 of 5, 1 diverged`), and a
configuration with fewer valid seeds than planned is marked. The seed noise of the search (the within-configuration std
pooled over every choosing and judging group of two or more valid values) is reported with its degrees of
freedom, and with it the smallest difference the judging stage could detect (power.py).

`decide` is the one function every view of an answer calls (the printed answer, the parent run, the summary,
the report page): seed-level scores in (seed_scores.py, under a plan of confirmation_plan.py), winner, intervals,
flags and verdict out. It recomputes the winner from the choosing block's figures itself, so that nothing else has
to be trusted to have chosen it. Pure: no Ray, MLflow, torch or I/O.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from raycse import stats
from raycse.judging import judgment, sequential_estimate
from raycse.judging.confirmation_plan import TEST, ConfirmPlan, SeedBlocks
from raycse.judging.judgment import FailureRate
from raycse.judging.power import smallest_detectable
from raycse.judging.seed_scores import ConfigScores, SeedScore, UntouchedFigures
from raycse.judging.sequential_estimate import StoppingEstimate
from raycse.judging.verdict import verdict_sentences
from raycse.records import CHOOSE, DIVERGED, JUDGE
from raycse.stats import Interval, mean_interval

BLOCK_WORDS = {CHOOSE: "choosing", JUDGE: "judging"}


# ------------------------------------------------------------------------------------------ figures out
@dataclass(frozen=True)
class BlockSummary:
    """One configuration over one block of seeds: what was planned, what counted, and the figures of what counted."""

    block: str
    planned: int
    seeds: tuple[int, ...]  # the valid seeds, in block order
    values: tuple[float, ...]  # their dev values
    diverged: int
    failed: int
    not_run: int
    dev: Interval | None
    test: dict[str, Interval]

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def short(self) -> bool:
        """Fewer valid seeds than planned: the configuration is marked wherever it is shown."""
        return self.n < self.planned

    @property
    def count_text(self) -> str:
        """`n = 4 of 5, 1 diverged`."""
        lost = [(self.diverged, "diverged"), (self.failed, "failed"), (self.not_run, "not run")]
        return ", ".join([f"n = {self.n} of {self.planned}"] + [f"{k} {what}" for k, what in lost if k])


@dataclass(frozen=True)
class ConfigSummary:
    key: str
    search_rank: int | None
    is_published: bool
    is_winner: bool
    choose: BlockSummary | None
    judge: BlockSummary | None


@dataclass(frozen=True)
class Decision:
    """A search's answer. The flags are exactly the bounds the verdict states, all on the JUDGED figure (one that took
    part in no choice: `judged_on`), with failed judging seeds counted against their configuration:

    beats_published   the repeated interval of winner - published (judging seeds, paired) lies above 0
    below_published   ... lies below 0
    beats_baseline    the repeated interval of winner - untouched model (judging seeds) lies above 0; False as well
                      when not judged (`baseline_judged` False)
    look              the look the judging block stopped at (1-based; `looks` the planned ones); `stopped` why:
                      "beats", "falls below", "futility" or None (ran to the end)
    """

    plan: ConfirmPlan
    seeds: SeedBlocks
    winner: str | None
    published: str | None
    configs: tuple[ConfigSummary, ...]
    versus_published: Interval | None  # the judged figure, judging seeds: winner - published, paired, the winner's
    # failures at the worst value (the interval that judges "beats"; "falls below" is judged on its mirror)
    versus_published_test: dict[str, Interval]  # the same on each test task (valid pairs only)
    winner_test: Interval | None  # the winner's test_key figure over its valid judging seeds
    baseline: UntouchedFigures
    seed_noise: float | None  # pooled within-configuration std of the dev objective
    seed_noise_df: int
    detectable: float | None  # the smallest detectable difference of the judging stage
    detectable_n: int | None  # the pairs it is computed for
    beats_published: bool
    below_published: bool
    beats_baseline: bool
    baseline_judged: bool
    marks: tuple[str, ...]
    verdict: tuple[str, ...]
    judged_on: str = TEST
    versus_published_dev: Interval | None = None  # dev, the data that chose: shown, never judges
    versus_baseline: Interval | None = None  # the judged figure: winner - untouched model, failures in
    failures: dict[str, FailureRate] = field(default_factory=dict)  # judging-block failure rate by configuration
    look: int = 0
    looks: tuple[int, ...] = ()
    stopped: str | None = None
    fails_more: tuple[str | None, ...] = ()  # the comparators (None: the untouched model) the winner fails more than
    estimate_published: StoppingEstimate | None = None  # winner - published, adjusted for early stopping

    @property
    def sentence(self) -> str:
        return " ".join(self.verdict)

    def config(self, key: str | None) -> ConfigSummary | None:
        return next((c for c in self.configs if c.key == key), None)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, and the verdict as one string."""
        return {**asdict(self), "sentence": self.sentence}


# ------------------------------------------------------------------------------------------ the decision
def choose_winner(configs: Sequence[ConfigScores], plan: ConfirmPlan) -> str | None:
    """The winner: without a choosing block (top_k == 1), the search stage's first; otherwise the best mean over
    the choosing seeds among the top_k (ties to the better search rank); None when none has a valid seed.

    Every candidate's mean is over all `choose_seeds` seeds: a seed it lost (diverged, failed or not run) takes the
    worst valid value any candidate scored in the block, so a configuration never wins on fewer values than its
    rivals, and failing counts against it."""
    candidates = [c for c in configs if c.search_rank is not None and c.search_rank <= plan.top_k]
    if not plan.has_choosing:
        return min(candidates, key=lambda c: c.search_rank).key if candidates else None
    seeds = plan.seeds().choose
    valid = {c.key: {s.seed: s.dev for s in c.choose if s.valid} for c in candidates}
    observed = [v for values in valid.values() for v in values.values()]
    if not observed:
        return None
    worst = min(observed)
    means = [(-sum(valid[c.key].get(seed, worst) for seed in seeds) / len(seeds), c.search_rank, c.key)
             for c in candidates if valid[c.key]]
    return min(means)[2] if means else None


def decide(configs: Sequence[ConfigScores], *, published: str | None, baseline: UntouchedFigures,
           plan: ConfirmPlan) -> Decision:
    """The answer from the seed-level scores of every configuration in every block (see the module docstring).

    `configs`: the top_k candidates (their search ranks and choosing runs) and the published point, each with
    its judging runs; `published`: the published point's key (None when the space names none). A run of a seed
    outside its block (the search stage's seed among them) is refused with ValueError.
    """
    keys = [c.key for c in configs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a configuration appears twice: {keys}")
    seeds = plan.seeds()
    winner = choose_winner(configs, plan)
    summaries = _summaries(configs, plan, seeds, winner, published)
    by_key = {c.key: c for c in configs}
    w, p = by_key.get(winner), by_key.get(published)
    judged_w = _judged_by_seed(w, plan, seeds.judge)
    seeds_run = len({s.seed for c in (w, p) if c is not None for s in c.judge if s.seed in seeds.judge})
    look = judgment.look_of(plan.design_looks, seeds_run)
    seed_noise, seed_noise_df = _seed_noise(summaries)

    versus = _versus_published(w, p, plan, seeds.judge, judged_w, look)
    failures, fails_more = _failure_rates(summaries, winner, published)
    beats_published = bool(versus.judged and versus.judged.low is not None and versus.judged.low > 0
                           and not fails_more.get(published))
    below_published = bool(versus.mirror and versus.mirror.high is not None and versus.mirror.high < 0
                           and not (failures.get(published) and judgment.fails_more(failures[published],
                                                                                   failures.get(winner))))

    winner_summary = next((s for s in summaries if s.is_winner), None)
    winner_test = winner_summary.judge.test.get(plan.test_key) if winner_summary and winner_summary.judge else None
    base_test = baseline.test.get(plan.test_key)
    versus_baseline = _versus_baseline(judged_w, base_test, plan, look)
    baseline_judged = versus_baseline is not None and versus_baseline.low is not None
    beats_baseline = bool(baseline_judged and versus_baseline.low > 0 and not fails_more.get(None))

    detectable_n = versus.judged.n if versus.judged is not None else plan.judge_seeds
    detectable = smallest_detectable(seed_noise, detectable_n)
    below_baseline = bool(versus_baseline and versus_baseline.high is not None and versus_baseline.high < 0)
    futile_b = judgment.futility_t(judged_w, base_test) if base_test is not None else None
    stopped = judgment.stop_reason((versus.judged, beats_published, below_published, versus.futility),
                                   (versus_baseline, beats_baseline, below_baseline, futile_b), plan.design_looks, look)

    ended = bool(stopped) or look == len(plan.design_looks)
    estimate = (sequential_estimate.stopping_estimate(versus.pairs, plan.design_looks, ended)
                if versus.judged is not None else None)
    decision = Decision(
        plan=plan, seeds=seeds, winner=winner, published=published, configs=tuple(summaries),
        versus_published=versus.judged, versus_published_test=versus.test, winner_test=winner_test,
        baseline=UntouchedFigures(baseline.dev, dict(baseline.test)), seed_noise=seed_noise,
        seed_noise_df=seed_noise_df,
        detectable=detectable, detectable_n=detectable_n if detectable is not None else None,
        beats_published=beats_published, below_published=below_published, beats_baseline=beats_baseline,
        baseline_judged=baseline_judged, marks=tuple(_marks(summaries)), verdict=(), judged_on=plan.judge_on,
        versus_published_dev=versus.dev, versus_baseline=versus_baseline, failures=failures, look=look,
        looks=plan.design_looks, stopped=stopped, fails_more=tuple(k for k, v in fails_more.items() if v),
        estimate_published=estimate)
    return replace(decision, verdict=tuple(verdict_sentences(decision)))


def _summaries(configs: Sequence[ConfigScores], plan: ConfirmPlan, seeds: SeedBlocks, winner: str | None,
               published: str | None) -> list[ConfigSummary]:
    """Each configuration over its blocks: a choosing block for the top_k candidates, a judging block for the
    winner, the published point and any other configuration that was judged."""
    summaries = []
    for config in configs:
        if config.choose and not plan.has_choosing:
            raise ValueError(f"configuration {config.key!r} has choosing runs but the plan has no choosing block")
        summaries.append(ConfigSummary(
            key=config.key, search_rank=config.search_rank, is_published=config.key == published,
            is_winner=config.key == winner,
            choose=_block_summary(CHOOSE, config.choose, seeds.choose, config.key) if plan.has_choosing
            and config.search_rank is not None and config.search_rank <= plan.top_k else None,
            judge=_block_summary(JUDGE, config.judge, seeds.judge, config.key) if config.judge
            or config.key in (winner, published) else None))
    return summaries


def _block_summary(block: str, scores: Sequence[SeedScore], seeds: tuple[int, ...], key: str) -> BlockSummary:
    given = {}
    for score in scores:
        if score.seed not in seeds:
            raise ValueError(f"configuration {key!r}: seed {score.seed} is not one of the {block} block's seeds "
                             f"{list(seeds)} (a search-stage run is never counted in a choosing or judging mean)")
        if score.seed in given:
            raise ValueError(f"configuration {key!r}: seed {score.seed} appears twice in the {block} block")
        given[score.seed] = score
    valid = [given[s] for s in seeds if s in given and given[s].valid]
    diverged = sum(1 for s in given.values() if s.status == DIVERGED)
    tasks = sorted({task for s in valid for task in s.test})
    test = {}
    for task in tasks:
        values = [s.test[task] for s in valid if task in s.test and math.isfinite(s.test[task])]
        if values:
            test[task] = mean_interval(values)
    return BlockSummary(
        block=block, planned=len(seeds), seeds=tuple(s.seed for s in valid), values=tuple(s.dev for s in valid),
        diverged=diverged, failed=len(given) - len(valid) - diverged, not_run=len(seeds) - len(given),
        dev=mean_interval([s.dev for s in valid]) if valid else None, test=test)


def _judged_by_seed(config: ConfigScores | None, plan: ConfirmPlan, seeds: tuple[int, ...]) -> dict[int, float | None]:
    """The judged figure by judging seed: a value for a valid run that has one, None for a run that diverged or
    failed (counted against it), absent for a seed not run and for a valid run without the figure (test_seeds)."""
    out: dict[int, float | None] = {}
    for score in (config.judge if config is not None else ()):
        if score.seed not in seeds:
            continue
        if not score.valid:
            out[score.seed] = None
        elif plan.judged(score) is not None:
            out[score.seed] = plan.judged(score)
    return out


def _seed_noise(summaries: Sequence[ConfigSummary]) -> tuple[float | None, int]:
    """The pooled within-configuration std of the dev objective over every choosing and judging group of two or
    more valid values, and its degrees of freedom."""
    groups = [block.values for s in summaries for block in (s.choose, s.judge) if block is not None and block.n > 1]
    return stats.pooled_std(groups), sum(len(g) - 1 for g in groups)


@dataclass(frozen=True)
class _VersusPublished:
    """Winner - published over the judging seeds; empty without a winner or a published point, or when they are one."""

    judged: Interval | None = None  # the judged figure, the winner's failures at the worst value: judges "beats"
    mirror: Interval | None = None  # the same, the published point's failures at the worst value: "falls below"
    futility: float | None = None  # the futility t of the judged figure
    pairs: list[float] = field(default_factory=list)  # over the seeds both ran without failing: the estimate's
    dev: Interval | None = None  # dev, the data that chose: shown, never judges
    test: dict[str, Interval] = field(default_factory=dict)  # each test task, valid pairs only


def _versus_published(w: ConfigScores | None, p: ConfigScores | None, plan: ConfirmPlan, seeds: tuple[int, ...],
                      judged_w: dict[int, float | None], look: int) -> _VersusPublished:
    if w is None or p is None or w is p:
        return _VersusPublished()
    judged_p = _judged_by_seed(p, plan, seeds)
    tasks = sorted({t for s in w.judge for t in s.test} & {t for s in p.judge for t in s.test})
    by_task = {task: _paired(w.judge, p.judge, lambda s, task=task: s.test.get(task)) for task in tasks}
    return _VersusPublished(
        judged=_sequential_interval(judgment.paired_with_failures(judged_w, judged_p, against="a"), plan, look),
        mirror=_sequential_interval(judgment.paired_with_failures(judged_w, judged_p, against="b"), plan, look),
        futility=judgment.futility_t(judged_w, judged_p), pairs=judgment.valid_pairs(judged_w, judged_p),
        dev=_paired(w.judge, p.judge, lambda s: s.dev),
        test={task: interval for task, interval in by_task.items() if interval is not None})


def _paired(a: Sequence[SeedScore], b: Sequence[SeedScore], figure) -> Interval | None:
    """mean(a - b) over the seeds where both have the figure; `figure` reads it from a valid SeedScore."""
    of_b = {s.seed: figure(s) for s in b if s.valid}
    diffs = [figure(s) - of_b[s.seed] for s in a if s.valid and of_b.get(s.seed) is not None
             and figure(s) is not None]
    return mean_interval(diffs) if diffs else None


def _sequential_interval(diffs: Sequence[float], plan: ConfirmPlan, look: int) -> Interval | None:
    """The mean of the differences with its repeated confidence interval at `look`, the look the judging seeds run
    reach (the fixed design's two-sided 95% t interval when the plan has one look)."""
    if not diffs:
        return None
    plain = mean_interval(diffs)
    if plain.std is None:
        return plain
    half = judgment.t_boundary(plan.design_looks, plain.n, look=look) * plain.std / math.sqrt(plain.n)
    return replace(plain, low=plain.mean - half, high=plain.mean + half)


def _failure_rates(summaries: Sequence[ConfigSummary], winner: str | None,
                   published: str | None) -> tuple[dict[str, FailureRate], dict[str | None, bool]]:
    """The judging-block failure rate of each judged configuration, and whether the winner fails more often than
    the untouched model (None, which cannot fail) and than the published point."""
    failures = {s.key: judgment.wilson(s.judge.diverged + s.judge.failed, s.judge.planned - s.judge.not_run)
                for s in summaries if s.judge is not None}
    fails_more = {None: judgment.fails_more(failures[winner], None)} if winner in failures else {}
    if winner in failures and published in failures and winner != published:
        fails_more[published] = judgment.fails_more(failures[winner], failures[published])
    return failures, fails_more


def _versus_baseline(judged_w: dict[int, float | None], base_test: float | None, plan: ConfirmPlan,
                     look: int) -> Interval | None:
    """Winner - untouched model on the judged figure, the winner's failures at the worst value; None without the
    untouched model's figure or a judged winner run."""
    if base_test is None or not any(v is not None for v in judged_w.values()):
        return None
    return _sequential_interval(judgment.against_fixed_with_failures(judged_w, base_test), plan, look)


def _marks(summaries: Sequence[ConfigSummary]) -> list[str]:
    marks = []
    for summary in summaries:
        for block in (summary.choose, summary.judge):
            if block is not None and block.short:
                marks.append(f"{_label(summary)} on the {BLOCK_WORDS[block.block]} seeds: {block.count_text} "
                             "(fewer than planned)")
    return marks


def _label(summary: ConfigSummary) -> str:
    if summary.is_winner:
        return "the winner" + (" (the published point)" if summary.is_published else "")
    if summary.is_published:
        return "the published point"
    return f"configuration {summary.key} (search rank {summary.search_rank})"
