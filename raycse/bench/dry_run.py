"""`raycse search --dry-run`: a search's plan and its cost, without running it.

The plan is the search's own (the budget chosen, the space with the command line's overrides, the seed blocks),
laid out stage by stage with each stage's trials, seeds and resources. The cost is an estimate: every trial is
counted as running to its end (ASHA stops some early, so this is an upper bound for the search stage), each trial
takes its steps at the step time, measured here on a few steps of a random-weight encoder of the model's shape, or
given (`--step-ms`), plus one evaluation of the objective every `eval_steps` and at the end; a judging run that
scores the seven test tasks adds them. Nothing is created: no store, no folder, no Ray.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from raycse.driver.plan import max_concurrent, needs_stage0, search_plan
from raycse.errors import ConfigError
from raycse.settings.space import SearchSpace

# Sentence pairs scored by one evaluation of STS-B dev, and by the seven test tasks (STS12-16, STS-B test, SICK-R
# test: 3,108 + 1,500 + 3,750 + 3,000 + 1,186 + 1,379 + 4,927): the test tasks cost this many dev evaluations.
DEV_PAIRS = 1_500
TEST_PAIRS = 18_850
# Without a measured evaluation: encoding a sentence forward only costs about a third of training on it (forward and
# backward), and a training step encodes two views of each of its rows.
FORWARD_SHARE = 1 / 3
MEASURED_STEPS, MEASURED_WARMUP = 3, 1
# What a run leaves in ray_results/, in copies of the model's float32 weights: a search trial up to 4 (best/, and the
# last/ that a trial stopped early keeps to be resumed: weights and Adam's two moments), any other run 1 (best/).
# Measured on the finished CPU main job, 2026-11-26 (benchmarks/results/house-iii-2026-11-26/disk.txt): 364 MB and
# 92 MB a trial with all-MiniLM-L6-v2's 91 MB of weights.
SEARCH_TRIAL_WEIGHTS, OTHER_RUN_WEIGHTS = 4, 1
DISK_RECORD = "benchmarks/results/house-iii-2026-11-26/disk.txt"


@dataclass
class StagePlan:
    """One stage of the plan: its trials, their seeds and what each asks for, and its estimated cost."""

    name: str
    trials: int
    seeds: str
    what: str
    steps_per_trial: int = 0
    evals_per_trial: int = 0
    test_trials: int = 0
    trial_hours: float = 0.0
    gpu_hours: float = 0.0


@dataclass
class DryRun:
    """A search's plan: the budget chosen and why, the stages, the resources of a trial, and the cost estimate's
    inputs (the step time and an evaluation's seconds, and where each came from)."""

    space: str
    experiment: str
    budget: str
    budget_reason: str
    gpus: int
    resources: str
    gpus_per_trial: float
    concurrent: int
    step_ms: float
    step_source: str
    eval_seconds: float
    eval_source: str
    stages: list[StagePlan] = field(default_factory=list)
    refused: str | None = None  # why the real run would refuse to start (the experiment exists already), if it would
    weight_bytes: int | None = None  # the model's float32 weights (None: its configuration could not be read here)

    @property
    def disk_bytes(self) -> int | None:
        """The most ray_results/ holds at the search's end (checkpoints only; the stores are small beside them)."""
        if self.weight_bytes is None:
            return None
        copies = sum(stage.trials * (SEARCH_TRIAL_WEIGHTS if stage.name == "search" else OTHER_RUN_WEIGHTS)
                     for stage in self.stages if stage.steps_per_trial)
        return copies * self.weight_bytes

    @property
    def trial_hours(self) -> float:
        return sum(stage.trial_hours for stage in self.stages)

    @property
    def gpu_hours(self) -> float:
        return sum(stage.gpu_hours for stage in self.stages)

    @property
    def trials(self) -> int:
        return sum(stage.trials for stage in self.stages)


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
                machine_gpus=_cuda_devices) -> DryRun:
    """The plan of `raycse search` with these options (the checked search options by name), and its cost."""
    from types import SimpleNamespace

    from raycse.judging.confirmation_plan import seed_blocks

    budget, gpus, reason = choose_budget(options, gpus, machine_gpus)
    plan = search_plan(space, SimpleNamespace(scheduler=None, grace_evals=None, **options), budget)
    res, base = plan.resources, plan.base
    gpus_per_trial = res.gpus_per_worker * res.workers
    concurrent, why_concurrent = trials_at_once(plan, gpus)
    steps = trial_steps(plan)
    if step_ms is None:
        step_ms, step_source, eval_seconds, eval_source = measure(plan, threads=cpu_threads(plan, gpus))
    else:
        step_source = "--step-ms"
        eval_seconds = step_ms / 1000 * FORWARD_SHARE * DEV_PAIRS * 2 / (2 * base.batch_size)
        eval_source = f"from the step time (a forward pass is about {FORWARD_SHARE:.2f} of a step's cost a sentence)"
    evals = max(1, math.ceil(steps / base.eval_steps))
    one_trial = (steps * step_ms / 1000 + evals * eval_seconds) / 3600
    test_hours = eval_seconds * TEST_PAIRS / DEV_PAIRS / 3600
    resources = (f"{res.workers} worker(s) x ({res.cpus_per_worker:g} CPU, {res.gpus_per_worker:g} GPU) per trial, "
                 f"{concurrent} at once{why_concurrent}")
    run = DryRun(space=str(space.path), experiment=plan.experiment, budget=budget, budget_reason=reason, gpus=gpus,
                 resources=resources, gpus_per_trial=gpus_per_trial, concurrent=concurrent, step_ms=step_ms,
                 step_source=step_source, eval_seconds=eval_seconds, eval_source=eval_source,
                 refused=refusal(plan, options), weight_bytes=weight_bytes(base.model, base.trust_remote_code))

    def add(name: str, trials: int, seeds: str, what: str, tests: int = 0, train: bool = True) -> None:
        hours = trials * (one_trial if train else eval_seconds / 3600) + tests * test_hours
        run.stages.append(StagePlan(name, trials, seeds, what, steps if train else 0, evals if train else 1, tests,
                                    hours, hours * gpus_per_trial))

    add("baseline", 1, "-", "the untouched model's objective (one evaluation, no training)", train=False)
    if needs_stage0(plan):
        add("stage0", 1, str(base.seed), "DCLR's complementary SimCSE model")
    add("search", plan.num_samples, f"{base.seed} (every trial)",
        f"{plan.num_samples} configurations, the published point first; ASHA may stop some early")
    if plan.confirm is not None:
        blocks = seed_blocks(base.seed, top_k=plan.confirm.top_k, choose_seeds=plan.confirm.choose_seeds,
                             judge_seeds=plan.confirm.judge_seeds)
        if blocks.choose:
            add("choose", plan.confirm.top_k * len(blocks.choose), _seed_range(blocks.choose),
                f"the top {plan.confirm.top_k} configurations on {len(blocks.choose)} fresh seeds each")
        on_test = plan.confirm.judging_seeds_on_test()
        add("judge", 2 * len(blocks.judge), _seed_range(blocks.judge),
            f"the winner and the published point on {len(blocks.judge)} fresh seeds each, the first {on_test} "
            "also on the seven test tasks", tests=2 * on_test)
    return run


