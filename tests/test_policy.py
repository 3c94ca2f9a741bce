"""``CAPSPolicy`` (Ray-free deployment) and ``BudgetTracker``: input guards, and batched use equal to single-env
use step by step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
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


def test_vector_env_with_next_step_autoreset_keeps_each_episodes_budget() -> None:
    """The documented vector-env loop (gymnasium's default next-step autoreset): ``reset_envs`` for the envs that
    the last ``step()`` reset. Each env's (t, c_<t) then equals a one-env policy's on the same episodes: t restarts
    at 0 on a new episode's first observation, and the action the autoreset ignores is not counted."""
    import gymnasium

    from rllib_caps.algorithms.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule
    from rllib_caps.envs import get_task, make_env

    task, n, steps, kappa = get_task("BallCircle"), 3, 430, 4.0
    probe = make_env(task)
    torch.manual_seed(0)  # an untrained module: whether its episodes incur cost depends on its initialisation
    module = DefaultCAPSTorchRLModule(
        observation_space=probe.observation_space, action_space=probe.action_space,
        model_config={"hidden": [16, 16], "num_heads": 3, "shared_actor": True, "learn_std": True,
                      "cost_maximize": False, "gamma": 0.99, "horizon": task.max_episode_steps, "task": task.name,
                      "head_selection": "q_reward"})  # Q^r's ranking: these untrained heads then incur costs
    batched = CAPSPolicy(module)
    batched.reset(kappa, batch_size=n)
    envs = gymnasium.vector.SyncVectorEnv([lambda: make_env(task) for _ in range(n)],
                                         autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP)
    obs, _ = envs.reset(seed=list(range(n)))
    costs, autoreset = np.zeros(n), np.zeros(n, dtype=bool)
    seen: list[list[tuple]] = [[] for _ in range(n)]  # per env: (obs, cost passed, new episode?, t, c_<t, head)
    new_episode = np.ones(n, dtype=bool)
    for _ in range(steps):
        actions = batched.act(obs, costs)
        for i in np.flatnonzero(~autoreset):  # an env that autoresets ignores this action: not a real step
            seen[i].append((obs[i].copy(), costs[i], new_episode[i], int(batched.budget.step[i]),
                            float(batched.budget.spent[i]), int(batched.last_heads[i])))
        new_episode = autoreset.copy()
        obs, _, terminated, truncated, infos = envs.step(actions)
        costs = infos.get("cost", np.zeros(n))  # absent when every env was just reset
        batched.reset_envs(autoreset)  # the envs this step reset: obs holds their first observation
        autoreset = terminated | truncated
    envs.close()

    heads_agree = total = 0
    for i in range(n):
        single = CAPSPolicy(module)
        for o, cost, starts, t, spent, head in seen[i]:
            if starts:
                single.reset(kappa)
            single.act(o, cost)
            assert (int(single.budget.step[0]), float(single.budget.spent[0])) == (t, pytest.approx(spent))
            heads_agree += int(single.last_heads[0]) == head
            total += 1
        assert [t for *_, t, _, _ in seen[i]][199:202] == [199, 0, 1]  # t restarts with the new episode
    assert sum(cost for env in seen for _, cost, *_ in env) > 0  # costs were incurred, so c_<t was exercised
    # One row and three rows go through different matmul kernels: a near-tie of two heads may round apart.
    assert heads_agree >= 0.98 * total, (heads_agree, total)
