"""How many judging runs the sequential looks are expected to run: the chance that the judging block reaches each look.

The judging stage runs one block of seeds per look (6, 9, 12, 18 on the full budget) and stops when a boundary is
crossed or the judgment is futile (raycse/judging/judgment.py). What it costs is therefore the sum of its blocks,
each weighed by the chance that it runs. That chance is taken where it is largest in practice, with no true
difference between the winner and the published point: then only futility and chance crossings stop it. It is
computed here from the plan's own looks, futility bounds and t boundaries, on PATHS simulated paths of paired normal
differences (a fixed seed, so the same plan gives the same figure); a real difference stops it sooner (a crossing).

The pipeline simulation (benchmarks/judging_sim.py, which adds failures, ASHA and the choosing block) measured the
same design under the null: 18.4 to 20.0 runs of 36
(benchmarks/results/judging-statistics/2026-11-25-cpu2/all-20000.json); this computation gives 19.9 for focal.yaml's
looks (tests/test_costs.py holds the two together).
"""
from __future__ import annotations

import functools

PATHS, SEED = 20_000, 20261126
SOURCE = "no true difference, from the looks' futility bounds and boundaries (raycse.judging.judgment)"


@functools.lru_cache(maxsize=16)
def look_reach(looks: tuple[int, ...]) -> tuple[float, ...]:
    """The chance that the judging block reaches each look (the first always), with no true difference."""
    if len(looks) < 2:
        return (1.0,)
    import numpy as np

    from raycse.judging import judgment

    rng = np.random.default_rng(SEED)
    diffs = rng.standard_normal((PATHS, looks[-1]))
    alive = np.ones(PATHS, dtype=bool)
    reach = []
    for number, n in enumerate(looks, start=1):
        reach.append(float(alive.mean()))
        if number == len(looks):
            break
        seen = diffs[:, :n]
        t = seen.mean(axis=1) / (seen.std(axis=1, ddof=1) / np.sqrt(n))
        crossed = np.abs(t) >= judgment.t_boundary(looks, n, look=number)  # "beats" or "falls below"
        futile = np.abs(t) < judgment.futility_bound(looks, number)
        alive &= ~(crossed | futile)
    return tuple(reach)


def expected_share(looks: tuple[int, ...]) -> float:
    """The expected share of the fixed design's judging runs that the looks run."""
    reach = look_reach(looks)
    starts = (0, *looks[:-1])
    return sum(p * (end - start) for p, start, end in zip(reach, starts, looks)) / looks[-1]
