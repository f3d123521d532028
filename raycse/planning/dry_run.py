"""`raycse search --dry-run`: a search's plan and its cost, without running it.

The plan is the search's own (the budget chosen, the space with the command line's overrides, the seed blocks),
laid out stage by stage with each stage's trials, seeds and resources (raycse/planning/search_stages.py). Its cost is
the cost model's (raycse/planning/cost_model.py): the wall clock expected, with ASHA's stops and the judging looks'
early stop, and at most (the fixed design's judging, no trial stopped early), the GPU-hours and the peak disk, each
from figures that say where they came from. A CPU plan's step and evaluation are a recorded CPU step of the model's
shape, or, where none is recorded, measured here in a few seconds and said so on the first line
(raycse/planning/cpu_steps.py), or given (`--step-ms`); a GPU plan's are recorded GPU figures or `--step-ms`, never
this machine's CPU (raycse/planning/cost_figures.py). A budget meant for GPUs planned without one (the paper's on a
CPU machine) is said so in a sentence. Nothing is created: no store, no folder, no Ray.
A comparison's plan (`ComparePlan`) is its losses' search plans: raycse/planning/compare_plan.py.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from raycse.driver.layout import gpu_share, max_concurrent, needs_stage0, space_to_run
from raycse.driver.stages.baseline import untouched_figures_known
from raycse.driver.state import BenchmarkHook
from raycse.errors import ConfigError
from raycse.planning import cost_figures
from raycse.planning.cost_model import DISK_RECORD, WRITE_COPIES, Figure, Rates, SearchCost, duration
from raycse.planning.cpu_steps import MEASURED_ROWS, measure, measuring_line, priced, recorded_cpu_step, said
from raycse.planning.judging_runs import SOURCE as LOOKS_SOURCE
from raycse.planning.model_facts import model_facts
from raycse.planning.search_stages import StagePlan, stages_of
from raycse.planning.sts_tasks_cost import test_eval_line, test_eval_price
from raycse.settings.budgets import MEANT_FOR_GPUS
from raycse.settings.paper_rows import paper_row_line, shown_paper_row
from raycse.settings.space import SearchSpace
from raycse.settings.space_keys import TestScoring

# Sentence pairs scored by one evaluation of STS-B dev. Without a measured evaluation: encoding a sentence forward
# only costs about a third of training on it (forward and backward), and a training step encodes two views of each row.
DEV_PAIRS = 1_500
FORWARD_SHARE = 1 / 3


@dataclass
class DryRun:
    """A search's plan: the budget chosen and why, the resources of a trial, the stages, and the cost model of it
    (`cost`: its rates, each with where it came from)."""

    space: str
    experiment: str
    budget: str
    budget_reason: str
    gpus: int
    resources: str
    gpus_per_trial: float
    concurrent: int
    cost: SearchCost
    stages: list[StagePlan] = field(default_factory=list)
    refused: str | None = None  # why the real run would refuse to start (the experiment exists already), if it would
    test_eval: TestScoring = TestScoring.BEST  # which runs score the seven test tasks (the space's test_eval)
    test_eval_prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # each choice: (wall s, trial-h)
    share_reason: str | None = None  # why so many trials share a GPU, under gpus_per_worker: auto
    paper_rows: list[dict] = field(default_factory=list)  # the papers' rows as the answer will show them
    measured: str | None = None  # what the plan measured on this machine (None: nothing, its figures are records)

    @property
    def rates(self) -> Rates:
        return self.cost.rates

    @property
    def step_ms(self) -> float:
        return 1000 * self.rates.step.value

    @property
    def weight_bytes(self) -> int | None:
        return self.cost.weight_bytes

    @property
    def disk_bytes(self) -> int | None:
        """The most ray_results/ holds at once (checkpoints only; the stores are small beside them)."""
        return self.cost.peak_disk_bytes()

    @property
    def trial_hours(self) -> float:
        """Every trial's hours, expected (the untouched model's scoring included)."""
        return sum(self.stage_hours(stage)[0] for stage in self.stages)

    @property
    def wall_hours(self) -> float:
        return self.cost.wall_seconds() / 3600

    @property
    def gpu_hours(self) -> float:
        """The GPUs held for the expected wall clock (0 for a plan whose trials use none)."""
        return self.cost.gpu_hours()

    @property
    def trials(self) -> int:
        return sum(stage.trials for stage in self.stages)

    def stage_hours(self, stage: StagePlan) -> tuple[float, float]:
        """(trial-hours, wall-clock hours) of a stage, expected; the untouched model's scoring runs beside."""
        if stage.cost is None:
            untouched = next((s.beside for s in self.cost.stages if s.beside is not None), None)
            return (0.0 if untouched is None else untouched.seconds(self.rates, cold=True) / 3600), 0.0
        wall, busy = stage.cost.seconds(self.rates, self.cost.slots)
        return busy / 3600, wall / 3600


