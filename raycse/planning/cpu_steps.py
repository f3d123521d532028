"""A CPU plan's training step and evaluation of the objective: priced from a recorded CPU step of the model's shape,
or, where no record of that shape exists, measured here, briefly, and scaled.

The records (`CPU_STEPS`), each on this project's 2-core CPU machine with a trial's one thread:

- MiniLM at batch 16 (every CPU budget's trial): the CPU main job's own trials (the quick start of 2026-11-26, two
  trials at once, a core each), their training seconds over their steps and their evaluations' seconds;
- BERT-base at batch 64 (the paper budgets): this dry run's measurement run longer (benchmarks/cpu_steps.py), in
  the process's CPU seconds, the machine being loaded by other work (its MiniLM row, against the main job's, says by
  how much that still inflates them: about 1.5x).

A plan of a recorded shape takes its step from the record, and measures nothing:

    step = the record's step x (the plan's rows x tokens) / (the record's) x (the record's threads / the plan's)
    evaluation = the record's evaluation x (the record's threads / the plan's)

where a step's rows count what the loss encodes (raycse.bench.step.pass_rows: 3 per row for the passes with a
gradient, 1 for a forward pass alone): a CPU's step is its model FLOPs, in proportion to rows and tokens; and threads
count in proportion (a gain two threads do not quite give). A step on another CPU runs at that CPU's own pace:
`--step-ms` gives a step measured there.

A shape with no record is measured here (`measure`): MEASURED_WARMUP + MEASURED_STEPS steps of a random-weight encoder
of the shape at no more than MEASURED_ROWS rows a step, and MEASURED_SENTENCES of STS-B dev's sentences encoded as an
evaluation encodes them, each scaled to the plan's batch and to the whole dev set; each step and the evaluation are
said as they end (`log`), after a first line that says what is measured.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from raycse.planning.cost_model import Figure

CPU_MAIN_JOB = "benchmarks/results/quick-start-cpu/2026-11-26-cpu2/"  # search_summary.json and trials.json
CPU_STEPS_RECORD = "benchmarks/results/step-speed/2026-11-29-cpu2/cpu-steps.json"
ON_CPU = "recorded on a 2-core CPU"
MEASURED_STEPS, MEASURED_WARMUP, MEASURED_ROWS, MEASURED_SENTENCES = 2, 1, 16, 128
WARM_SENTENCES = 16  # encoded first, untimed
STSB_DEV_SENTENCES = 2_909  # the distinct sentences an evaluation of STS-B dev encodes


def said(line: str) -> None:
    """A measurement's line, printed at once (a plan's lines come before the plan)."""
    print(line, flush=True)


@dataclass(frozen=True)
class CpuStep:
    """A recorded CPU step: the encoder's shape, the batch and length it trained, the rows its step encoded (with a
    gradient, forward only), the threads it had, its ms a step, and one evaluation of STS-B dev in seconds."""

    shape: str
    batch_size: int
    seq_len: int
    rows: tuple[int, int]
    threads: int
    ms: float
    eval_s: float
    record: str

    @property
    def work(self) -> int:
        return (3 * self.rows[0] + self.rows[1]) * self.seq_len


CPU_STEPS = (
    # the main job's 8 trials: 116.3 s of training over their 128 steps, and their 16 evaluations' mean
    # (tests/test_plan_records.py reads each figure back from its record)
    CpuStep("minilm", 16, 32, (32, 0), 1, 908.5, 11.13, CPU_MAIN_JOB),
    CpuStep("bert-base", 64, 32, (128, 0), 1, 30552.1, 116.15, CPU_STEPS_RECORD),
)


def recorded_cpu_step(shape: str | None, threads: int) -> CpuStep | None:
    """The record of this shape at the nearest thread count (the larger of two as near), or None."""
    same = [record for record in CPU_STEPS if record.shape == shape]
    return min(same, key=lambda r: (abs(r.threads - threads), -r.threads)) if same else None


def step_work(loss: str, batch_size: int, seq_len: int) -> int:
    """A step's work in rows x tokens: 3 for each row encoded with a gradient (forward and backward), 1 for each
    row encoded forward only (raycse.bench.step.pass_rows)."""
    from raycse.bench.step import pass_rows
    from raycse.losses import build_loss

    grad_rows, forward_rows = pass_rows(build_loss(loss), batch_size)
    return (3 * grad_rows + forward_rows) * seq_len


def priced(record: CpuStep, loss: str, batch_size: int, seq_len: int, threads: int) -> tuple[Figure, Figure]:
    """(a step, an evaluation) of the plan, from `record` (the module's rule).

    Example:
        >>> step, dev = priced(CPU_STEPS[0], "focal", 32, 32, 1)
        >>> round(step.value / (CPU_STEPS[0].ms / 1000), 2)
        2.0
    """
    work = step_work(loss, batch_size, seq_len) / record.work
    per_thread = record.threads / max(1, threads)
    where = f"{ON_CPU}: {record.record}: a {record.shape}-shaped encoder, batch {record.batch_size}, " \
            f"{record.threads} thread(s)"
    scaled = []
    if work != 1:
        scaled.append(f"batch {batch_size}, length {seq_len}, {loss} by the step's rows and tokens")
    if per_thread != 1:
        scaled.append(f"{threads} thread(s) in proportion")
    step_where = where + (f", scaled to {' and '.join(scaled)}" if scaled else "")
    dev_where = where + (f", scaled to {threads} thread(s) in proportion" if per_thread != 1 else "")
    return (Figure(record.ms / 1000 * work * per_thread, step_where),
            Figure(record.eval_s * per_thread, f"{dev_where}: STS-B dev, {STSB_DEV_SENTENCES} sentences"))


def measuring_line(shape: str, batch_size: int) -> str:
    """The dry run's first line when it must measure: what, and why."""
    recorded = ", ".join(f"{r.shape} at {r.threads} thread(s)" for r in CPU_STEPS)
    rows = min(batch_size, MEASURED_ROWS)
    batch = f"batch {batch_size} and " if batch_size > rows else ""
    return (f"Measuring here: no CPU step of a {shape}-shaped encoder is recorded (recorded: {recorded}); "
            f"{MEASURED_WARMUP + MEASURED_STEPS} training steps at batch {rows} and {MEASURED_SENTENCES} of STS-B "
            f"dev's sentences, scaled to {batch}the whole dev set.")


@dataclass(frozen=True)
class Measured:
    """What `measure` timed: ms a step at the batch asked for, seconds an evaluation of the whole of STS-B dev,
    and what was timed, in words."""

    ms: float
    eval_s: float
    eval_sentences: int
    what: str


def measure(shape: str, loss: str, batch_size: int, seq_len: int, threads: int | None,
            log: Callable[[str], None] = said, steps: int = MEASURED_STEPS, warmup: int = MEASURED_WARMUP,
            rows: int | None = MEASURED_ROWS, sentences: int | None = MEASURED_SENTENCES,
            clock: Callable[[], float] = time.perf_counter) -> Measured:
    """Time `warmup` + `steps` training steps of a random-weight `shape`-shaped encoder on this machine's CPU at
    `rows` rows a step (None: the whole batch) and one evaluation of `sentences` of STS-B dev's (None: all; after
    a first call on a few, which warms the encoder up, the sentences' tokenising is in the timed call), with
    `threads` CPU threads (None: this process's), by `clock` (wall seconds; the recording benchmark times one
    thread's CPU seconds, which other work on the machine does not inflate); each scaled to `batch_size` and the
    whole dev set. Each step and the evaluation are said to `log` as they end.

    Example:
        >>> measured = measure("tiny", "focal", 64, 32, 1, log=lambda line: None)  # doctest: +SKIP
    """
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _measure(shape, loss, batch_size, seq_len, log, steps, warmup, rows, sentences, clock)
    finally:
        torch.set_num_threads(before)


def _measure(shape: str, loss: str, batch_size: int, seq_len: int, log: Callable[[str], None], steps: int,
             warmup: int, rows: int | None, sentences: int | None, clock: Callable[[], float]) -> Measured:
    import statistics

    import torch

    from raycse.bench.step import BATCH_POOL, BenchOptions, build_runner, step_inputs
    from raycse.bench.synthetic import bench_tokenizer, synthetic_data
    from raycse.encoder.model import encode_fn
    from raycse.evaluation.sts import build_objective

    timed_rows = batch_size if rows is None else min(rows, batch_size)
    options = BenchOptions(shape=shape, loss=loss, batch_size=timed_rows, steps=steps, warmup=warmup, seq_len=seq_len,
                           compile=False, baseline=False, eval=False).validate()
    device, tokenizer = torch.device("cpu"), bench_tokenizer()
    runner, loss_fn = build_runner(options, tokenizer, device)
    data = synthetic_data(tokenizer, timed_rows, seq_len, loss_fn.needs_hard_neg, min(BATCH_POOL, warmup + steps),
                          options.seed)
    _loader, inputs = step_inputs(options, data, runner, device)
    seconds = []
    for number in range(1, warmup + steps + 1):
        started = clock()
        runner.step(next(inputs))
        seconds.append(clock() - started)
        log(f"  step {number} of {warmup + steps}{' (warm-up)' if number <= warmup else ''}: {seconds[-1]:.2f} s")
    ms = 1000 * statistics.fmean(seconds[warmup:]) * batch_size / timed_rows
    every = build_objective("stsb_dev").sentences
    cut = every if sentences is None else every[:sentences]
    encode = encode_fn(runner.encoder, "cls" if loss_fn.needs_hard_neg else "cls_before_pooler")
    encode(cut[:WARM_SENTENCES])  # the first call's own costs (lazy initialisation) left out, as in a training's
    started = clock()
    encode(cut)
    elapsed = clock() - started
    eval_s = elapsed * len(every) / len(cut)
    log(f"  STS-B dev: {len(cut)} of {len(every)} sentences in {elapsed:.2f} s")
    what = f"{warmup + steps} steps of a random-weight {shape}-shaped encoder at batch {timed_rows}"
    return Measured(ms, eval_s, len(every), what)
