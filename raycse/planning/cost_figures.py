"""The recorded figures the cost model reads (raycse/planning/cost_model.py), each with the record it comes from under
benchmarks/results/ (tests/test_costs.py reads every one back from its record), and a plan's rates built from them.

A GPU plan is never timed on this machine's CPU: its step is a recorded GPU figure for the model's shape, batch and
sequence length with the plan's trials sharing each GPU, or the user's --step-ms; with neither, the plan is refused.
Its evaluation, start-up and checkpoint writes come from a record of the model's own shape (`SHAPE_RECORDS`, chosen
by raycse/planning/shape_records.py): BERT-base's from the GPU suite's paper part (1, 2 and 4 trials sharing one
H100), MiniLM's from the full focal search on one H100 (four trials a GPU); each figure's source names its record.
The seven test tasks and the driver's phases are the focal search's. A CPU plan's step and evaluation are measured on
this machine (raycse/planning/dry_run.py); its other figures are this project's 2-core CPU machine's.
"""
from __future__ import annotations

from raycse.errors import ConfigError
from raycse.planning.cost_model import WRITE_COPIES, Figure, Rates
from raycse.planning.shape_records import ShapeRecord, at_sharing, eval_seconds, record_for, term_note
from raycse.settings.gpu_share import GPU_STEPS, H100_PAPER, recorded_step

# focal, full budget, 4 trials a GPU
H100_SEARCH = "benchmarks/results/search-wall-clock/2026-11-22-h100/focal-summary.json"
H100_WARM_SEARCH = "benchmarks/results/warm-workers/2026-11-26-h100/search.json"  # the same, with warm workers
CPU_OVERHEADS = "benchmarks/results/fixed-costs/2026-11-22-cpu2/trial-overheads.json"
CPU_SEARCH = "benchmarks/results/quick-start-cpu/2026-11-24-cpu2/before.txt"  # focal, CPU budget, 2 cores
CHECKPOINT_RECORD = "benchmarks/results/quick-start-cpu/2026-11-26-cpu2/disk.txt"
RECORDED_SENTENCES = 11_914  # the bundled corpus, which both records' searches tokenised
MINILM_WEIGHT_BYTES = 90_864_192  # all-MiniLM-L6-v2's model.safetensors (CHECKPOINT_RECORD)

# On one H100 (H100_SEARCH: its 24 trials' timings): a new worker's start-up and a reused one's; an evaluation of
# STS-B dev, in steps of the same trial (0.206 s at 30.46 ms); the seven test tasks; a checkpoint write at an
# evaluation (0.468 s for MiniLM's best/, last/ and Tune's copy), per GB; and the driver's setup, tokenising (per
# sentence) and recording.
GPU_COLD_START_S, GPU_WARM_START_S = 16.19, 0.27
# With warm workers (H100_WARM_SEARCH, the default since): a slot's first trial in each stage waits for Tune's own
# trial process (and, in the search stage, for the worker's imports begun during the set-up); later ones reuse both.
GPU_WARM_WORKERS_START_S, GPU_WARM_WORKERS_REUSED_S = 6.84, 0.20
GPU_DEV_EVAL_STEPS = 6.76
GPU_TEST_S = 4.22
GPU_CHECKPOINT_WRITE_S = 0.468
GPU_CHECKPOINT_S_PER_GB = GPU_CHECKPOINT_WRITE_S / (WRITE_COPIES * MINILM_WEIGHT_BYTES / 1e9)
GPU_SETUP_S, GPU_TOKENIZE_S, GPU_FINISH_S = 24.87, 1.249, 4.23
# On this project's 2-core CPU machine: a new and a reused worker (CPU_OVERHEADS: 4 short trials one at a time,
# 28.0 s without reuse, 7.1 s with), a checkpoint write (CPU_SEARCH: 16 s over its 8 trials' 16 evaluations), the
# driver's setup, tokenising (CPU_OVERHEADS: the bundled corpus once, 0.99 s) and recording and report (0 + 3 s).
CPU_COLD_START_S, CPU_WARM_START_S = 28.05 / 4, 7.10 / 4
CPU_CHECKPOINT_S_PER_GB = 1.0 / (WRITE_COPIES * MINILM_WEIGHT_BYTES / 1e9)
CPU_SETUP_S, CPU_TOKENIZE_S, CPU_FINISH_S = 12.0, 0.994, 3.0

# BERT-base on one H100 (H100_PAPER_SEARCHES: the GPU suite's paper part, 2,000-step trials, random weights, without
# warm workers), by trials sharing the GPU: an evaluation of STS-B dev (evaluation seconds over evaluations), a trial's
# start-up, and a checkpoint write: the write that, under the trainer's cadence (cost_model.Trial.checkpoint_seconds),
# gives the trial's recorded checkpoint seconds (9.4, 7.1 and 13.7 s over 16 evaluations).
H100_PAPER_SEARCHES = H100_PAPER + "paper.json"
BERT_BASE_EVAL_S = {1: 0.3647, 2: 0.6133, 4: 1.0972}
BERT_BASE_START_S = {1: 22.60, 2: 24.44, 4: 28.32}
BERT_BASE_WRITE_S = {1: 3.507, 2: 1.955, 4: 4.054}
BERT_BASE_WEIGHT_BYTES = 438_664_596  # the paper part's largest best/ (paper.json: best_gb)

