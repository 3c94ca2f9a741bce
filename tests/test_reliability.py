"""Reliability without Ray: bad deployment inputs are refused with one clear error, integrity checks cannot be
switched off by deleting a file, and bad flags, YAML values and output locations fail before any work, naming the
flag, key or file."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_caps_module import OBS, make_module

from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.algorithms.cdt.policy import CDTPolicy
from rllib_caps.algorithms.registry import build_config

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


# ------------------------------------------------------------------------------------------------ deployment

def make_caps() -> CAPSPolicy:
    return CAPSPolicy(make_module(num_heads=3))


def make_cdt() -> CDTPolicy:
    config = build_config("cdt", "BallCircle", str(BUNDLED), eval_episodes=0, seed=1, embedding_dim=16, num_layers=1,
                          attention_heads=1, seq_len=4)
    config.validate()  # sets the task's spaces
    return CDTPolicy(config.get_rl_module_spec().build())


POLICIES = {"caps": (make_caps, OBS), "cdt": (make_cdt, 8)}
BAD_THRESHOLDS = [("20", TypeError, "must be a number"), (None, TypeError, "must be a number"),
                  (True, TypeError, "must be a number"),
                  (-1.0, ValueError, "must be >= 0"), (math.nan, ValueError, "must be >= 0")]
BAD_COSTS = [(-0.5, ValueError, "must be >= 0"), (math.nan, ValueError, "must be >= 0"),
             (math.inf, ValueError, "must be finite"),
             ("1", TypeError, "must be a number"), ([0.0, -1.0], ValueError, "must be >= 0"),
             ([0.0, "a"], TypeError, "must be a number"), (np.zeros(3), ValueError, "has shape")]


@pytest.mark.parametrize("algo", POLICIES)
def test_bad_thresholds_are_refused_naming_the_argument(algo: str) -> None:
    policy = POLICIES[algo][0]()
    for threshold, error, message in BAD_THRESHOLDS:
        with pytest.raises(error, match=f"threshold \\(the cost limit κ\\) {message}"):
            policy.reset(threshold)
    policy.reset(np.float32(20))  # numpy numbers are numbers
    policy.reset(math.inf)  # no limit


@pytest.mark.parametrize("algo", POLICIES)
def test_bad_costs_are_refused_single_and_batched(algo: str) -> None:
    make, obs_dim = POLICIES[algo]
    policy = make()
    policy.reset(20.0)
    policy.act(np.zeros(obs_dim, np.float32))
    for cost, error, message in BAD_COSTS[:4]:
        with pytest.raises(error, match=f"cost {message}"):
            policy.act(np.zeros(obs_dim, np.float32), cost)
    policy.reset(20.0, batch_size=2)
    for cost, error, message in BAD_COSTS:
        with pytest.raises(error, match=f"cost {message}"):
            policy.act(np.zeros((2, obs_dim), np.float32), cost)


@pytest.mark.parametrize("algo", POLICIES)
def test_batched_use_equals_single_env_use(algo: str) -> None:
    """Two envs acted on together give the actions two one-env policies give, with valid costs of every form."""
    make, obs_dim = POLICIES[algo]
    batched = make()
    singles = [type(batched)(batched.module) for _ in range(2)]
    rng = np.random.default_rng(0)
    batched.reset(5, batch_size=2)
    for single in singles:
        single.reset(5)
    cost = np.zeros(2)
    for _ in range(6):
        obs = rng.normal(size=(2, obs_dim)).astype(np.float32)
        actions = batched.act(obs, cost)
        for i, single in enumerate(singles):
            np.testing.assert_allclose(single.act(obs[i], cost[i]), actions[i], rtol=1e-5, atol=1e-5)
        cost = rng.integers(0, 2, size=2)  # integer costs, as some envs report
