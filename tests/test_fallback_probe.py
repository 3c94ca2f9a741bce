"""``benchmarks/fallback_probe.py``: a BC module's action replaces the cost head's wherever the CAPS module reads its
heads (the checkpoint side runs in the proxy benchmark's measurements, docs/paper.md)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from test_caps_module import ACT, OBS, make_module

from benchmarks.fallback_probe import with_fallback_head
from rllib_caps.algorithms.bc.torch.default_bc_torch_rl_module import DefaultBCTorchRLModule
from rllib_caps.algorithms.caps.policy import CAPSPolicy


def bc_module() -> DefaultBCTorchRLModule:
    return DefaultBCTorchRLModule(observation_space=gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32),
                                  action_space=gym.spaces.Box(-2.0, 2.0, (ACT,), np.float32),
                                  model_config={"hidden": [8], "policy": "deterministic"})


def test_the_fallback_acts_as_the_last_head_and_the_rule_reads_its_critic_values() -> None:
    torch.manual_seed(0)
    policy, fallback = CAPSPolicy(make_module(num_heads=3, head_selection="head_order")), bc_module()
    obs, step = torch.randn(5, OBS), torch.zeros(5, dtype=torch.float64)
    trained = policy.module.head_means(obs, step)
    module = with_fallback_head(policy, fallback).module
    means, _, q_cost = module.head_values(obs, step)
    assert torch.equal(means[:, :2], trained[:, :2])
    assert torch.allclose(means[:, 2], fallback.actions(obs))
    assert not torch.allclose(means[:, 2], trained[:, 2])
    assert torch.allclose(q_cost[:, 2], module.cost_q(module.critic_input(obs, step), fallback.actions(obs), step))
    # with no budget no head is feasible: the rule falls back to the head of lowest Q^c, whose action is taken
    actions, heads = module.switching_actions(obs, torch.zeros(5, dtype=torch.float64), step, 0.0)
    assert torch.equal(heads, torch.argmin(q_cost, dim=-1))
    assert torch.allclose(actions, means[torch.arange(5), heads])