# Each term of a plan from a record of its model's shape (raycse/planning/shape_records.py).
SHAPE_RECORDS = (
    ShapeRecord("minilm", H100_SEARCH, "an H100", False, MINILM_WEIGHT_BYTES,
                eval_s={4: GPU_DEV_EVAL_STEPS * 30.46 / 1000}, test_s={4: GPU_TEST_S},
                startup_s={4: GPU_COLD_START_S}, reused_s={4: GPU_WARM_START_S},
                write_s={4: GPU_CHECKPOINT_WRITE_S}),
    ShapeRecord("minilm", H100_WARM_SEARCH, "an H100", True, MINILM_WEIGHT_BYTES,
                startup_s={4: GPU_WARM_WORKERS_START_S}, reused_s={4: GPU_WARM_WORKERS_REUSED_S}),
    ShapeRecord("bert-base", H100_PAPER_SEARCHES, "an H100", False, BERT_BASE_WEIGHT_BYTES,
                eval_s=BERT_BASE_EVAL_S, startup_s=BERT_BASE_START_S, write_s=BERT_BASE_WRITE_S),
)


def recorded(record: str, what: str = "recorded on an H100") -> str:
    return f"{what}: {record}"


def gpu_step(shape: str | None, batch_size: int, seq_len: int, sharing: int, steps: int,
             step_ms: float | None) -> tuple[Figure, Figure]:
    """(a step, a trial's compile) for a GPU plan: --step-ms when given, else the recorded step of this shape, batch
    and length at this sharing; a compiled record's trial runs eager (COMPILED_SPEEDUP slower, no compile) when its
    steps would not repay the compile, as compile: auto decides. Refused (ConfigError) with neither."""
    from raycse.training.compile_policy import COMPILED_SPEEDUP, DEFAULT_COMPILE_SECONDS

    none = Figure(0.0, "eager")
    shared = f"{sharing} trial(s) sharing a GPU"
    if step_ms is not None:
        return Figure(step_ms / 1000, f"--step-ms, taken as a trial's step with {shared}"), none
    match = recorded_step(shape, batch_size, seq_len)
    if match is None:
        known = ", ".join(f"{r.shape} at batch {r.batch_size}" for r in GPU_STEPS)
        raise ConfigError.at("step_ms", f"no recorded GPU step for a {shape or 'model of unknown'}-shaped model at "
                                        f"batch {batch_size}, length {seq_len} (recorded, length 32: {known}), and a "
                                        "GPU plan is never timed on this machine's CPU: pass --step-ms MS, a trial's "
                                        f"step with {shared} (`raycse bench` on the GPU measures one)")
    seconds = match.ms(sharing) / 1000
    where = recorded(match.record, f"{shape}, batch {batch_size}, {shared}, recorded on {match.device}")
    if match.compiled:
        if steps * seconds * (COMPILED_SPEEDUP - 1) > DEFAULT_COMPILE_SECONDS:
            return Figure(seconds, where + ", compiled"), Figure(DEFAULT_COMPILE_SECONDS, "compile: auto's estimate")
        return Figure(seconds * COMPILED_SPEEDUP, where + f", eager: {COMPILED_SPEEDUP:g}x the compiled step"), none
    return Figure(seconds, where), none


def gpu_rates(step: Figure, compile_: Figure, weight_bytes: int | None, sentences: int,
              warm_workers: bool = True, shape: str | None = None, sharing: int = 1) -> Rates:
    """A GPU plan's rates: its step, its evaluation, start-up and checkpoint write from a record of its model's
    `shape` with `sharing` trials a GPU (`shape_terms`; a slot's first trial of a stage as it starts with warm
    workers, or without them: `--no-warm-workers`), the rest as recorded on one H100.

    Example: gpu_rates(step, eager, None, 11_914, shape="bert-base", sharing=2).dev_eval.value == 0.6133
    """
    dev, cold, warm, checkpoint = shape_terms(shape, sharing, warm_workers, step, weight_bytes)
    return Rates(
        step=step, compile=compile_, dev_eval=dev, test=test_tasks(shape, sharing, warm_workers, dev),
        cold_start=cold, warm_start=warm, checkpoint=checkpoint,
        setup=Figure(GPU_SETUP_S, recorded(H100_SEARCH)),
        tokenize=Figure(GPU_TOKENIZE_S * sentences / RECORDED_SENTENCES, recorded(H100_SEARCH)),
        finish=Figure(GPU_FINISH_S, recorded(H100_SEARCH)), checkpoint_share=checkpoint_share())


