"""PPO-Lagrangian's multiplier update and the penalised env that measures episode costs for it."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest

from data_conversion.behavior_policies import PenalizedCost, envs_side_by_side, ppo_config
from data_conversion.collect import parse_args
from data_conversion.lagrangian import (
    MAX_MULTIPLIER,
    MIN_MULTIPLIER,
    MULTIPLIER_LR,
    step_multiplier,
    update_multiplier,
)
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import get_task


def test_multiplier_grows_above_the_target_and_shrinks_below() -> None:
    assert update_multiplier(0.1, 30.0, 20.0) > 0.1
    assert update_multiplier(0.1, 10.0, 20.0) < 0.1
    assert update_multiplier(0.1, 20.0, 20.0) == 0.1
    # relative violation: 30 against 20 moves λ as far as 3 against 2
    assert update_multiplier(0.1, 30.0, 20.0) == pytest.approx(update_multiplier(0.1, 3.0, 2.0))
    # tanh-squashed: one iteration moves λ by at most a factor exp(lr), whatever the miss
    assert update_multiplier(0.1, 1e6, 20.0) == pytest.approx(0.1 * math.exp(MULTIPLIER_LR), rel=1e-9)
    assert update_multiplier(0.1, 0.0, 1e6) > 0.1 * math.exp(-MULTIPLIER_LR)


def test_multiplier_is_scale_free_and_bounded() -> None:
    # the same miss multiplies λ by the same factor at any scale of λ
    assert update_multiplier(0.01, 40.0, 20.0) / 0.01 == pytest.approx(update_multiplier(5.0, 40.0, 20.0) / 5.0)
    assert update_multiplier(MAX_MULTIPLIER, 100.0, 0.0) == MAX_MULTIPLIER
    assert update_multiplier(MIN_MULTIPLIER, 0.0, 80.0) == MIN_MULTIPLIER
    # a zero target is measured in cost units: any cost raises λ, and zero cost lowers it
    assert update_multiplier(0.1, 1.0, 0.0) == pytest.approx(0.1 * math.exp(MULTIPLIER_LR * math.tanh(1.0)))
    assert update_multiplier(0.1, 0.0, 0.0) == 0.1


def test_multiplier_rejects_negative_inputs() -> None:
    for args in ((0.1, -1.0, 20.0), (0.1, 1.0, -20.0), (0.1, 1.0, 20.0, -0.1)):
        with pytest.raises(ValueError, match="non-negative"):
            update_multiplier(*args)


def test_step_multiplier_uses_the_mean_and_keeps_lambda_without_episodes() -> None:
    assert step_multiplier(0.3, [], 20.0) == 0.3
    assert step_multiplier(0.3, [10.0, 50.0], 20.0) == update_multiplier(0.3, 30.0, 20.0)


def test_multiplier_settles_where_the_cost_meets_the_target() -> None:
    """A toy policy whose episode cost falls as λ rises (cost = 100 / (1 + 50 λ)): λ converges to d's λ."""
    target, multiplier = 20.0, 0.1
    for _ in range(200):
        multiplier = update_multiplier(multiplier, 100.0 / (1.0 + 50.0 * multiplier), target)
    assert 100.0 / (1.0 + 50.0 * multiplier) == pytest.approx(target, rel=0.05)


def test_penalized_env_records_episode_costs_and_takes_a_new_penalty() -> None:
    """Through a gymnasium vector env, as RLlib's env runner holds it: ``call`` drains, ``set_attr`` sets."""
    task = get_task("BallCircle")
    envs = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.wrappers.OrderEnforcing(PenalizedCost(make_env(task), 0.0))],
        autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP,
    )
    try:
        envs.reset(seed=3)
        action = np.ones((1, task.act_dim), dtype=np.float32)  # full throttle leaves the circle: costs
        costs, done = [], False
        while not done:
            _, reward, terminated, truncated, info = envs.step(action)
            costs.append(float(info["cost"][0]))
            done = bool(terminated[0] or truncated[0])
        assert sum(costs) > 0
        assert envs.call("drain_finished_costs") == ([sum(costs)],)
        assert envs.call("drain_finished_costs") == ([],)
        envs.set_attr("penalty", 1000.0)
        envs.step(action)  # the autoreset step
        while True:
            _, reward, _, _, info = envs.step(action)
            if info["cost"][0] > 0:
                break
        assert reward[0] < -900.0  # the new penalty applies to the running env
    finally:
        envs.close()


def test_metadrive_runs_one_env_per_process() -> None:
    assert envs_side_by_side(get_task("easysparse"), 8) == 1
    assert envs_side_by_side(get_task("CarCircle1"), 8) == 8


def test_ppo_flags_reach_ppo() -> None:
    swimmer = get_task("SwimmerVelocity")
    default = ppo_config(swimmer, 0.0, 4000, 0, parse_args(["--out", "x.hdf5"]).ppo)
    assert (default.gamma, default.minibatch_size, default.env_config["reward_scale"]) == (0.99, 500, 1.0)
    assert ppo_config(swimmer, 0.0, 4000, 0, parse_args(["--out", "x.hdf5", "--gamma", "0.9999"]).ppo).gamma == 0.9999
    argv = ["--out", "x.hdf5", "--ppo-config", "minibatch_size=128", "--ppo-config", "reward_scale=0.01"]
    config = ppo_config(swimmer, 0.0, 64, 0, parse_args(argv).ppo)
    assert config.minibatch_size == 64 and config.env_config["reward_scale"] == 0.01  # at most the batch


def test_penalized_env_scales_the_penalised_reward() -> None:
    """PPO sees ``reward_scale · (reward − λ·cost)``; the info's cost, which the multiplier reads, is unscaled."""
    task = get_task("BallCircle")
    plain, scaled = make_env(task), PenalizedCost(make_env(task), 2.0, reward_scale=0.5)
    try:
        plain.reset(seed=5)
        scaled.reset(seed=5)
        action = np.ones(task.act_dim, dtype=np.float32)
        for _ in range(40):
            _, reward, *_, info = plain.step(action)
            _, penalised, *_, scaled_info = scaled.step(action)
            assert scaled_info["cost"] == info["cost"]
            assert penalised == pytest.approx(0.5 * (reward - 2.0 * info["cost"]))
        assert scaled.episode_cost > 0  # the full-throttle ball left the circle: the cost term was exercised
    finally:
        plain.close()
        scaled.close()
