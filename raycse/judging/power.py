"""What the judging stage can resolve: the smallest winner - published difference a number of paired judging seeds
detects (`smallest_detectable`), and the fewest seeds that detect a given one (`seeds_to_detect`, which sets the
full budget's judging seeds in raycse/judging/confirmation_plan.py)."""
from __future__ import annotations

import math

from raycse import stats

POWER = 0.80  # the power at which the smallest detectable difference is quoted


def smallest_detectable(seed_noise: float | None, n: int, confidence: float = stats.CONFIDENCE,
                        power: float = POWER) -> float | None:
    """The smallest true winner - published difference that n paired judging seeds detect with `power`.

    (t_{(1+confidence)/2, n-1} + t_{power, n-1}) * sd_d / sqrt(n), the usual approximation for a two-sided
    paired t-test. The quantiles' degrees of freedom are those of the test actually run (n - 1 pairs), not the
    pooled df: with 2 seeds the interval's critical value is t_{0.975,1} = 12.7, and that is what limits it.
    sd_d, the std of a paired difference, is estimated as sqrt(2) x the pooled seed std, not as the observed
    std of the n differences: at n = 2 the latter rests on one degree of freedom (a factor of ~70 between its
    2.5% and 97.5% quantiles), while the pooled std uses every choosing and judging group. sqrt(2) sigma
    assumes that a seed does not move two configurations alike; when it does, pairing cancels that part and
    the true sd_d is smaller, so the figure errs on the side of "the budget can resolve less".
    """
    if seed_noise is None or n < 2:
        return None
    df = n - 1
    return (stats.t_ppf(0.5 + confidence / 2, df) + stats.t_ppf(power, df)) * math.sqrt(2) * seed_noise / math.sqrt(n)


def seeds_to_detect(difference_in_std: float = 1.0, confidence: float = stats.CONFIDENCE, power: float = POWER,
                    most: int = 1000) -> int:
    """The fewest judging seeds whose smallest detectable difference is at most `difference_in_std` seed-stds."""
    for n in range(2, most + 1):
        if smallest_detectable(1.0, n, confidence, power) <= difference_in_std:
            return n
    raise ValueError(f"more than {most} seeds would be needed to detect {difference_in_std} seed-stds")
