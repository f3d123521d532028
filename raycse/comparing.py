"""The conductor of `raycse compare`: one search per loss with the same budget, then every loss's winner (and each
loss's published point) judged together on the same judging seeds (raycse/judging/comparison.py).

Each loss's search is an ordinary search (raycse/driver/run.py: setup, baseline, search, choose, judge, test,
record, report), in an MLflow experiment of its own named COMPARISON-LABEL, so that `raycse report`, `raycse load`
and `raycse export` read it as they read any search. Two settings make the searches of a comparison one design:

- the budget: every space runs the same trials, steps, choosing block and judging seeds (checked before anything
  starts: spaces that disagree are refused);
- the judging: one look on fixed seeds, every judging seed scored on the seven test tasks (SearchOptions.comparison).
  The judging seeds follow from the base seed and the budget alone (raycse.judging.confirmation_plan.seed_blocks), so
  every loss is judged on the very same seeds, none of which chose anything; the conductor checks it.

Sequential looks are not used across the family: a loss's judging block may stop early only for its own judgment,
which would leave the family's pairs on different seeds; boundaries for Holm's step-down over looks are not built.

The comparison's own record is an MLflow parent run in the experiment COMPARISON, with one child run per loss
search (tags in raycse/records.py), and compare_summary.json (on the parent run and in the output folder).
`--resume` continues that record: each loss's search is read back, resumed or started, as it stands in its stores
(raycse/driver/standing.py).
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.driver.outcome import SearchOutcome
from raycse.driver.standing import Standing
from raycse.driver.state import SearchOptions, say
from raycse.errors import ConfigError
from raycse.judging import comparison
from raycse.records import (
    BUDGET_TAG,
    COMPARE_LOSS_TAG,
    COMPARE_TAG,
    DIFF_PREFIX,
    FINISHED,
    JUDGE,
    LOSS_PARENT_RUN_TAG,
    LOSS_SEARCH_TAG,
    SEVEN_TASKS,
    TEST_KEYS,
)
from raycse.settings.space import SearchSpace

COMPARE_SUMMARY_FILE = "compare_summary.json"
AGREE_ON = ("model", "corpus", "sup_data", "objective", "objective_columns", "max_sentences")
SAME_BUDGET = (("num_samples", lambda p: p.num_samples), ("max_steps", lambda p: p.base.max_steps),
               ("epochs", lambda p: p.base.epochs), ("seed", lambda p: p.base.seed),
               ("top_k", lambda p: p.confirm.top_k), ("choose_seeds", lambda p: p.confirm.choose_seeds),
               ("judge_seeds", lambda p: p.confirm.judge_seeds))
COMPARED_ON = "the seven-task STS test average"


@dataclass
class ComparisonOutcome:
    """A finished comparison: its name, parent run, each loss's search outcome, and the family's judgment."""

    name: str
    parent_run_id: str
    searches: dict[str, SearchOutcome]
    pairs: list[comparison.PairJudgment]
    summary: dict[str, Any] = field(default_factory=dict)
    summary_path: str = ""


def label_of(space: SearchSpace) -> str:
    """A loss's name in the comparison: its space file's name (focal.yaml: focal)."""
    return Path(space.path).stem


def loss_experiment(name: str, label: str) -> str:
    return f"{name}-{label}"


def budgets_to_check(budget: str) -> tuple[str, ...]:
    """The budgets a comparison may run under: the one named; for "auto", this machine's (a GPU: full) when Ray
    runs here, both when it joins a cluster (RAY_ADDRESS), whose resources only it knows."""
    if budget != "auto":
        return (budget,)
    if os.environ.get("RAY_ADDRESS"):
        return ("cpu", "full")
    import torch

    return ("full",) if torch.cuda.is_available() else ("cpu",)


def check_comparison(spaces: list[SearchSpace], options: SearchOptions) -> list[str]:
    """The labels of the spaces, after every check that needs nothing started: at least two spaces, no space twice,
    one loss per space, a confirmation stage in each, the same model, corpus and objective, and the same budget
    under every budget the comparison may run (`budgets_to_check`). A ConfigError naming the culprit otherwise."""
    if len(spaces) < 2:
        raise ConfigError.at("space", f"a comparison needs at least two spaces, got {len(spaces)}")
    labels = [label_of(space) for space in spaces]
    paths = [os.path.realpath(space.path) for space in spaces]
    for i, (label, path) in enumerate(zip(labels, paths)):
        if label in labels[:i] or path in paths[:i]:
            raise ConfigError.at("space", f"{spaces[i].path!r} is given twice (or two files share the name "
                                          f"{label!r}): each loss once")
    for space in spaces:
        if space.conditional:
            raise ConfigError.at("space", f"{space.path!r} searches {len(space.families)} losses at once "
                                          f"({', '.join(space.families)}): a comparison takes one loss per space")
        if space.confirm is None:
            raise ConfigError.at("space", f"{space.path!r} has no confirmation stage (search.confirm: null): a "
                                          "comparison judges each loss's winner on fresh seeds")
    first = spaces[0]
    for space in spaces[1:]:
        for key in AGREE_ON:
            if getattr(space.base, key) != getattr(first.base, key):
                raise ConfigError.at("space", f"the spaces disagree on {key}: {getattr(first.base, key)!r} in "
                                              f"{first.path!r}, {getattr(space.base, key)!r} in {space.path!r} (a "
                                              "comparison trains every loss on the same model, corpus and objective)")
    from raycse.driver.layout import space_to_run

    for budget in budgets_to_check(options.budget):
        to_run = [space_to_run(space, options, budget) for space in spaces]
        for space in to_run:
            if space.confirm is None:
                raise ConfigError.at("space", f"{space.path!r}: its {budget} budget has no confirmation stage")
        for key, value in SAME_BUDGET:
            for space in to_run[1:]:
                if value(space) != value(to_run[0]):
                    flag = f" (--{key.replace('_', '-')} sets it for every space)" if key in (
                        "num_samples", "choose_seeds", "judge_seeds") else ""
                    raise ConfigError.at("space", f"the spaces' {budget} budgets disagree on {key}: "
                                                  f"{value(to_run[0])!r} in {to_run[0].path!r}, {value(space)!r} in "
                                                  f"{space.path!r}: a comparison gives every loss the same budget"
                                                  f"{flag}")
        if to_run[0].confirm.judge_seeds < 2:
            raise ConfigError.at("judge_seeds", "a comparison needs at least 2 judging seeds (an interval)")
    return labels


def run_comparison(spaces: list[SearchSpace], options: SearchOptions, name: str, output_dir: Path,
                   log: Callable[[str], None] | None = None) -> ComparisonOutcome:
    """Check everything, then run each loss's search and judge the family (`log` receives the progress lines: None
    prints them); writes compare_summary.json.

    With options.resume, the comparison `name` continues where a stop (a signal, a kill) left it: each loss's
    search that finished is read back from its records, the one the stop cut short continues (a search's
    `--resume`), those not started start; nothing is trained twice, and the answer is the undisturbed one."""
    from raycse.tracking.tracker import Tracker

    log = log or say
    options = dataclasses.replace(options, comparison=True)
    labels = check_comparison(spaces, options)
    renamed = [dataclasses.replace(space, experiment=loss_experiment(name, label))
               for space, label in zip(spaces, labels)]
    record, standings = comparison_standings(renamed, labels, options, name)  # before anything is created
    tracker = Tracker(options.tracking_uri, name, artifact_location=options.artifact_location)
    if record is None:
        parent = tracker.start_run(name, tags={COMPARE_TAG: name})
        tracker.log_params(parent, {"losses": ",".join(labels), "budget": options.budget,
                                    "space_files": ",".join(os.path.basename(s.path) for s in spaces)})
    else:
        parent = record.info.run_id
        tracker.reopen_run(parent)
        log(f"Resuming comparison {name!r} (MLflow parent run {parent}): "
            + "; ".join(f"{label} {standings[label].state}" for label in labels) + ".")
    try:
        return _run(renamed, labels, options, name, output_dir, tracker, parent, log, standings)
    except BaseException:
        tracker.mark_orphans_killed(parent)  # the loss's child run, open when the stop came
        tracker.end_run(parent, "KILLED")
        raise


def comparison_standings(renamed: list[SearchSpace], labels: list[str], options: SearchOptions,
                         name: str) -> tuple[Any, dict[str, Standing]]:
    """The comparison's parent run, if the store holds one, and where each loss's search stands, every search's
    stores and inputs checked: a new comparison's searches all new; a resumed one's the comparison's own, each
    finished search read back (raycse/driver/standing.py). Reads only; a ConfigError naming the culprit otherwise.

    Returns:
        (the parent run or None, {label: Standing}).

    Example:
        record, standings = comparison_standings(renamed, ["simcse", "focal"], options, "compare-simcse-focal")
    """
    from raycse.driver.preflight import check_search
    from raycse.driver.standing import FINISHED_SEARCH, NOT_STARTED, STARTED, finished_outcome, search_standing
    from raycse.tracking.stores import check_tracking_uri, probe_store

    flag = options.store_flags.get("tracking_uri", "tracking_uri")
    check_tracking_uri(flag, options.tracking_uri, must_exist=options.resume)
    probe_store(flag, options.tracking_uri, "experiments")
    record = recorded_comparison(options.tracking_uri, name)
    if not options.resume:
        if record is not None:
            raise ConfigError(f"a comparison {name!r} is already recorded in {options.tracking_uri} (parent run "
                              f"{record.info.run_id}): --resume continues it, or pass another --experiment")
        for space in renamed:  # every search's stores, storage and inputs, before anything is created
            check_search(space, options)
        return None, {label: Standing(NOT_STARTED) for label in labels}
    if record is None:
        raise ConfigError.at("resume", f"no comparison {name!r} to resume in {options.tracking_uri} (pass the "
                                       "stores and the --experiment it started with)")
    recorded = {key: record.data.params.get(key) for key in ("losses", "budget")}
    if recorded["losses"] != ",".join(labels):
        raise ConfigError.at("space", f"the comparison {name!r} compares {recorded['losses']}, not "
                                      f"{','.join(labels)}: resume it with its own spaces, in their order")
    if recorded["budget"] != options.budget:
        raise ConfigError.at("budget", f"the comparison {name!r} runs the {recorded['budget']!r} budget, not "
                                       f"{options.budget!r}: resume it with its own")
    standings = {}
    for space, label in zip(renamed, labels):
        standing = search_standing(space, options)
        if standing.state == FINISHED_SEARCH:  # read back now: a record that cannot be read stops nothing started
            standing = dataclasses.replace(standing, outcome=finished_outcome(
                options.tracking_uri, space.experiment, standing.parent_run_id))
        else:
            check_search(space, dataclasses.replace(options, resume=standing.state == STARTED))
        standings[label] = standing
    return record, standings


def recorded_comparison(tracking_uri: str, name: str):
    """The latest parent run of the comparison `name` in the store, or None (no store, no such comparison)."""
    from raycse.tracking.tracker import Tracker

    try:
        tracker = Tracker.existing(tracking_uri, name)
    except ConfigError:
        return None
    runs = tracker.runs(f"tags.`{COMPARE_TAG}` = '{name}'", max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def _run(renamed: list[SearchSpace], labels: list[str], options: SearchOptions, name: str, output_dir: Path,
         tracker, parent: str, log: Callable[[str], None], standings: dict[str, Standing]) -> ComparisonOutcome:
    from raycse.driver.layout import space_to_run

    children = {run.data.tags.get(COMPARE_LOSS_TAG): run.info.run_id for run in tracker.child_runs(parent)}
    searches: dict[str, SearchOutcome] = {}
    for number, (space, label) in enumerate(zip(renamed, labels), start=1):
        child = children.get(label)
        if child is None:
            child = tracker.start_run(label, parent_run_id=parent,
                                      tags={COMPARE_LOSS_TAG: label, LOSS_SEARCH_TAG: space.experiment})
        else:
            tracker.reopen_run(child)
        searches[label] = _loss_search(space, label, f"{number} of {len(labels)}", standings[label], options, name,
                                       log)
        tracker.set_tags(child, {LOSS_PARENT_RUN_TAG: searches[label].parent_run_id})
    tracker.set_tags(parent, {BUDGET_TAG: next(iter(searches.values())).budget})
    arms, figures = judged_arms(searches)
    pairs = comparison.judge_family(arms)
    space = space_to_run(renamed[0], options, next(iter(searches.values())).budget)
    summary = comparison_summary(name, searches, arms, figures, pairs, space)
    for label in searches:
        _log_child(tracker, parent, label, summary)
    output_dir.mkdir(parents=True, exist_ok=True)
    from raycse.files import write_json_atomic

    path = output_dir / COMPARE_SUMMARY_FILE
    write_json_atomic(path, summary)
    tracker.log_dict(parent, summary, COMPARE_SUMMARY_FILE)
    tracker.log_metrics(parent, {pair_metric(p["a"], p["b"]): p["mean"] for p in summary["pairs"]
                                 if p["mean"] is not None})
    tracker.end_run(parent, "FINISHED")
    return ComparisonOutcome(name, parent, searches, pairs, summary, str(path))


def _loss_search(space: SearchSpace, label: str, place: str, standing: Standing, options: SearchOptions, name: str,
                 log: Callable[[str], None]) -> SearchOutcome:
    """One loss's search: read back when it finished before, else run (resumed when it had started)."""
    from raycse.driver.run import finish, run_search
    from raycse.driver.standing import STARTED
    from raycse.tracking.tracker import Tracker

    if standing.outcome is not None:
        log(f"Comparison {name!r}: loss {place}, {label}: its search finished before (MLflow parent run "
            f"{standing.parent_run_id}), read back; nothing trained.")
        return standing.outcome
    log(f"Comparison {name!r}: loss {place}, {label} (experiment {space.experiment!r}).")
    resume = standing.state == STARTED
    if not resume and standing.parent_run_id is not None:  # a set-up a stop cut short: its search starts anew
        Tracker(options.tracking_uri, space.experiment).end_run(standing.parent_run_id, "KILLED")
    outcome = run_search(space, dataclasses.replace(options, resume=resume, started_at=time.perf_counter()), log=log)
    finish(outcome, options.tracking_uri)
    return outcome


