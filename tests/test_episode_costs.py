"""``benchmarks/episode_costs.py``'s spread of one (seed, κ)'s episode costs (the rollout side runs in the proxy
benchmark's measurements, docs/paper.md)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_caps_module import ACT, OBS, make_module

from benchmarks.episode_costs import (
    RecordingPolicy,
    cost_by_head,
    cost_spread,
    onpolicy_calibration,
)
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.core.extension import module_extension
from rllib_caps.core.rollout import threshold_episodes


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


def test_onpolicy_calibration_per_head() -> None:
    predicted, realised = np.array([1.0, 3.0, 2.0, 5.0]), np.array([2.0, 3.0, 1.0, 4.0])
    out = onpolicy_calibration(predicted, realised, thresholds=np.full(4, 2.5), heads=np.array([0, 0, 1, 1]),
                               num_heads=3)
    assert set(out) == {"all", "0", "1"}  # head 2 never acted
    assert out["0"] == {"steps": 2, "predicted": 2.0, "realised": 2.5, "bias": -0.5, "feasible_but_over": 0.0}
    assert out["1"]["bias"] == 1.0 and out["1"]["feasible_but_over"] == 0.0
    # step 0 was judged feasible (1 < 2.5) and realised 2 < 2.5; make it realise 3: judged feasible, but over
    assert onpolicy_calibration(predicted, realised + np.array([1.0, 0, 0, 0]), np.full(4, 2.5),
                                np.array([0, 0, 1, 1]), 3)["0"]["feasible_but_over"] == 1.0


class CountingEnv(gym.Env):
    """Cost t + 1 at step t, episodes of three steps: every step's cost is known in advance."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (ACT,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.standard_normal(OBS).astype(np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        obs = self.np_random.standard_normal(OBS).astype(np.float32)
        return obs, 0.0, False, self.t == 3, {"cost": float(self.t)}


def test_the_recorder_sees_what_the_rule_read_and_every_steps_cost() -> None:
    torch.manual_seed(0)
    policy = CAPSPolicy(make_module(num_heads=2, head_selection="head_order"))
    recorder = RecordingPolicy(policy)
    outcomes = threshold_episodes(recorder, CountingEnv(), 4.0, [(0, 2)], seed=0,
                                  extension=module_extension(type(policy.module)))
    assert [o.cost for o in outcomes] == [6.0, 6.0] and len(recorder.episodes) == 2
    assert all(e["t"] == [0, 1, 2] and e["costs"] == [1.0, 2.0] for e in recorder.episodes)  # the last via total
    measured = recorder.calibration([o.cost for o in outcomes])
    calibration = measured["calibration"]
    gamma = policy.module.cost_gamma
    realised = np.array([1 + 2 * gamma + 3 * gamma**2, 2 + 3 * gamma, 3.0])  # each episode's cost-to-go per step
    assert calibration["all"]["steps"] == 6 and calibration["all"]["realised"] == pytest.approx(realised.mean())
    first = recorder.episodes[0]
    predicted = policy.predicted_cost(np.asarray(first["obs"]), np.asarray(first["actions"]), np.asarray(first["t"]))
    assert np.isfinite(predicted).all() and predicted.shape == (3,)
    heads = [h for e in recorder.episodes for h in e["head"]]
    assert sum(calibration[str(k)]["steps"] for k in set(heads)) == 6
    # per episode: costs 1, 2, 3 after spending 0, 1, 3 before them; κ = 4 is never reached before a step
    assert measured["cost_by_head"]["all"] == {"cost": 6.0, "after_budget": 0.0}
    assert all(e["spent"] == [0.0, 1.0, 3.0] for e in recorder.episodes)


def test_the_cost_spent_after_the_budget_per_head() -> None:
    costs, spent = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 1.0, 3.0, 6.0])
    out = cost_by_head(costs, spent, heads=np.array([0, 0, 1, 1]), threshold=3.0, num_heads=2)
    assert out == {"all": {"cost": 10.0, "after_budget": 7.0}, "0": {"cost": 3.0, "after_budget": 0.0},
                   "1": {"cost": 7.0, "after_budget": 7.0}}
