"""Seed statistics for the report's tables: the mean with a Student-t 95% confidence interval."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """``(mean, half_width)`` of a two-sided Student-t interval over ``values`` (one per seed).

    ``half_width = t_{(1+c)/2, n−1} · s / √n`` with ``s`` the sample standard deviation; NaN for a single
    value, where no interval exists.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one value")
    if x.size == 1:
        return float(x[0]), math.nan
    from scipy import stats  # here, not at the top: the report CLI's --help imports this module

    half = stats.t.ppf((1.0 + confidence) / 2.0, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half)