def pair_metric(a: str, b: str) -> str:
    """The parent run's metric of a - b (MLflow's names take no parentheses): 'diff/focal - simcse'."""
    return f"{DIFF_PREFIX}{a} - {b}".replace("(", "").replace(")", "")


def _log_child(tracker, parent: str, label: str, summary: dict) -> None:
    child = next(run.info.run_id for run in tracker.child_runs(parent)
                 if run.data.tags.get(COMPARE_LOSS_TAG) == label)
    arm = next(a for a in summary["arms"] if a["loss"] == label and a["role"] == comparison.TUNED)
    metrics = {task: figure["mean"] for task, figure in arm["test"].items() if figure["mean"] is not None}
    tracker.log_metrics(child, metrics)
    tracker.log_params(child, {f"best.{k}": v for k, v in (arm["params"] or {}).items()})
    tracker.end_run(child, "FINISHED")


def judged_arms(searches: dict[str, SearchOutcome]) -> tuple[list[comparison.Arm], dict[str, dict]]:
    """Each loss's tuned winner and published point as arms of the family (the test average of each judging seed;
    None for a run that failed or diverged), and each arm's test figures and facts for the table."""
    arms, facts = [], {}
    seeds_seen = None
    for label, outcome in searches.items():
        judge_runs = [run for run in outcome.trials if run.stage == JUDGE]
        seeds = sorted({run.seed for run in judge_runs})
        if seeds_seen is not None and seeds != seeds_seen:
            raise RuntimeError(f"the judging seeds of {label} ({seeds}) are not those of the other losses "
                               f"({seeds_seen})")
        seeds_seen = seeds
        for role, key in ((comparison.TUNED, outcome.winner_key), (comparison.PUBLISHED, outcome.published_key)):
            if key is None or (role == comparison.PUBLISHED and key == outcome.winner_key):
                continue  # the search chose the published point: no second arm of the same runs
            runs = [run for run in judge_runs if run.config_key == key]
            if not runs:
                continue
            values = {run.seed: (run.test.get("avg") if run.status == FINISHED else None) for run in runs
                      if run.status != FINISHED or "avg" in run.test}
            arm = comparison.Arm(loss=label, role=role, values=values)
            arms.append(arm)
            facts[arm.name] = {"key": key, "params": outcome.configurations[key]["params"],
                               "is_published": key == outcome.published_key,
                               "family": outcome.configurations[key]["family"],
                               "test": _test_figures(runs), "experiment": outcome.experiment}
    return arms, facts


