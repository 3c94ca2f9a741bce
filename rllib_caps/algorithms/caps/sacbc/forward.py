"""The SAC+BC backbone's part of the CAPS module: its temperature log α and what its losses need of a training
forward pass besides the critics at (s, a)."""

from __future__ import annotations

import math
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from torch import nn

from rllib_caps.algorithms.caps.keys import (
    LOG_ALPHA,
    NEXT_LOG_PROBS,
    NEXT_PI_NOISE,
    PI_ACTIONS,
    PI_LOG_PROBS,
    PI_NOISE,
    QC_NEXT,
    QC_NEXT_TWIN,
    QC_PI,
    QC_PI_TWIN,
    QR_NEXT,
    QR_NEXT_TWIN,
    QR_PI,
    QR_PI_TWIN,
)
from rllib_caps.algorithms.caps.sacbc.losses import squashed_gaussian_sample
from rllib_caps.core.nets import frozen_call


def add_temperature(module: nn.Module, cfg: dict[str, Any], critic_obs_dim: int, hidden: list[int], fused: bool
                    ) -> None:
    """The shared entropy temperature α, learned in log space from ``initial_alpha``."""
    module.log_alpha = nn.Parameter(torch.tensor(math.log(float(cfg["initial_alpha"]))))


def sacbc_forward_train(module: nn.Module, batch: dict[str, Any], critic_obs: torch.Tensor,
                        next_critic_obs: torch.Tensor, step: torch.Tensor | None, next_step: torch.Tensor | None
                        ) -> dict[str, Any]:
    """What ``caps_sacbc_losses`` needs besides the critics at (s, a): every head's reparameterised action at s
    with the critics evaluated there with frozen parameters (the actor loss must not move them), and every head's
    next action at s' with its log-density and the target critics (no gradient). The samples' ε are the
    minibatch's (``PI_NOISE``, ``NEXT_PI_NOISE``)."""
    mean, log_std = module.actor.squashed_gaussian(module.actor_input(batch[Columns.OBS], step))
    pi_actions, pi_log_probs = squashed_gaussian_sample(mean, log_std, batch.get(PI_NOISE))
    obs_k = critic_obs.unsqueeze(1).expand(-1, module.num_heads, -1)
    qr_pi = frozen_call(module.qr, obs_k, pi_actions)
    qc_pi = frozen_call(module.qc, obs_k, pi_actions)
    with torch.no_grad():
        next_actor_obs = module.actor_input(batch[Columns.NEXT_OBS], next_step)
        next_actions, next_log_probs = squashed_gaussian_sample(*module.actor.squashed_gaussian(next_actor_obs),
                                                                batch.get(NEXT_PI_NOISE))
        next_obs_k = next_critic_obs.unsqueeze(1).expand(-1, module.num_heads, -1)
        qr_next = module.qr_target(next_obs_k, next_actions)
        qc_next = module.qc_target(next_obs_k, next_actions)
    return {
        PI_ACTIONS: pi_actions, PI_LOG_PROBS: pi_log_probs, NEXT_LOG_PROBS: next_log_probs,
        LOG_ALPHA: module.log_alpha,
        QR_PI: qr_pi[0], QR_PI_TWIN: qr_pi[1], QC_PI: qc_pi[0], QC_PI_TWIN: qc_pi[1],
        QR_NEXT: qr_next[0], QR_NEXT_TWIN: qr_next[1], QC_NEXT: qc_next[0], QC_NEXT_TWIN: qc_next[1],
    }
