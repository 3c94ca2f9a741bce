"""The IQL backbone's part of the CAPS module: its value nets (V^r, V^c) and what its losses need of a training
forward pass besides the critics at (s, a)."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from torch import nn

from rllib_caps.algorithms.caps.keys import HEAD_LOG_STD, HEAD_MEANS, VC_PREDS, VC_PREDS_NEXT, VR_PREDS, VR_PREDS_NEXT
from rllib_caps.core.nets import MLPPair


def add_value_nets(module: nn.Module, cfg: dict[str, Any], critic_obs_dim: int, hidden: list[int], fused: bool
                   ) -> None:
    """The value nets (V^r, V^c) that IQL trains besides the twin critics."""
    module.values = MLPPair(critic_obs_dim, hidden, fused)


def iql_forward_train(module: nn.Module, batch: dict[str, Any], critic_obs: torch.Tensor,
                      next_critic_obs: torch.Tensor, step: torch.Tensor | None, next_step: torch.Tensor | None
                      ) -> dict[str, Any]:
    """The values at s and s' (no gradient at s'), the target twins at (s, a), every head's mean action and the
    heads' log-std: what ``caps_iql_losses`` needs besides the online critics."""
    vr, vc = module.values(critic_obs)
    with torch.no_grad():
        out = module.forward_target(batch)
        out[VR_PREDS_NEXT], out[VC_PREDS_NEXT] = module.values(next_critic_obs)
    out.update({HEAD_MEANS: module.head_means(batch[Columns.OBS], step),
                HEAD_LOG_STD: module.actor.clamped_log_std(), VR_PREDS: vr, VC_PREDS: vc})
    return out