def machine_cpus() -> float:
    """The CPUs a local Ray advertises on this machine (its own count, or RAY_OVERRIDE_RESOURCES'), as the real
    run's preflight counts them."""
    from raycse.driver.preflight import local_ray_resources

    return local_ray_resources(0, os.cpu_count() or 1)[1]


def trials_at_once(plan: SearchSpace, gpus: int) -> tuple[int, str]:
    """How many trials the search runs at once, and why: the real run's rule (raycse.driver.plan.max_concurrent),
    on `gpus` GPUs, and on this machine's CPUs when the plan has no GPU (a CPU budget runs here). With GPUs the
    plan is for their machine, whose CPUs are taken to fit its trials."""
    res = plan.resources
    gpus_per_trial = res.gpus_per_worker * res.workers
    if plan.max_concurrent:
        return plan.max_concurrent, " (max_concurrent)"
    if gpus_per_trial:
        if not gpus:
            return 1, ""
        return max(1, int(gpus // gpus_per_trial)), ""
    cpus = machine_cpus()
    per_trial = res.cpus_per_worker * res.workers
    return max_concurrent(plan, {"CPU": cpus}), f" (this machine's {cpus:g} CPU(s), {per_trial:g} a trial)"


def cpu_threads(plan: SearchSpace, gpus: int) -> int | None:
    """The threads a trial computes with when it runs on CPUs alone (Ray gives it its CPUs' worth), so that the
    measured step is a trial's step as it will run beside the others; None with a GPU."""
    res = plan.resources
    if res.gpus_per_worker and gpus:
        return None
    return max(1, int(res.cpus_per_worker))


def refusal(plan: SearchSpace, options: dict) -> str | None:
    """Why the real run would refuse to start because of what its stores already hold (None: it would not): a
    search of this name in the storage path or its study in the Optuna storage without --resume, or none to
    resume. Read only, as the real run's preflight reads them; remote storage is not asked."""
    from raycse.driver.plan import default_optuna_storage, experiment_dir_name
    from raycse.driver.preflight import TUNER_STATE
    from raycse.tracking.stores import study_names

    storage = options["storage_path"]
    folder = Path(storage).expanduser() / experiment_dir_name(plan.experiment)
    started = "://" not in storage and (folder / TUNER_STATE).is_file()
    if options.get("resume"):
        return None if started or "://" in storage else f"--resume: no search {plan.experiment!r} to resume at " \
                                                          f"{str(folder)!r}"
    found = [f"a search at {str(folder)!r}"] if started else []
    optuna_storage = options.get("optuna_storage") or default_optuna_storage(options["tracking_uri"])
    try:
        names = study_names(optuna_storage) or []
    except ConfigError:
        names = []
    if plan.experiment in names:
        found.append(f"an Optuna study {plan.experiment!r} in {optuna_storage}")
    if not found:
        return None
    return (f"the experiment {plan.experiment!r} already exists ({' and '.join(found)}): the real run would refuse "
            "to start; continue it with --resume, or name another with --experiment NAME")


def weight_bytes(model: str, trust_remote_code: bool = False) -> int | None:
    """The model's weights in float32, counted from its configuration on torch's meta device (nothing allocated);
    None where the configuration cannot be read (a hub name, offline)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModel

        from raycse.encoder.loading import resolve_model_path

        config = AutoConfig.from_pretrained(resolve_model_path(model), trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            backbone = AutoModel.from_config(config, trust_remote_code=trust_remote_code)
        return 4 * sum(parameter.numel() for parameter in backbone.parameters())
    except (OSError, ValueError, ConfigError):
        return None


def _seed_range(seeds: tuple[int, ...]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def trial_steps(plan: SearchSpace) -> int:
    """Steps of one trial at the base configuration's batch size: max_steps, else its epochs over the data."""
    base = plan.base
    if base.max_steps is not None:
        return base.max_steps
    examples = base.open_inputs() or []
    rows = len(examples) if base.max_sentences is None else min(len(examples), base.max_sentences)
    return max(1, base.epochs * (rows // (base.batch_size * base.workers)))


def measure(plan: SearchSpace, shape: str | None = None, threads: int | None = None) -> tuple[float, str, float, str]:
    """A few steps and one evaluation on this machine, on a random-weight encoder of the model's shape (or of
    `shape`, one of raycse.bench.synthetic.SHAPES), with `threads` CPU threads (None: this process's)."""
    import torch

    from raycse.bench.step import BenchOptions, run_bench

    base = plan.base
    shape = shape or ("minilm" if base.model == "minilm" else "bert-base")
    family = next(iter(plan.families.values()))
    options = BenchOptions(shape=shape, loss=family.loss, batch_size=base.batch_size, steps=MEASURED_STEPS,
                           warmup=MEASURED_WARMUP, seq_len=base.max_len, baseline=False, eval=True).validate()
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        result = run_bench(options)
    finally:
        torch.set_num_threads(before)
    where = f"measured here: {MEASURED_STEPS} steps of a random-weight {shape}-shaped encoder, batch {base.batch_size}"
    if threads is not None:
        where += f", {threads} thread(s) as a trial has"
    return (result["ms_per_step"], where, result["eval_seconds"],
            "measured here: one STS-B dev evaluation")


def format_dry_run(run: DryRun) -> str:
    lines = [f"Plan of {run.space} (experiment {run.experiment!r}): nothing is run, created or started.",
             *([f"Refused: {run.refused}."] if run.refused else []),
             f"budget: {run.budget} ({run.budget_reason}); {run.resources}",
             f"step: {run.step_ms:.0f} ms ({run.step_source}); evaluation: {run.eval_seconds:.1f} s "
             f"({run.eval_source})", "",
             f"{'stage':<9} {'trials':>6}  {'seeds':<14} {'steps':>6} {'evals':>5} {'trial-h':>8} {'GPU-h':>7}  what"]
    for stage in run.stages:
        lines.append(f"{stage.name:<9} {stage.trials:>6}  {stage.seeds:<14} {stage.steps_per_trial:>6} "
                     f"{stage.evals_per_trial:>5} {stage.trial_hours:>8.2f} {stage.gpu_hours:>7.2f}  {stage.what}")
    # each stage waits for the last of its trials: its trials in rounds of `concurrent`
    wall = sum(math.ceil(stage.trials / max(run.concurrent, 1)) * stage.trial_hours / stage.trials
               for stage in run.stages if stage.trials)
    lines += [f"{'total':<9} {run.trials:>6}  {'':<14} {'':>6} {'':>5} {run.trial_hours:>8.2f} {run.gpu_hours:>7.2f}",
              "", f"About {wall:.2f} h of wall-clock time with {run.concurrent} trial(s) at once; an upper bound "
              "(every trial counted to its end), excluding start-up and the report."]
    if run.disk_bytes is not None:
        lines.append(f"Disk: up to about {run.disk_bytes / 1e9:.1f} GB of checkpoints in ray_results/ (a search trial "
                     f"keeps up to {SEARCH_TRIAL_WEIGHTS} copies of the model's {run.weight_bytes / 1e6:.0f} MB of "
                     f"weights, any other run {OTHER_RUN_WEIGHTS}; measured: {DISK_RECORD}).")
    return "\n".join(lines)
