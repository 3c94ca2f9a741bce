"""The report's seed statistics against hand computations."""

import math

import pytest

from rllib_caps.report.stats import mean_ci


def test_mean_ci_three_seeds_by_hand():
    # values 1, 2, 3: mean 2, s = 1, t_{0.975, 2} = 4.302652729911275 -> half width 4.3027 / sqrt(3)
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(4.302652729911275 / math.sqrt(3))


def test_mean_ci_single_value_has_no_interval():
    mean, half = mean_ci([0.4])
    assert mean == 0.4 and math.isnan(half)


def test_mean_ci_identical_values_zero_width():
    assert mean_ci([0.5, 0.5, 0.5]) == (0.5, 0.0)


def test_mean_ci_empty_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        mean_ci([])
