"""CAPS's IQL backbone: value nets besides the twin critics, no extra draws, advantage-weighted heads."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.caps.backbone import Backbone
from rllib_caps.algorithms.caps.iql.forward import add_value_nets, iql_forward_train
from rllib_caps.algorithms.caps.iql.losses import IQLLossSettings, caps_iql_losses


def iql_optimizer_groups(module: torch.nn.Module, config: Any) -> dict[str, tuple[list[torch.nn.Parameter], float]]:
    """The actor, the twin critics of reward and cost, and the value nets, each with its Adam learning rate."""
    groups = {"actor": (module.actor, config.resolved_actor_lr), "qr": (module.qr, config.resolved_critic_lr),
              "qc": (module.qc, config.resolved_critic_lr), "values": (module.values, config.value_lr)}
    return {name: (list(net.parameters()), lr) for name, (net, lr) in groups.items()}


def iql_loss_settings(config: Any) -> IQLLossSettings:
    """The CAPS config's settings of the IQL losses."""
    return IQLLossSettings(
        gamma=config.gamma, reward_scale=config.reward_scale, expectile_reward=config.expectile_reward,
        expectile_cost=config.expectile_cost, beta=config.awr_beta, beta_cost=config.beta_cost,
        max_weight=config.max_weight, lambdas=tuple(config.resolved_lambdas), implementation=config.implementation,
        time_limit=config.resolved_time_limit, cost_gamma=config.resolved_cost_gamma,
    )


IQL = Backbone(
    name="iql", loss_terms=caps_iql_losses, loss_settings=iql_loss_settings,
    optimizer_groups=iql_optimizer_groups, defaults={"actor_lr": 3e-4, "critic_lr": 3e-4, "clamp_cost_q": False},
    member_settings={"awr_beta": "beta", "lambdas": "lambdas"}, add_training_nets=add_value_nets,
    forward_train=iql_forward_train, advantage_weighted=True, code_anneals_actor_lr=True,
)
