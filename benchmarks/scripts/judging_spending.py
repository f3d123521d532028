"""What the sequential looks' t boundaries spend, on null paths independent of their calibration.

    python benchmarks/scripts/judging_spending.py > spending.json

The full budget's looks (6, 9, 12, 18 paired seeds), one-sided alpha 2.5%: raycse's calibrated t boundaries
(raycse.judging.judgment.t_boundary), and the usual t-analogue, which carries the exact z boundaries
(judgment.z_boundaries) to t by equal p-value, for this spending (Hwang-Shih-DeCani, gamma -2) and for
O'Brien-Fleming type. Each is the repeated paired t test on the same PATHS normal null paths (seed SEED, not the
calibration's); a path counts once, at the first look whose t reaches the boundary. tests/test_decision.py checks
the same on 400,000 paths.
"""
import json
import math

import numpy as np
from scipy import stats

from raycse.judging import judgment

LOOKS, PATHS, CHUNK, SEED = (6, 9, 12, 18), 2_000_000, 250_000, 20261126


def analogue(gamma):
    """The exact z boundaries of this spending, each carried to t (df n - 1) at its one-sided p-value."""
    z = judgment.z_boundaries(LOOKS, gamma=gamma)
    return [float(stats.t.isf(stats.norm.sf(c), n - 1)) for c, n in zip(z, LOOKS)]


designs = {"calibrated": [judgment.t_boundary(LOOKS, n) for n in LOOKS], "t_analogue_hsd": analogue(-2.0),
           "t_analogue_obf": analogue(None)}
crossed = {name: np.zeros(len(LOOKS), dtype=np.int64) for name in designs}
rng = np.random.default_rng(SEED)
for _ in range(PATHS // CHUNK):
    x = rng.standard_normal((CHUNK, LOOKS[-1]))
    t = np.stack([x[:, :n].mean(1) / (x[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in LOOKS], axis=1)
    for name, bounds in designs.items():
        hit = t >= np.asarray(bounds)
        first = np.where(hit.any(1), hit.argmax(1), -1)
        crossed[name] += np.bincount(first[first >= 0], minlength=len(LOOKS))


def spent(counts):
    total = counts.sum() / PATHS
    return {"total": total, "mc_error": math.sqrt(total * (1 - total) / PATHS), "by_look": (counts / PATHS).tolist()}


print(json.dumps({
    "looks": LOOKS, "alpha_one_sided": judgment.ALPHA_ONE_SIDED, "gamma": judgment.SPENDING_GAMMA,
    "paths": PATHS, "seed": SEED,
    "share_per_look": [judgment.spent(n / LOOKS[-1]) - judgment.spent(m / LOOKS[-1])
                       for n, m in zip(LOOKS, (0, *LOOKS[:-1]))],
    "boundaries": designs, "spent": {name: spent(counts) for name, counts in crossed.items()},
}, indent=1))