def _test_figures(runs) -> dict[str, dict]:
    from raycse import stats

    figures = {}
    for task in TEST_KEYS:
        values = [run.test[task] for run in runs if run.status == FINISHED and task in run.test]
        summary = stats.summarise(values) if values else None
        figures[task] = {"mean": summary.mean if summary else None, "std": summary.std if summary else None,
                         "n": summary.n if summary else 0}
    return figures


def comparison_summary(name: str, searches: dict[str, SearchOutcome], arms: list[comparison.Arm],
                       facts: dict[str, dict], pairs: list[comparison.PairJudgment],
                       plan: SearchSpace) -> dict[str, Any]:
    """compare_summary.json: the design, each arm's figures, and the family's judgment (what the table prints)."""
    first = next(iter(searches.values()))
    method = first.decision.plan if first.decision is not None else None
    seeds = method.seeds() if method is not None else None
    loss_summary = first.summary
    m = len(pairs)
    return {
        "comparison": name, "budget": first.budget, "objective": first.objective, "judged_figure": COMPARED_ON,
        "model": loss_summary.get("model"), "corpus": loss_summary.get("corpus"),
        "tasks": list(SEVEN_TASKS),
        "seeds": None if seeds is None else {"search": seeds.search, "choose": list(seeds.choose),
                                             "judge": list(seeds.judge)},
        "budget_per_loss": None if method is None else {
            "trials": plan.num_samples, "max_steps": plan.base.max_steps, "epochs": plan.base.epochs,
            "batch_size": plan.base.batch_size, "top_k": method.top_k,
            "choose_seeds": method.choose_seeds if method.top_k > 1 else 0, "judge_seeds": method.judge_seeds},
        "family": {"comparisons": m, "alpha": comparison.ALPHA, "verdicts": "Holm step-down on paired t p-values",
                   "intervals": "Bonferroni-adjusted paired t",
                   "interval_confidence": comparison.adjusted_confidence(m) if m else None,
                   "looks": "one, on fixed seeds"},
        "losses": {label: {"experiment": outcome.experiment, "parent_run_id": outcome.parent_run_id,
                           "family": next(iter(outcome.configurations.values()))["family"]
                           if outcome.configurations else None,
                           "winner": outcome.winner_key, "published": outcome.published_key}
                   for label, outcome in searches.items()},
        "arms": [{"name": arm.name, "loss": arm.loss, "role": arm.role, **facts[arm.name],
                  "seeds": {str(seed): value for seed, value in sorted(arm.values.items())},
                  "failed": sum(1 for v in arm.values.values() if v is None), "ran": len(arm.values)}
                 for arm in arms],
        "pairs": [pair.to_dict() for pair in pairs],
    }


def comparison_loss_experiment(tracking_uri: str, name: str, loss: str) -> str:
    """The experiment of one loss's search in the comparison `name` (its latest comparison run), for export."""
    from raycse.tracking.tracker import Tracker

    tracker = Tracker.existing(tracking_uri, name)
    parents = tracker.runs(f"tags.`{COMPARE_TAG}` = '{name}'", order_by=["attributes.start_time DESC"])
    if not parents:
        raise ConfigError(f"{name!r} holds no comparison (raycse compare writes one)")
    children = {run.data.tags.get(COMPARE_LOSS_TAG): run.data.tags.get(LOSS_SEARCH_TAG)
                for run in tracker.child_runs(parents[0].info.run_id)}
    if loss not in children:
        raise ConfigError.at("loss", f"no loss {loss!r} in comparison {name!r} (its losses: "
                                     f"{', '.join(sorted(k for k in children if k))})")
    return children[loss]
