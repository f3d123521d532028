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
from dataclasses import dataclass, field

from raycse.driver.plan import needs_stage0, search_plan
from raycse.settings.space import SearchSpace

# Sentence pairs scored by one evaluation of STS-B dev, and by the seven test tasks (STS12-16, STS-B test, SICK-R
# test: 3,108 + 1,500 + 3,750 + 3,000 + 1,186 + 1,379 + 4,927): the test tasks cost this many dev evaluations.
DEV_PAIRS = 1_500
TEST_PAIRS = 18_850
# Without a measured evaluation: encoding a sentence forward only costs about a third of training on it (forward and
# backward), and a training step encodes two views of each of its rows.
FORWARD_SHARE = 1 / 3
MEASURED_STEPS, MEASURED_WARMUP = 3, 1


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
    if gpus and gpus_per_trial:
        concurrent = max(1, int(gpus // gpus_per_trial))
    else:
        concurrent = plan.max_concurrent or 1
    concurrent = min(concurrent, plan.max_concurrent or concurrent)
    steps = trial_steps(plan)
    if step_ms is None:
        step_ms, step_source, eval_seconds, eval_source = measure(plan)
    else:
        step_source = "--step-ms"
        eval_seconds = step_ms / 1000 * FORWARD_SHARE * DEV_PAIRS * 2 / (2 * base.batch_size)
        eval_source = f"from the step time (a forward pass is about {FORWARD_SHARE:.2f} of a step's cost a sentence)"
    evals = max(1, math.ceil(steps / base.eval_steps))
    one_trial = (steps * step_ms / 1000 + evals * eval_seconds) / 3600
    test_hours = eval_seconds * TEST_PAIRS / DEV_PAIRS / 3600
    resources = (f"{res.workers} worker(s) x ({res.cpus_per_worker:g} CPU, {res.gpus_per_worker:g} GPU) per trial, "
                 f"{concurrent} at once")
    run = DryRun(space=str(space.path), experiment=plan.experiment, budget=budget, budget_reason=reason, gpus=gpus,
                 resources=resources, gpus_per_trial=gpus_per_trial, concurrent=concurrent, step_ms=step_ms,
                 step_source=step_source, eval_seconds=eval_seconds, eval_source=eval_source)

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


def measure(plan: SearchSpace, shape: str | None = None) -> tuple[float, str, float, str]:
    """A few steps and one evaluation on this machine, on a random-weight encoder of the model's shape (or of
    `shape`, one of raycse.bench.synthetic.SHAPES)."""
    from raycse.bench.step import BenchOptions, run_bench

    base = plan.base
    shape = shape or ("minilm" if base.model == "minilm" else "bert-base")
    family = next(iter(plan.families.values()))
    options = BenchOptions(shape=shape, loss=family.loss, batch_size=base.batch_size, steps=MEASURED_STEPS,
                           warmup=MEASURED_WARMUP, seq_len=base.max_len, baseline=False, eval=True).validate()
    result = run_bench(options)
    where = f"measured here: {MEASURED_STEPS} steps of a random-weight {shape}-shaped encoder, batch {base.batch_size}"
    return (result["ms_per_step"], where, result["eval_seconds"],
            "measured here: one STS-B dev evaluation")


def format_dry_run(run: DryRun) -> str:
    lines = [f"Plan of {run.space} (experiment {run.experiment!r}): nothing is run, created or started.",
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
    return "\n".join(lines)
