"""``benchmarks/episode_costs.py``'s spread of one (seed, κ)'s episode costs (the rollout side runs in the proxy
benchmark's measurements, docs/paper.md)."""

from __future__ import annotations

import pytest

from benchmarks.episode_costs import cost_spread


def test_the_spread_of_bimodal_costs_and_its_interval_in_units_of_kappa() -> None:
    s = cost_spread([0.0, 0.0, 40.0, 40.0], threshold=20.0)
    assert s["mean"] == 20.0 and s["zero_cost_share"] == 0.5
    assert s["std"] == pytest.approx(23.094, abs=1e-3)  # sample deviation (n − 1)
    assert s["sem"] == pytest.approx(s["std"] / 2)
    low, high = s["normalized_cost_ci95"]
    assert low == pytest.approx(1 - 1.96 * s["sem"] / 20) and high == pytest.approx(1 + 1.96 * s["sem"] / 20)


def test_one_episode_has_no_spread() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        cost_spread([3.0], threshold=20.0)
