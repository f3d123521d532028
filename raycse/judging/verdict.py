"""A search's answer in words (`verdict_sentences`): which set each figure comes from (dev for choosing, dev or
test for judging), how it was chosen and judged, and what the budget can resolve. Plain sentences, for the
printed answer, the summary file and the page."""
from __future__ import annotations

from raycse.judging.confirmation_plan import JUDGED_WORDS
from raycse.stats import format_interval, format_std


def _seed_range(seeds: tuple[int, ...]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"


def _method(d) -> str:
    plan, seeds = d.plan, d.seeds
    trials = f"{plan.num_samples} trials" if plan.num_samples else "trials"
    fresh = f"{plan.judge_seeds} {'further ' if plan.has_choosing else ''}fresh seeds ({_seed_range(seeds.judge)})"
    judged = (f"the winner and the published point were then trained on {fresh}, and only those judge them"
              if d.published is not None else f"the winner was then trained on {fresh}, and only those judge it")
    if plan.has_choosing:
        return (f"Method: chosen on dev, judged on fresh seeds and on "
                f"{JUDGED_WORDS[d.judged_on]}. The search stage's {trials} (seed {seeds.search}) "
                f"only ranked configurations by their best {plan.objective} (dev); the top {plan.top_k} were "
                f"trained on {plan.choose_seeds} fresh seeds ({_seed_range(seeds.choose)}) and the winner is the "
                f"best mean there (dev); {judged}.")
    return (f"Method: chosen by the search stage on dev, judged on fresh seeds and on "
            f"{JUDGED_WORDS[d.judged_on]}. The search stage's {trials} "
            f"(seed {seeds.search}) ranked configurations by their best {plan.objective} (dev) and its first is "
            f"the winner; {judged}.")


def verdict_sentences(d) -> list[str]:
    """The answer in words, sentence by sentence: the method, the winner, against the published point (dev), against
    the untouched model (test), what the budget can resolve, and the marks. `d` is a `decision.Decision`."""
    method = _method(d)
    winner = d.config(d.winner)
    if winner is None:
        return [method, "No configuration has a valid score on the choosing seeds: there is no winner."]
    where = f"{JUDGED_WORDS[d.judged_on]}, judging seeds, failed seeds counted at the worst value"
    return [method, _winner_figure(d, winner), *_against_published(d, winner, where), _against_baseline(d, where),
            *_failures_and_looks(d), *_resolution(d), *(f"Marked: {mark}." for mark in d.marks)]


def _winner_figure(d, winner) -> str:
    judge = winner.judge
    if judge is not None and judge.dev is not None:
        spread = f" ± {format_std(judge.dev.std, judge.dev.n)}" if judge.dev.std is not None else ""
        return (f"The winner scores {judge.dev.mean:.2f}{spread} on the {d.plan.objective} (dev, the data that "
                f"chose) over its judging seeds ({judge.count_text}).")
    return (f"The winner has no valid judging seed ({judge.count_text if judge else 'none run'}): "
            "nothing is judged.")


def _against_published(d, winner, where: str) -> list[str]:
    """The judged figure over the judging seeds, then its estimate adjusted for stopping and the dev figure, which
    is shown but judges nothing."""
    plan, versus = d.plan, d.versus_published
    parts = []
    if d.published is None:
        parts.append("The space names no published point: there is nothing to compare the winner with.")
    elif winner.is_published:
        chose = "on the choosing seeds" if plan.has_choosing else "in the search stage"
        parts.append(f"The published point is the winner: no searched configuration did better {chose}.")
    elif versus is None or versus.low is None:
        shown = f" ({format_interval(versus)})" if versus else ""
        parts.append(f"Against the published point ({JUDGED_WORDS[d.judged_on]}): fewer than two paired "
                     f"seeds{shown}, so no interval: not judged.")
    else:
        diff = format_interval(versus).replace("95% interval", "repeated 95% interval")
        if d.beats_published or d.below_published:
            word = "beats" if d.beats_published else "falls below"
            parts.append(f"The winner {word} the published point on {where}: winner - published {diff}.")
        else:
            reach = (f"; the judging stage could detect a difference of about {d.detectable:.2f} (80% power), "
                     "so a smaller one would go unseen" if d.detectable is not None else "")
            parts.append(f"The winner is not distinguishable from the published point on {where}: winner - "
                         f"published {diff}, which covers 0{reach}.")
    estimate = d.estimate_published
    if estimate is not None and estimate.adjusted and not winner.is_published:
        parts.append(f"Point estimate of winner - published at the stopping look: {estimate.text}.")
    if d.versus_published_dev is not None and not winner.is_published:
        parts.append(f"On the {plan.objective} (dev, the data that chose: shown, not judged): winner - published "
                     f"{format_interval(d.versus_published_dev)}.")
    return parts


def _against_baseline(d, where: str) -> str:
    plan = d.plan
    base = d.baseline.test.get(plan.test_key)
    if d.versus_baseline is None:
        why = "no test figures: the test tasks were off" if d.winner_test is None else "it has no test figure"
        return (f"Against the untouched model: not judged ({why}). On dev it is not compared: a trained "
                "run's dev figure is the best of a curve, the untouched model's one evaluation.")
    if not d.baseline_judged:
        why = " (only 1 judging seed scored the test tasks: test_seeds 1)" if plan.judging_seeds_on_test == 1 else ""
        return (f"Against the untouched model ({plan.test_label}, test: {base:.2f}): winner - untouched "
                f"{format_interval(d.versus_baseline)}; not judged{why}.")
    diff = format_interval(d.versus_baseline).replace("95% interval", "repeated 95% interval")
    if d.beats_baseline:
        return f"The winner beats the untouched model ({base:.2f}) on {where}: winner - untouched {diff}."
    return (f"The winner is not shown to beat the untouched model ({base:.2f}) on {where}: winner - "
            f"untouched {diff}; training may not have helped at this budget.")


def _failures_and_looks(d) -> list[str]:
    parts = []
    lost = [f"{'the winner' if key == d.winner else 'the published point'} {rate.text}"
            for key, rate in d.failures.items() if rate.failed]
    if lost:
        parts.append("Failures on the judging seeds: " + "; ".join(lost) + ".")
    for comparator in d.fails_more:
        name = "the untouched model (which cannot fail)" if comparator is None else "the published point"
        parts.append(f"The winner fails more often than {name} by more than chance (Fisher exact, one-sided 2.5%): "
                     "it cannot beat it, whatever its surviving seeds show.")
    if len(d.looks) > 1 and d.look:
        why = {"beats": "a boundary was crossed", "falls below": "a boundary was crossed",
               "futility": "the difference seen is too small for more seeds to make it detectable"}.get(d.stopped)
        parts.append(f"Judging looked after {', '.join(map(str, d.looks))} seeds (Hwang-Shih-DeCani spending, "
                     f"2.5% each side) and " + (f"stopped at look {d.look} ({why})." if why else
                                                f"is at look {d.look}."))
    return parts


def _resolution(d) -> list[str]:
    """What the budget can resolve: the seed noise, the smallest detectable difference, and the CPU budget's
    caveat."""
    plan = d.plan
    if d.seed_noise is not None:
        noise = (f"Seed noise of the {plan.objective} (dev, pooled over the choosing and judging groups): "
                 f"{d.seed_noise:.2f}, df = {d.seed_noise_df}")
        if d.detectable is not None:
            noise += (f"; the smallest winner - published difference the judging stage could detect (two-sided 95%, "
                      f"80% power, n = {d.detectable_n}): {d.detectable:.2f}")
        parts = [noise + "."]
    else:
        parts = ["Seed noise: no configuration has two valid seeds in a block, so it is not known."]
    if plan.budget == "cpu":
        reach = (f", which can detect only differences of about {d.detectable:.2f} or more"
                 if d.detectable is not None else "")
        on_test = (f" (the test tasks scored on {plan.judging_seeds_on_test} of them)"
                   if plan.judging_seeds_on_test < plan.judge_seeds else "")
        parts.append(f"CPU budget: {plan.judge_seeds} judging seed{'s' if plan.judge_seeds > 1 else ''}{on_test}"
                     f"{reach}: a demonstration of the mechanism, not a decision.")
    return parts