def choose_budget(options, gpus: int | None, machine_gpus) -> tuple[str, int, str]:
    """(budget, GPUs planned for, why): --budget when given; else the full budget with a GPU, the CPU budget without."""
    if gpus is None:
        gpus = machine_gpus()
        where = f"this machine's {gpus} GPU(s)"
    else:
        where = f"--gpus {gpus}"
    if options["budget"] != "auto":
        return options["budget"], gpus, f"--budget {options['budget']}"
    return ("full" if gpus > 0 else "cpu"), gpus, f"auto: {where}"


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def plan_search(space: SearchSpace, options: dict, step_ms: float | None = None, gpus: int | None = None,
                machine_gpus=_cuda_devices, log: Callable[[str], None] = said) -> DryRun:
    """The plan of `raycse search` with these options (the checked search options by name), and its cost. A GPU
    plan with no recorded GPU step for its model and no `step_ms` is refused (ConfigError naming --step-ms). A CPU
    plan whose model's shape has no recorded CPU step measures one here: `log` gets a line saying so first, then a
    line as each step and the evaluation end."""
    from types import SimpleNamespace

    budget, gpus, reason = choose_budget(options, gpus, machine_gpus)
    to_run = space_to_run(space, SimpleNamespace(benchmark=BenchmarkHook(), **options), budget, {"GPU": gpus})
    res, base = to_run.resources, to_run.base
    gpus_per_trial = res.gpus_per_worker * res.workers
    concurrent, why_concurrent = trials_at_once(to_run, gpus)
    steps, sentences = trial_steps(to_run)
    weights, shape = model_facts(base.model, base.trust_remote_code)
    measured = None
    if gpus_per_trial:
        sharing = gpu_sharing(to_run, gpus, concurrent)
        step, compile_ = cost_figures.gpu_step(shape, base.batch_size, base.max_len, sharing, steps, step_ms)
        rates = cost_figures.gpu_rates(step, compile_, weights, sentences, options.get("warm_workers", True), shape,
                                       sharing)
        why_concurrent += f", {sharing} a GPU"
    else:
        step, dev_eval, measured = cpu_step(to_run, gpus, step_ms, shape, log)
        rates = cost_figures.cpu_rates(step, dev_eval, weights, sentences)
    stages, costs = stages_of(to_run, steps, with_stage0=needs_stage0(to_run),
                              untouched_known=untouched_figures_known(to_run))
    held = (gpus or gpus_per_trial * concurrent) if gpus_per_trial else 0
    keep_last = "all" if options.get("keep_checkpoints") else "none"
    prices = {choice: test_eval_price(dataclasses.replace(to_run, test_eval=choice), steps, rates, concurrent, held,
                                      weights, keep_last) for choice in TestScoring}
    resources = (f"{res.workers} worker(s) x ({res.cpus_per_worker:g} CPU, {res.gpus_per_worker:g} GPU) per trial, "
                 f"{concurrent} at once{why_concurrent}")
    return DryRun(space=str(space.path), experiment=to_run.experiment, budget=budget, budget_reason=reason, gpus=gpus,
                  resources=resources, gpus_per_trial=gpus_per_trial, concurrent=concurrent,
                  cost=SearchCost(rates, concurrent, held, costs, weights, keep_last), stages=stages,
                  refused=refusal(to_run, options), test_eval=to_run.test_eval, test_eval_prices=prices,
                  share_reason=share_reason(space, budget, gpus), paper_rows=paper_rows_shown(to_run),
                  measured=measured)


