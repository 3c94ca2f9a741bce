"""The switching rule: ``remaining_budget_threshold`` (docs/paper.md, choice 4) and ``select_heads`` (paper Eq. 3-4
plus the min-Q^c fallback, strict ``qc < thr`` as in the authors' code, ties to the lowest head index), with its
rankings: Q^r, head order, and "q_trust" (head order unless Q^r's gap exceeds the twins' disagreement)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rllib_caps.algorithms.caps.switching import select_heads, trusted_heads
from rllib_caps.core.budget import remaining_budget_threshold


def _select(q_reward: list[list[float]], q_cost: list[list[float]], threshold: list[float],
            selection: str = "q_reward") -> list[int]:
    out = select_heads(torch.tensor(q_reward, dtype=torch.float64), torch.tensor(q_cost, dtype=torch.float64),
                       torch.tensor(threshold, dtype=torch.float64), selection)
    return out.tolist()


def test_head_order_picks_the_most_reward_seeking_feasible_head_whatever_q_reward_says() -> None:
    q_reward, q_cost = [[1.0, 4.0, 9.0], [1.0, 4.0, 9.0]], [[6.0, 2.0, 1.0], [1.0, 2.0, 1.0]]
    assert _select(q_reward, q_cost, [5.0, 5.0]) == [2, 2]  # Q^r ranks the cost head first
    assert _select(q_reward, q_cost, [5.0, 5.0], "head_order") == [1, 0]
    assert _select(q_reward, [[7.0, 9.0, 6.0]], [5.0], "head_order") == [2]  # the same fallback: lowest Q^c
    with pytest.raises(ValueError, match="selection must be one of"):
        _select(q_reward, q_cost, [5.0, 5.0], "random")


def _trust(q_reward: list[list[float]], spread: list[list[float]], q_cost: list[list[float]], threshold: list[float],
           trust: float = 1.0) -> list[int]:
    def tensor(x):
        return torch.tensor(x, dtype=torch.float64)
    return select_heads(tensor(q_reward), tensor(q_cost), tensor(threshold), "q_trust", tensor(spread), trust).tolist()


def test_q_trust_takes_head_order_unless_the_gap_beats_both_heads_half_disagreements() -> None:
    """Head 1's min twin 3.0 against head 0's 1.0 (gap 2 between the twins' means when the spreads are equal): with
    spreads (1, 1) the intervals [1, 2] and [3, 4] are apart, so Q^r is trusted; with (2, 2), [1, 3] and [3, 5] touch
    (a gap of exactly c · (d_0 + d_1) / 2 is not more than it), so head order's head 0 stays."""
    feasible = [[0.0, 0.0]]
    assert _trust([[1.0, 3.0]], [[1.0, 1.0]], feasible, [5.0]) == [1]
    assert _trust([[1.0, 3.0]], [[2.0, 2.0]], feasible, [5.0]) == [0]
    assert _trust([[1.0, 3.0]], [[1.9, 0.0]], feasible, [5.0]) == [1]  # Q^r_1 = 3 > Q^r_0 + d_0 = 2.9
    assert _trust([[1.0, 3.0]], [[2.1, 0.0]], feasible, [5.0]) == [0]  # 3 < 3.1: head 0's upper twin is above
    # The sum of the half-disagreements, not the larger one: twins [1, 3] and [2.5, 4.5] overlap, though their
    # midpoints' gap 1.5 exceeds the larger half-disagreement 1; refused. Apart ([1, 3] and [3.5, 5.5]): trusted.
    assert _trust([[1.0, 2.5]], [[2.0, 2.0]], feasible, [5.0]) == [0]
    assert _trust([[1.0, 3.5]], [[2.0, 2.0]], feasible, [5.0]) == [1]
    # c scales the uncertainty: gap of the means 2 against (1 + 1) / 2 · c, trusted for c < 2 only.
    assert _trust([[1.0, 3.0]], [[1.0, 1.0]], feasible, [5.0], trust=1.9) == [1]
    assert _trust([[1.0, 3.0]], [[1.0, 1.0]], feasible, [5.0], trust=2.0) == [0]


def test_q_trust_with_no_disagreement_is_q_reward_and_with_a_huge_coefficient_is_head_order() -> None:
    rng = np.random.default_rng(7)
    q_r, q_c = rng.integers(0, 4, size=(300, 4)).astype(float), rng.integers(0, 6, size=(300, 4)).astype(float)
    thr = rng.integers(0, 6, size=300).astype(float)
    spread = rng.uniform(0.0, 2.0, size=(300, 4))
    assert _trust(q_r, np.zeros_like(q_r).tolist(), q_c, thr) == _select(q_r, q_c, thr, "q_reward")
    assert _trust(q_r, spread.tolist(), q_c, thr, trust=1e6) == _select(q_r, q_c, thr, "head_order")
    with pytest.raises(ValueError, match="trust .* must be >= 0"):
        _trust(q_r, spread.tolist(), q_c, thr, trust=-1.0)


def test_q_trust_picks_the_highest_q_reward_among_trusted_feasible_heads_ties_to_the_lowest_index() -> None:
    # Head order's choice is head 1 (head 0 infeasible); heads 2 and 3 are both trusted over it, 3 has more Q^r.
    assert _trust([[99.0, 0.0, 5.0, 7.0]], [[0.0, 0.1, 0.1, 0.1]], [[9.0, 1.0, 1.0, 1.0]], [5.0]) == [3]
    # The infeasible head 0 is never trusted, however high its Q^r; heads 2 and 3 tie: the lower index wins.
    assert _trust([[99.0, 0.0, 7.0, 7.0]], [[0.0, 0.1, 0.1, 0.1]], [[9.0, 1.0, 1.0, 1.0]], [5.0]) == [2]
    # A trusted head that is infeasible does not count: head 2 beats head 1 but is infeasible; head 3 is within the
    # twins' disagreement of head 1 (midpoints 0.1 and 0.05).
    assert _trust([[0.0, 0.0, 9.0, 0.05]], [[0.0, 0.1, 0.1, 0.1]], [[9.0, 1.0, 9.0, 1.0]], [5.0]) == [1]
    # Equal Q^r and no disagreement: no gap, head order stays.
    assert _trust([[2.0, 2.0]], [[0.0, 0.0]], [[0.0, 0.0]], [5.0]) == [0]


def test_q_trust_falls_back_to_the_lowest_q_cost_when_no_head_is_feasible() -> None:
    # A trusted, huge Q^r does not matter: nothing is feasible, so the cheapest head acts.
    assert _trust([[0.0, 100.0, 1.0]], [[0.0, 0.0, 0.0]], [[7.0, 9.0, 6.0]], [5.0]) == [2]
    assert _trust([[0.0, 100.0]], [[0.0, 0.0]], [[5.0, 5.0]], [5.0]) == [0]  # on the threshold: infeasible; tie


def test_q_trust_is_batched_row_by_row_and_needs_the_spread() -> None:
    q_r = [[1.0, 3.0], [1.0, 3.0], [0.0, 100.0], [5.0, 1.0]]
    spread = [[1.0, 1.0], [2.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    q_c = [[0.0, 0.0], [0.0, 0.0], [7.0, 6.0], [0.0, 0.0]]
    thr = [5.0, 5.0, 5.0, 5.0]
    expected = [1, 0, 1, 0]
    assert _trust(q_r, spread, q_c, thr) == expected
    assert [_trust([a], [b], [c], [d])[0] for a, b, c, d in zip(q_r, spread, q_c, thr, strict=True)] == expected
    out = select_heads(torch.zeros(7, 4), torch.ones(7, 4), torch.full((7,), 2.0), "q_trust", torch.ones(7, 4))
    assert out.shape == (7,) and out.dtype == torch.long
    trusted = trusted_heads(torch.zeros(7, 4), torch.ones(7, 4), torch.zeros(7, dtype=torch.long))
    assert trusted.shape == (7, 4) and trusted.dtype == torch.bool and not trusted.any()
    with pytest.raises(ValueError, match="'q_trust' needs q_reward_spread"):
        select_heads(torch.zeros(7, 4), torch.ones(7, 4), torch.full((7,), 2.0), "q_trust")


# ---------------------------------------------------------------------------------------------- select_heads


def test_single_feasible_head_is_chosen() -> None:
    # Only head 1 has Q^c below 5, although heads 0 and 2 have more reward.
    assert _select([[5.0, 1.0, 3.0]], [[10.0, 2.0, 8.0]], [5.0]) == [1]


def test_highest_reward_among_feasible_wins_even_if_not_head_0() -> None:
    assert _select([[1.0, 4.0, 3.0]], [[1.0, 2.0, 3.0]], [5.0]) == [1]
    assert _select([[1.0, 4.0, 7.0, 2.0]], [[0.0, 1.0, 4.9, 0.5]], [5.0]) == [2]


def test_infeasible_head_with_higher_reward_is_excluded() -> None:
    assert _select([[9.0, 4.0, 3.0]], [[6.0, 2.0, 3.0]], [5.0]) == [1]
    assert _select([[1.0, 2.0, 100.0]], [[0.0, 1.0, 5.1]], [5.0]) == [1]


def test_no_feasible_head_falls_back_to_lowest_cost() -> None:
    # The fallback ignores Q^r entirely: head 0 has by far the most reward.
    assert _select([[9.0, 4.0, 3.0]], [[7.0, 9.0, 6.0]], [5.0]) == [2]
    assert _select([[100.0, -100.0]], [[8.0, 7.0]], [1.0]) == [1]


def test_reward_ties_among_feasible_go_to_lowest_index() -> None:
    assert _select([[1.0, 3.0, 3.0]], [[0.0, 1.0, 2.0]], [5.0]) == [1]
    # The infeasible head 0 has more reward; heads 1 and 2 tie.
    assert _select([[9.0, 3.0, 3.0]], [[6.0, 1.0, 2.0]], [5.0]) == [1]
    assert _select([[2.0, 2.0, 2.0, 2.0]], [[6.0, 7.0, 1.0, 0.0]], [5.0]) == [2]


def test_cost_ties_in_fallback_go_to_lowest_index() -> None:
    assert _select([[1.0, 2.0, 3.0]], [[8.0, 6.0, 6.0]], [5.0]) == [1]
    assert _select([[1.0, 2.0, 3.0, 4.0]], [[9.0, 7.0, 9.0, 7.0]], [5.0]) == [1]


def test_cost_equal_to_threshold_is_infeasible() -> None:
    """Strict comparison (the authors' ``qc < thr``): Q^c exactly at the threshold does not pass the filter."""
    assert _select([[9.0, 1.0]], [[5.0, 4.0]], [5.0]) == [1]
    # Everything sits exactly on the threshold: fallback to the cheapest (lowest index on ties).
    assert _select([[9.0, 1.0, 3.0]], [[5.0, 5.0, 5.0]], [5.0]) == [0]
    assert _select([[1.0, 9.0, 3.0]], [[5.0, 5.0, 5.0]], [5.0]) == [0]
    # A hair below is feasible.
    below = float(np.nextafter(5.0, 0.0))
    assert _select([[9.0, 1.0]], [[below, 4.0]], [5.0]) == [0]


def test_exhausted_budget_takes_cheapest_head() -> None:
    """Threshold 0 with Q^c >= 0 everywhere: nothing is feasible (not even a zero-cost head), so the
    cheapest head acts regardless of reward."""
    assert _select([[9.0, 1.0, 5.0]], [[2.0, 0.0, 1.0]], [0.0]) == [1]
    assert _select([[9.0, 1.0, 5.0]], [[0.0, 0.0, 1.0]], [0.0]) == [0]
    # The same through the threshold: budget κ = 10 already overspent.
    thr = remaining_budget_threshold(10.0, torch.tensor([12.0]), torch.tensor([3]), horizon=100, gamma=0.99)
    assert thr.item() == 0.0
    assert select_heads(torch.tensor([[9.0, 1.0, 5.0]]), torch.tensor([[2.0, 0.5, 1.0]]), thr).tolist() == [1]


def test_batched_rows_are_independent() -> None:
    rows = [
        ([5.0, 1.0, 3.0], [10.0, 2.0, 8.0], 5.0, 1),
        ([1.0, 4.0, 3.0], [1.0, 2.0, 3.0], 5.0, 1),
        ([9.0, 4.0, 3.0], [6.0, 2.0, 3.0], 5.0, 1),
        ([9.0, 4.0, 3.0], [7.0, 9.0, 6.0], 5.0, 2),
        ([9.0, 4.0, 3.0], [7.0, 9.0, 6.0], 100.0, 0),  # same Q's, larger budget: all feasible
        ([1.0, 3.0, 3.0], [0.0, 1.0, 2.0], 5.0, 1),
        ([9.0, 1.0, 5.0], [2.0, 0.0, 1.0], 0.0, 1),
    ]
    q_r = [r[0] for r in rows]
    q_c = [r[1] for r in rows]
    thr = [r[2] for r in rows]
    expected = [r[3] for r in rows]
    assert _select(q_r, q_c, thr) == expected
    assert [_select([a], [b], [c])[0] for a, b, c in zip(q_r, q_c, thr, strict=True)] == expected
    perm = [6, 3, 0, 5, 1, 4, 2]
    permuted = _select([q_r[i] for i in perm], [q_c[i] for i in perm], [thr[i] for i in perm])
    assert permuted == [expected[i] for i in perm]


def test_output_shape_and_dtype() -> None:
    out = select_heads(torch.zeros(7, 4), torch.ones(7, 4), torch.full((7,), 2.0))
    assert out.shape == (7,)
    assert out.dtype == torch.long
    assert out.tolist() == [0] * 7


def _reference_select(q_r: np.ndarray, q_c: np.ndarray, thr: float) -> int:
    feasible = [k for k in range(len(q_r)) if q_c[k] < thr]
    if feasible:
        best = feasible[0]
        for k in feasible:
            if q_r[k] > q_r[best]:
                best = k
        return best
    best = 0
    for k in range(len(q_c)):
        if q_c[k] < q_c[best]:
            best = k
    return best


@pytest.mark.parametrize("num_heads", [2, 4, 8])
def test_matches_python_reference_with_many_ties(num_heads: int) -> None:
    """Random integer-valued Q's (so ties and qc == thr are frequent) against a plain-loop reference."""
    rng = np.random.default_rng(num_heads)
    q_r = rng.integers(0, 4, size=(500, num_heads)).astype(np.float64)
    q_c = rng.integers(0, 6, size=(500, num_heads)).astype(np.float64)
    thr = rng.integers(0, 6, size=500).astype(np.float64)
    got = select_heads(torch.from_numpy(q_r), torch.from_numpy(q_c), torch.from_numpy(thr), "q_reward").numpy()
    want = [_reference_select(q_r[i], q_c[i], thr[i]) for i in range(500)]
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------- remaining_budget_threshold


def _loop_threshold(kappa: float, spent: float, t: int, horizon: int, gamma: float) -> float:
    """Remaining budget spread evenly over the T − t remaining steps, re-summed with discounting."""
    remaining = max(kappa - spent, 0.0)
    steps_left = horizon - t
    per_step = remaining / steps_left
    return sum(per_step * gamma**i for i in range(steps_left))


def _thr(kappa, spent, step, horizon, gamma) -> torch.Tensor:
    return remaining_budget_threshold(kappa, torch.as_tensor(spent, dtype=torch.float64),
                                      torch.as_tensor(step), horizon, gamma)


def test_threshold_at_start_is_discounted_average_budget() -> None:
    kappa, horizon, gamma = 20.0, 1000, 0.99
    got = _thr(kappa, [0.0], [0], horizon, gamma).item()
    assert got == pytest.approx(kappa * (1 - gamma**horizon) / ((1 - gamma) * horizon), rel=1e-12)
    assert got == pytest.approx(kappa / 10, rel=1e-3)  # (1 − 0.99^1000)/(0.01 · 1000) ≈ 0.99996 / 10


def test_threshold_at_last_step_is_remaining_budget() -> None:
    # One step left: (1 − γ)/(1 − γ) = 1, so the remaining budget is used as is.
    assert _thr(40.0, [13.5], [199], 200, 0.99).item() == pytest.approx(26.5, rel=1e-12)
    assert _thr(40.0, [13.5], [199], 200, 0.5).item() == pytest.approx(26.5, rel=1e-12)


def test_threshold_is_zero_once_budget_is_spent() -> None:
    np.testing.assert_array_equal(_thr(10.0, [10.0, 10.5, 50.0], [5, 5, 99], 100, 0.99).numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(_thr(10.0, [10.5, 50.0], [5, 99], 100, 1.0).numpy(), [0.0, 0.0])


def test_threshold_undiscounted_is_remaining_budget() -> None:
    got = _thr(10.0, [0.0, 3.0, 9.5], [0, 50, 99], 100, 1.0).numpy()
    np.testing.assert_allclose(got, [10.0, 7.0, 0.5], rtol=0, atol=0)


def test_threshold_broadcasts_scalar_and_per_row_kappa() -> None:
    spent = [0.0, 2.0, 5.0, 11.0]
    step = [0, 10, 150, 299]
    got = _thr(10.0, spent, step, 300, 0.99)
    assert got.shape == (4,)
    want = [_loop_threshold(10.0, c, t, 300, 0.99) for c, t in zip(spent, step, strict=True)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    kappas = torch.tensor([10.0, 20.0, 40.0, 80.0], dtype=torch.float64)
    got = remaining_budget_threshold(kappas, torch.tensor(spent, dtype=torch.float64), torch.tensor(step), 300, 0.99)
    want = [_loop_threshold(k, c, t, 300, 0.99) for k, c, t in zip(kappas.tolist(), spent, step, strict=True)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 0.99, 0.999])
def test_threshold_matches_loop_formula(gamma: float) -> None:
    horizon = 50
    rng = np.random.default_rng(0)
    kappa = 25.0
    spent = rng.uniform(0.0, 30.0, size=200)
    step = rng.integers(0, horizon, size=200)
    got = _thr(kappa, spent, step, horizon, gamma).numpy()
    want = [_loop_threshold(kappa, c, int(t), horizon, gamma) for c, t in zip(spent, step, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_threshold_is_monotone_in_spent_and_keeps_dtype() -> None:
    spent = torch.linspace(0.0, 12.0, 25)  # float32
    got = remaining_budget_threshold(10.0, spent, torch.full((25,), 7), 100, 0.99)
    assert got.dtype == torch.float32
    assert torch.all(got[1:] <= got[:-1])
    assert torch.all(got >= 0)


def test_threshold_past_horizon_stays_finite() -> None:
    """Episodes that run past the configured horizon keep the last-step rule instead of dividing by zero."""
    got = _thr(10.0, [4.0, 4.0], [100, 130], 100, 0.99).numpy()
    np.testing.assert_allclose(got, [6.0, 6.0])
