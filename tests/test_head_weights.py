"""``benchmarks/head_weights.py``'s summary of one head's advantage weights (the checkpoint side runs in the proxy
benchmark's measurements, docs/paper.md)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.head_weights import weight_summary


def test_weights_that_ignore_cost_select_the_plain_episode_cost() -> None:
    costs = np.array([0.0, 10.0, 50.0, 100.0])
    s = weight_summary(np.ones(4), costs, [20])
    assert s["weighted_episode_cost"] == s["episode_cost"] == pytest.approx(40.0)
    assert s["weight_share_at_or_under_20"] == s["row_share_at_or_under_20"] == pytest.approx(0.5)
    assert s["effective_sample_size"] == pytest.approx(1.0)


def test_weights_on_cheap_episodes_lower_the_weighted_cost_and_the_sample_size() -> None:
    s = weight_summary(np.array([9.0, 9.0, 1.0, 1.0]), np.array([0.0, 10.0, 50.0, 100.0]), [20, 60])
    assert s["weighted_episode_cost"] == pytest.approx((90 + 150) / 20)
    assert s["weight_share_at_or_under_20"] == pytest.approx(0.9)
    assert s["weight_share_at_or_under_60"] == pytest.approx(0.95)
    assert s["effective_sample_size"] == pytest.approx(400 / 164 / 4)