def paper_rows_shown(space: SearchSpace) -> list[dict]:
    """Each family's reported row (with figures) as this budget's answer will caption it: comparable or not."""
    from raycse.encoder.model_path import model_name

    model, corpus = model_name(space.base.model), space.base.sup_data or space.base.corpus
    return [shown_paper_row(space.paper[family], family, model, corpus) for family in space.families
            if space.paper.get(family, {}).get("figures")]


def share_reason(space: SearchSpace, budget: str, gpus: int) -> str | None:
    """The words of `gpus_per_worker: auto`'s choice on `gpus` GPUs (raycse.driver.layout.gpu_share), or None."""
    budgeted = space.with_budget(budget)
    share = gpu_share(budgeted, {"GPU": gpus}) if budgeted.resources.auto_gpus else None
    return None if share is None else f"gpus_per_worker: auto gives {share.why}"


def gpu_sharing(space: SearchSpace, gpus: int, concurrent: int) -> int:
    """How many trials share a GPU: as many as their share of a GPU lets, no more than run at once on the GPUs."""
    share = space.resources.gpus_per_worker
    fits = max(1, round(1 / share)) if share < 1 else 1
    return max(1, min(fits, -(-concurrent // max(gpus, 1))))


def cpu_step(space: SearchSpace, gpus: int, step_ms: float | None, shape: str | None,
             log: Callable[[str], None] = said) -> tuple[Figure, Figure, str | None]:
    """(a step, an evaluation of the objective, what was measured here or None) of a CPU plan: the step given and
    an evaluation from it (a forward pass is about FORWARD_SHARE of a step's cost a sentence); else the recorded CPU
    step of the model's shape (a model of no known shape taken as BERT-base's); else measured here, said first to
    `log` (raycse/planning/cpu_steps.py)."""
    base = space.base
    if step_ms is not None:
        seconds = step_ms / 1000 * FORWARD_SHARE * DEV_PAIRS * 2 / (2 * base.batch_size)
        return (Figure(step_ms / 1000, "--step-ms"),
                Figure(seconds, f"from the step time: a forward pass is about {FORWARD_SHARE:.2f} of a step a "
                                "sentence"), None)
    threads = cpu_threads(space, gpus) or 1
    loss = next(iter(space.families.values())).loss
    known = shape or ("minilm" if base.model == "minilm" else "bert-base")
    record = recorded_cpu_step(known, threads)
    if record is not None:
        step, dev_eval = priced(record, loss, base.batch_size, base.max_len, threads)
        if shape is None:
            step = Figure(step.value, f"a model of no known shape, priced as BERT-base: {step.source}")
        return step, dev_eval, None
    log(measuring_line(known, base.batch_size))
    found = measure(known, loss, base.batch_size, base.max_len, threads, log=log)
    where = f"measured here: {found.what}, {threads} thread(s) as a trial has"
    scaled = f", scaled to batch {base.batch_size}" if base.batch_size > MEASURED_ROWS else ""
    return (Figure(found.ms / 1000, where + scaled),
            Figure(found.eval_s, f"measured here: STS-B dev's first sentences, scaled to its {found.eval_sentences}"),
            f"{found.what}, and part of STS-B dev")


def machine_cpus() -> float:
    """The CPUs a local Ray advertises on this machine (its own count, or RAY_OVERRIDE_RESOURCES'), as the real
    run's preflight counts them."""
    from raycse.driver.preflight import local_ray_resources

    return local_ray_resources(0, os.cpu_count() or 1)[1]


def trials_at_once(space: SearchSpace, gpus: int) -> tuple[int, str]:
    """How many trials the search runs at once, and why: the real run's rule (raycse.driver.layout.max_concurrent),
    on `gpus` GPUs, and on this machine's CPUs when the plan has no GPU (a CPU budget runs here). With GPUs the
    plan is for their machine, whose CPUs are taken to fit its trials."""
    res = space.resources
    gpus_per_trial = res.gpus_per_worker * res.workers
    if space.max_concurrent:
        return space.max_concurrent, " (max_concurrent)"
    if gpus_per_trial:
        if not gpus:
            return 1, ""
        return max(1, int(gpus // gpus_per_trial)), ""
    cpus = machine_cpus()
    per_trial = res.cpus_per_worker * res.workers
    return max_concurrent(space, {"CPU": cpus}), f" (this machine's {cpus:g} CPU(s), {per_trial:g} a trial)"


def cpu_threads(space: SearchSpace, gpus: int) -> int | None:
    """The threads a trial computes with when it runs on CPUs alone (Ray gives it its CPUs' worth), so that the
    measured step is a trial's step as it will run beside the others; None with a GPU."""
    res = space.resources
    if res.gpus_per_worker and gpus:
        return None
    return max(1, int(res.cpus_per_worker))


def refusal(space: SearchSpace, options: dict) -> str | None:
    """Why the real run would refuse to start because of what its stores already hold (None: it would not): a
    search of this name in the storage path or its study in the Optuna storage without --resume, or none to
    resume. Read only, as the real run's preflight reads them; remote storage is not asked."""
    from raycse.driver.layout import default_optuna_storage, experiment_dir_name
    from raycse.driver.preflight import TUNER_STATE
    from raycse.tracking.stores import study_names

    storage = options["storage_path"]
    folder = Path(storage).expanduser() / experiment_dir_name(space.experiment)
    started = "://" not in storage and (folder / TUNER_STATE).is_file()
    if options.get("resume"):
        return None if started or "://" in storage else f"--resume: no search {space.experiment!r} to resume at " \
                                                          f"{str(folder)!r}"
    found = [f"a search at {str(folder)!r}"] if started else []
    optuna_storage = options.get("optuna_storage") or default_optuna_storage(options["tracking_uri"])
    try:
        names = study_names(optuna_storage) or []
    except ConfigError:
        names = []
    if space.experiment in names:
        found.append(f"an Optuna study {space.experiment!r} in {optuna_storage}")
    if not found:
        return None
    return (f"the experiment {space.experiment!r} already exists ({' and '.join(found)}): the real run would refuse "
            "to start; continue it with --resume, or name another with --experiment NAME")


def trial_steps(space: SearchSpace) -> tuple[int, int]:
    """(steps of one trial at the base configuration's batch size, the rows the driver tokenises): max_steps, else
    its epochs over the training data; the rows read where the data is local, else one epoch's of max_steps. A dry
    run downloads nothing: remote data without max_steps is refused (ConfigError naming it)."""
    import dataclasses

    from raycse.settings import inputs

    base = space.base
    data = [f for f in dataclasses.fields(base) if f.metadata.get("read") is inputs.open_training_data]
    remote = [f.name for f in data if str(getattr(base, f.name)).startswith(("http://", "https://", "hf:"))]
    if base.max_steps is not None and remote:
        return base.max_steps, base.max_steps * base.batch_size * base.workers // max(1, base.epochs)
    if remote:
        raise ConfigError.at(remote[0], f"{getattr(base, remote[0])!r} is downloaded, and a dry run downloads "
                                        f"nothing: state max_steps in the {space.budget} budget's train settings")
    examples = inputs.open_all(base, data) or []
    rows = len(examples) if base.max_sentences is None else min(len(examples), base.max_sentences)
    steps = base.max_steps or max(1, base.epochs * (rows // (base.batch_size * base.workers)))
    return steps, rows


def format_dry_run(run: DryRun) -> str:
    rates, cost = run.rates, run.cost
    lines = [f"Plan of {run.space} (experiment {run.experiment!r}): nothing is run, created or started.",
             *([f"Refused: {run.refused}."] if run.refused else []),
             *([machine_note(run)] if machine_note(run) else []),
             f"budget: {run.budget} ({run.budget_reason}); {run.resources}",
             *([run.share_reason] if run.share_reason else []),
             f"step: {run.step_ms:.0f} ms ({rates.step.source})", _overheads(rates), "",
             f"{'stage':<9} {'trials':>6}  {'seeds':<14} {'steps':>6} {'evals':>5} {'trial-h':>8} {'wall-h':>7} "
             f"{'GPU-h':>7}  what"]
    for stage in run.stages:
        busy, wall = run.stage_hours(stage)
        walls = (f"{wall:>7.2f} {wall * cost.gpus:>7.2f}" if stage.cost is not None else f"{'-':>7} {'-':>7}")
        lines.append(f"{stage.name:<9} {stage.trials:>6}  {stage.seeds:<14} {stage.steps_per_trial:>6} "
                     f"{stage.evals_per_trial:>5} {busy:>8.2f} {walls}  {stage.what}")
    judging = next((stage for stage in run.stages if stage.name == "judge"), None)
    judge = judging.cost if judging else None
    # the published point's first judging runs train in the choosing stage's Tune run (search_stages.published_ahead)
    ahead = judging.trials - judge.runs(expected=False) if judge else 0
    judged = (f"the looks stop the judging after {judge.runs() + ahead:.1f} of its {judging.trials} runs "
              f"with {LOOKS_SOURCE}; " if judge and len(judge.blocks) > 1 else "")
    most = f"the fixed design's {judging.trials} judging runs, " if judged else ""
    gpus = (f"; {cost.gpu_hours():.2f} GPU-hours expected, {cost.gpu_hours(expected=False):.2f} at most "
            f"({cost.gpus:g} GPU(s) held throughout)" if cost.gpus else "; no GPU")
    lines += [f"{'total':<9} {run.trials:>6}  {'':<14} {'':>6} {'':>5} {run.trial_hours:>8.2f} "
              f"{run.wall_hours:>7.2f} {run.gpu_hours:>7.2f}", "",
              f"Wall clock: about {duration(cost.wall_seconds())} expected ({judged}ASHA's stops), "
              f"{duration(cost.wall_seconds(expected=False))} at most ({most}no trial stopped early), with "
              f"{run.concurrent} trial(s) at once{gpus}."]
    if run.test_eval_prices:
        lines.append(test_eval_line(run.test_eval, run.test_eval_prices))
    if run.disk_bytes is not None:
        last = " and last/ (--keep-checkpoints)" if cost.keep_last == "all" else ""
        lines.append(f"Disk: peaks at about {run.disk_bytes / 1e9:.1f} GB while trials write checkpoints, "
                     f"{cost.end_disk_bytes() / 1e9:.1f} GB kept at the end (the model's "
                     f"{run.weight_bytes / 1e6:.0f} MB of weights: best/{last} of a trial that ended, "
                     f"{WRITE_COPIES} copies a running trial; sizes measured: {DISK_RECORD}).")
    lines += [f"Paper's row, as the answer will show it: {paper_row_line(row)}" for row in run.paper_rows]
    return "\n".join(lines)


def machine_note(run: DryRun) -> str | None:
    """A plain sentence when the plan's budget is not meant for the machine it plans for (a budget sized for GPUs
    planned without one: `--budget paper` on a CPU machine), with what it would take and what to plan instead."""
    if run.budget not in MEANT_FOR_GPUS or run.gpus_per_trial:
        return None
    return (f"The {run.budget} budget is meant for GPUs, and this plan has none ({run.budget_reason}): on CPUs its "
            f"{run.trials} trials would take about {duration(run.cost.wall_seconds())} (expected); `--gpus N` plans "
            f"it for N GPUs, and `--budget cpu` is the budget meant for CPUs.")


def _overheads(rates: Rates) -> str:
    """The per-trial and per-search figures besides the step, grouped by where they came from."""
    figures = [(f"an evaluation {rates.dev_eval.value:.2f} s", rates.dev_eval),
               (f"the seven test tasks {rates.test.value:.1f} s", rates.test),
               (f"start-up {rates.cold_start.value:.1f} s a new worker", rates.cold_start),
               (f"{rates.warm_start.value:.2f} s a reused one", rates.warm_start),
               (f"compile {rates.compile.value:.0f} s", rates.compile),
               (f"a checkpoint write {rates.checkpoint.value:.2f} s", rates.checkpoint),
               (f"setup {rates.setup.value:.0f} s", rates.setup),
               (f"tokenising {rates.tokenize.value:.0f} s", rates.tokenize),
               (f"recording {rates.finish.value:.0f} s", rates.finish)]
    sources: dict[str, list[str]] = {}
    for text, figure in figures:
        if figure.value or figure is not rates.compile:
            sources.setdefault(figure.source, []).append(text)
    return "; ".join(f"{', '.join(texts)} ({source})" for source, texts in sources.items())
