"""CAPS's SAC+BC backbone: a learned temperature besides the twin critics, the heads' sampling noise drawn with
the minibatch."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.caps.backbone import Backbone
from rllib_caps.algorithms.caps.keys import NEXT_PI_NOISE, PI_NOISE
from rllib_caps.algorithms.caps.sacbc.forward import add_temperature, sacbc_forward_train
from rllib_caps.algorithms.caps.sacbc.losses import SACBCLossSettings, caps_sacbc_losses
from rllib_caps.data import TransitionDataset, schema


def sacbc_optimizer_groups(module: torch.nn.Module, config: Any) -> dict[str, tuple[list[torch.nn.Parameter], float]]:
    """The actor, the twin critics of reward and cost, and the temperature log α (at the actor's rate)."""
    groups = {"actor": (module.actor, config.resolved_actor_lr), "qr": (module.qr, config.resolved_critic_lr),
              "qc": (module.qc, config.resolved_critic_lr)}
    return {name: (list(net.parameters()), lr) for name, (net, lr) in groups.items()} | {
        "alpha": ([module.log_alpha], config.resolved_actor_lr)}


def sacbc_noise(dataset: TransitionDataset, batch_size: int, generator: torch.Generator, config: Any
                ) -> dict[str, torch.Tensor]:
    """The standard-normal noise of every head's sampled action at s and at s' (``PI_NOISE``, ``NEXT_PI_NOISE``,
    each ``(B, K, A)``) from ``generator``."""
    shape = (batch_size, config.num_heads, dataset.tensors[schema.ACTIONS].shape[-1])
    return {key: torch.randn(shape, generator=generator, device=generator.device)
            for key in (PI_NOISE, NEXT_PI_NOISE)}


def sacbc_loss_settings(config: Any) -> SACBCLossSettings:
    """The CAPS config's settings of the SAC+BC losses."""
    return SACBCLossSettings(
        gamma=config.gamma, reward_scale=config.reward_scale, lambdas=tuple(config.resolved_lambdas),
        cost_maximize=config.cost_maximize, time_limit=config.resolved_time_limit,
        q_weight=config.q_weight, cost_gamma=config.resolved_cost_gamma,
    )


SACBC = Backbone(
    name="sacbc", loss_terms=caps_sacbc_losses, loss_settings=sacbc_loss_settings,
    optimizer_groups=sacbc_optimizer_groups, defaults={"actor_lr": 1e-4, "critic_lr": 1e-3, "clamp_cost_q": True},
    member_settings={"lambdas": "lambdas"}, add_training_nets=add_temperature, forward_train=sacbc_forward_train,
    draw_extras=sacbc_noise, state_dependent_std=True,
)
