"""The statistics of a search's answer, on numbers whose results are known by hand."""
import math

import pytest

from raycse.stats import mean_interval, pooled_std, summarise


def paired_interval(a, b):
    """winner - published as the decision computes it: the interval of the paired differences."""
    return mean_interval([x - y for x, y in zip(a, b, strict=True)])


def test_summarise_gives_the_sample_std():
    s = summarise([80.0, 82.0, 84.0])
    assert (s.mean, s.n) == (82.0, 3)
    assert s.std == pytest.approx(2.0)  # sqrt(((-2)^2 + 0 + 2^2) / (3 - 1))
    single = summarise([81.5])
    assert (single.mean, single.std, single.n) == (81.5, None, 1)


def test_paired_interval_is_student_t_over_the_differences():
    # differences 1, 2, 3: mean 2, sd 1, n 3, t(0.975, 2) = 4.302653
    interval = paired_interval([81.0, 82.0, 83.0], [80.0, 80.0, 80.0])
    half = 4.302653 * 1.0 / math.sqrt(3)
    assert interval.mean == pytest.approx(2.0)
    assert interval.low == pytest.approx(2.0 - half, abs=1e-5)
    assert interval.high == pytest.approx(2.0 + half, abs=1e-5)
    assert interval.covers_zero  # -0.47 .. 4.47


def test_a_consistent_difference_excludes_zero():
    # differences 0.5, 0.6, 0.4, 0.5: mean 0.5, sd 0.08165, t(0.975, 3) = 3.182446
    interval = paired_interval([80.5, 81.6, 79.4, 80.0], [80.0, 81.0, 79.0, 79.5])
    assert interval.mean == pytest.approx(0.5)
    assert interval.low == pytest.approx(0.5 - 3.182446 * 0.0816497 / 2, abs=1e-5)
    assert not interval.covers_zero


def test_pairing_removes_what_the_seed_does_to_both():
    # the seed moves both configurations by up to 4 points; the difference is always +1
    a = [85.0, 81.0, 83.0]
    b = [84.0, 80.0, 82.0]
    assert summarise(a).std == pytest.approx(2.0)
    interval = paired_interval(a, b)
    assert interval.mean == pytest.approx(1.0) and interval.std == pytest.approx(0.0)
    assert interval.low == pytest.approx(1.0) and not interval.covers_zero


def test_one_pair_has_no_interval():
    interval = paired_interval([82.0], [81.0])
    assert interval.mean == 1.0 and interval.low is None and interval.covers_zero


def test_pooled_std_weights_groups_by_their_degrees_of_freedom():
    # group 1: squares 2 (dof 1); group 2: squares 8 (dof 2); singletons ignored
    assert pooled_std([[1.0, 3.0], [0.0, 2.0, 4.0], [7.0]]) == pytest.approx(math.sqrt(10 / 3))
    assert pooled_std([[1.0], [2.0]]) is None


def test_an_interval_has_n_and_df():
    interval = paired_interval([81.0, 82.0, 83.0], [80.0, 80.0, 80.0])
    assert (interval.n, interval.df) == (3, 2)
    assert paired_interval([82.0], [81.0]).df is None