def shape_terms(shape: str | None, sharing: int, warm_workers: bool, step: Figure,
                weight_bytes: int | None) -> tuple[Figure, Figure, Figure, Figure]:
    """(an evaluation, a slot's first trial's start-up, a reused worker's, a checkpoint write) for a GPU plan of a
    `shape` model with `sharing` trials a GPU, each from the record `record_for` chooses and named with it. With no
    record of an evaluation of the shape, the evaluation is GPU_DEV_EVAL_STEPS of the plan's step (MiniLM's record,
    in steps of the same trial), and says so.

    Example: shape_terms("bert-base", 1, True, step, None)[0].source names benchmarks/results/paper-scale/...
    """
    def recorded_ms(name: str, k: int) -> float | None:  # the shipped step of the records' batch and length
        match = recorded_step(name, 64, 32, GPU_STEPS)
        return None if match is None else match.ms(k)

    record = record_for(SHAPE_RECORDS, shape, "eval_s", warm_workers)
    if record.shape == shape:
        dev = Figure(*eval_seconds(record, sharing, recorded_ms))
    else:
        dev = Figure(step.value * GPU_DEV_EVAL_STEPS,
                     f"no record of an evaluation for a {shape or 'model of unknown'} shape: {GPU_DEV_EVAL_STEPS:g} "
                     f"steps of the plan's step, as in {record.named(min(record.eval_s))}")
    figures = [dev]
    for term, what in (("startup_s", "a slot's first trial's start-up"), ("reused_s", "a reused worker's start-up")):
        record = record_for(SHAPE_RECORDS, shape, term, warm_workers)
        seconds, where = at_sharing(record, term, sharing)
        figures.append(Figure(seconds, where + term_note(record, shape, warm_workers, what, start_up=True)))
    record = record_for(SHAPE_RECORDS, shape, "write_s", warm_workers)
    seconds, where = at_sharing(record, "write_s", sharing)
    scale = (weight_bytes or record.weight_bytes) / record.weight_bytes  # the same disk, the plan's weights
    figures.append(Figure(seconds * scale, where + term_note(record, shape, warm_workers, "a checkpoint write")))
    return tuple(figures)


def test_tasks(shape: str | None, sharing: int, warm_workers: bool, dev: Figure) -> Figure:
    """The seven test tasks: as a record of the shape measured them, or, where more (or where none did),
    seven_task_evals() evaluations of the objective, as raycse/driver/time_left.py prices them."""
    evals = Figure(seven_task_evals() * dev.value, f"{seven_task_evals():g} evaluations of the objective, as "
                                                   "raycse/driver/time_left.py prices them")
    record = record_for(SHAPE_RECORDS, shape, "test_s", warm_workers)
    if record is None or record.shape != shape:
        return evals
    seconds, where = at_sharing(record, "test_s", sharing)
    return Figure(seconds, where) if seconds >= evals.value else evals


def cpu_rates(step: Figure, dev_eval: Figure, weight_bytes: int | None, sentences: int) -> Rates:
    """A CPU plan's rates: its step and evaluation (measured here, or from --step-ms), the rest as recorded on this
    project's 2-core machine."""
    write = (weight_bytes or MINILM_WEIGHT_BYTES) * WRITE_COPIES / 1e9 * CPU_CHECKPOINT_S_PER_GB
    on_cpu = "recorded on a 2-core CPU"
    return Rates(
        step=step, dev_eval=dev_eval, compile=Figure(0.0, "eager"),
        test=Figure(seven_task_evals() * dev_eval.value,
                    f"{seven_task_evals():g} evaluations, as raycse/driver/time_left.py prices them"),
        cold_start=Figure(CPU_COLD_START_S, recorded(CPU_OVERHEADS, on_cpu)),
        warm_start=Figure(CPU_WARM_START_S, recorded(CPU_OVERHEADS, on_cpu)),
        checkpoint=Figure(write, recorded(CPU_SEARCH, on_cpu)),
        setup=Figure(CPU_SETUP_S, recorded(CPU_SEARCH, on_cpu)),
        tokenize=Figure(CPU_TOKENIZE_S * sentences / RECORDED_SENTENCES, recorded(CPU_OVERHEADS, on_cpu)),
        finish=Figure(CPU_FINISH_S, recorded(CPU_SEARCH, on_cpu)), checkpoint_share=checkpoint_share())


def seven_task_evals() -> float:
    """The seven test tasks, in evaluations of the objective (measured on the CPU main job's judging runs)."""
    from raycse.driver.time_left import TEST_SCORING_EVALS

    return TEST_SCORING_EVALS


def checkpoint_share() -> float:
    """The trainer's cap on checkpoints' share of a training (its last/ cadence)."""
    from raycse.training.checkpoints import CHECKPOINT_SHARE

    return CHECKPOINT_SHARE
