"""``CAPSPolicy`` (Ray-free deployment) and ``BudgetTracker``: input guards, and batched use equal to single-env
use step by step."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_caps_module import OBS, make_module

from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.core.budget import BudgetTracker, info_cost


def make_policy(**kwargs) -> CAPSPolicy:
    return CAPSPolicy(make_module(**kwargs))


def test_budget_tracker_records_and_restarts_per_env() -> None:
    budget = BudgetTracker(3)
    budget.record(np.array([1.0, 2.0, 0.5]))
    budget.record(1.0, mask=np.array([True, False, True]))
    np.testing.assert_allclose(budget.spent, [2.0, 2.0, 1.5])
    assert budget.step.tolist() == [2, 1, 2]
    budget.restart(np.array([False, True, False]))
    assert budget.spent.tolist() == [2.0, 0.0, 1.5] and budget.step.tolist() == [2, 0, 2]
    with pytest.raises(ValueError, match="finite"):
        budget.record(np.array([0.0, math.nan, 0.0]))


def test_missing_info_cost_is_a_clear_error() -> None:
    assert info_cost({"cost": 1}) == 1.0
    with pytest.raises(KeyError, match="info\\['cost'\\]"):
        info_cost({"reward": 1.0})


def test_act_needs_reset_first() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        make_policy().act(np.zeros(OBS, np.float32))


@pytest.mark.parametrize("threshold", [-5.0, math.nan])
def test_negative_or_nan_threshold_is_refused(threshold: float) -> None:
    with pytest.raises(ValueError, match="κ"):
        make_policy().reset(threshold)


def test_bad_observations_costs_and_masks_are_refused() -> None:
    policy = make_policy()
    policy.reset(20.0, batch_size=2)
    good = np.zeros((2, OBS), np.float32)
    with pytest.raises(ValueError, match="shape"):
        policy.act(np.zeros((2, OBS + 1), np.float32))
    with pytest.raises(ValueError, match="shape"):
        policy.act(np.zeros((3, OBS), np.float32))
    with pytest.raises(ValueError, match="NaN or inf"):
        policy.act(np.full((2, OBS), np.nan, np.float32))
    policy.act(good)
    with pytest.raises(ValueError, match="cost must be finite"):
        policy.act(good, np.array([0.0, math.inf]))
    with pytest.raises(ValueError, match="cost has shape"):
        policy.act(good, np.zeros(3))
    with pytest.raises(ValueError, match="boolean mask"):
        policy.reset_envs(np.array([0, 1]))


def test_batched_policy_equals_single_env_policies_step_by_step() -> None:
    """Three envs with episodes restarting at different steps: the batched policy keeps each env's c_<t and t
    exactly as a one-env policy does, so it picks the same heads and actions."""
    rng = np.random.default_rng(0)
    batched = make_policy(num_heads=4)
    singles = [make_policy(num_heads=4) for _ in range(3)]
    for single in singles:
        single.module.load_state_dict(batched.module.state_dict())
    batched.reset(3.0, batch_size=3)
    for single in singles:
        single.reset(3.0)
    cost, seen_heads = np.zeros(3), set()
    for step in range(30):
        restart = np.array([step == 10, step == 17, step in (5, 25)])
        if restart.any():
            batched.reset_envs(restart)
            for i in np.flatnonzero(restart):
                singles[i].reset(3.0)
        obs = rng.normal(size=(3, OBS)).astype(np.float32)
        actions = batched.act(obs, cost)
        for i, single in enumerate(singles):
            np.testing.assert_allclose(single.act(obs[i], cost[i]), actions[i], rtol=1e-6, atol=1e-6)
            assert single.last_heads[0] == batched.last_heads[i]
            assert single.budget.step[0] == batched.budget.step[i]
            assert single.budget.spent[0] == pytest.approx(batched.budget.spent[i])
        seen_heads |= set(batched.last_heads.tolist())
        cost = rng.uniform(0, 0.5, size=3)
    assert batched.budget.step.tolist() == [19, 12, 4]  # t of the last observation since each restart
    assert len(seen_heads) > 1  # the budget bites: the comparison covers switching, not one fixed head
