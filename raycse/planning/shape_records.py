"""Which record prices a GPU plan's evaluation, start-up and checkpoint terms: one of the plan's own model shape,
named in the figure's source.

A trial's evaluation of the objective, its start-up and its checkpoint writes depend on the model's shape: one
evaluation of STS-B dev took 0.36 s for BERT-base alone on one H100 and 0.21 s for MiniLM with four trials sharing
it. A `ShapeRecord` holds what one recorded search measured of a shape, by trials sharing a GPU. A plan takes each
term from a record of its shape (one run as the plan runs, with or without warm workers, first) at its sharing, or
at the nearest sharing measured (the largest below it, else the least); an evaluation at a sharing not measured is
the measured one in proportion to the shape's recorded step at the two sharings (trials that share a GPU slow its
evaluations as they slow its steps). A term no record of the shape measured is taken from another shape's record,
and its source says so.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ShapeRecord:
    """What one recorded search measured of a model shape on a GPU, each by the trials sharing the GPU: an
    evaluation of the objective (`eval_s`), the seven test tasks (`test_s`), a slot's first trial's start-up
    (`startup_s`), a trial's start-up in a reused worker (`reused_s`) and a checkpoint write at an evaluation
    (`write_s`: best/, last/ and Tune's copy of both, for weights of `weight_bytes`). `record`: the file, under
    benchmarks/results/."""

    shape: str
    record: str
    device: str
    warm_workers: bool
    weight_bytes: int
    eval_s: dict[int, float] = field(default_factory=dict)
    test_s: dict[int, float] = field(default_factory=dict)
    startup_s: dict[int, float] = field(default_factory=dict)
    reused_s: dict[int, float] = field(default_factory=dict)
    write_s: dict[int, float] = field(default_factory=dict)

    def named(self, sharing: int) -> str:
        """The words of a figure read from this record at `sharing` trials a GPU (the measured sharing)."""
        return f"{self.shape}, {sharing} trial(s) sharing a GPU, recorded on {self.device}: {self.record}"


def nearest_sharing(measured: dict[int, float], sharing: int) -> int:
    """The sharing measured nearest `sharing`: the largest at or below it, else the least.

    Example: nearest_sharing({1: 0.36, 2: 0.61, 4: 1.10}, 8) == 4
    """
    below = [k for k in measured if k <= sharing]
    return max(below) if below else min(measured)


def record_for(records: tuple[ShapeRecord, ...], shape: str | None, term: str,
               warm_workers: bool) -> ShapeRecord | None:
    """The record that prices `term` (a ShapeRecord field: eval_s, test_s, startup_s, reused_s, write_s) for a plan of
    `shape`: of that shape first, then of any; among them one run with warm workers as the plan first; None when no
    record measured it.

    Example: record_for(cost_figures.SHAPE_RECORDS, "bert-base", "eval_s", True).shape == "bert-base"
    """
    measured = [r for r in records if getattr(r, term)]
    ranked = sorted(measured, key=lambda r: (r.shape != shape, r.warm_workers != warm_workers))
    return ranked[0] if ranked else None


def term_note(record: ShapeRecord, shape: str | None, warm_workers: bool, what: str, start_up: bool = False) -> str:
    """What a figure's source adds when its record is not of the plan's kind: another shape's, or (for a start-up)
    run without (or with) the warm workers the plan has; '' when it is.

    Example: term_note(bert_base_record, "bert-base", True, "a start-up", start_up=True)
    == ", recorded without warm workers"
    """
    notes = []
    if record.shape != shape:
        notes.append(f"no record of {what} for a {shape or 'model of unknown'} shape: {record.shape}'s")
    if start_up and record.warm_workers != warm_workers:
        notes.append(f"recorded {'with' if record.warm_workers else 'without'} warm workers")
    return "".join(f", {note}" for note in notes)


def eval_seconds(record: ShapeRecord, sharing: int,
                 recorded_ms: Callable[[str, int], float | None]) -> tuple[float, str]:
    """(an evaluation's seconds at `sharing` trials a GPU, where from): measured at that sharing, else at the
    nearest measured, in proportion to the shape's recorded step at the two (`recorded_ms(shape, sharing)`, None
    where none is recorded: then as measured).

    Example: eval_seconds(bert, 8, ms) == (1.10 * ms("bert-base", 8) / ms("bert-base", 4), "...")
    """
    measured = nearest_sharing(record.eval_s, sharing)
    seconds, where = record.eval_s[measured], record.named(measured)
    there, here = recorded_ms(record.shape, measured), recorded_ms(record.shape, sharing)
    if measured != sharing and there and here:
        seconds *= here / there
        where += f", in proportion to {record.shape}'s recorded step with {sharing} a GPU"
    return seconds, where


def at_sharing(record: ShapeRecord, term: str, sharing: int) -> tuple[float, str]:
    """(the record's `term` at the sharing measured nearest `sharing`, where from)."""
    measured = nearest_sharing(getattr(record, term), sharing)
    return getattr(record, term)[measured], record.named(measured)
