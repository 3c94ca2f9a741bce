"""Torch BC RLModule: an MLP actor with tanh output, and a learned log-std for the Gaussian variant."""

from __future__ import annotations

import math
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

from rllib_caps.algorithms.bc.default_bc_rl_module import BC_LOG_STD, BC_MEANS, DefaultBCRLModule
from rllib_caps.core.nets import mlp
from rllib_caps.core.torch_rl_module import OfflineTorchRLModule

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # OSRL's clamp of the Gaussian actors' log σ


class DefaultBCTorchRLModule(OfflineTorchRLModule, DefaultBCRLModule):
    framework: str = "torch"

    @override(TorchRLModule)
    def setup(self) -> None:
        obs_dim = int(math.prod(self.observation_space.shape))
        act_dim = int(math.prod(self.action_space.shape))
        self.actor = mlp(obs_dim, list(self.model_config["hidden"]), act_dim)
        self.log_std = (nn.Parameter(torch.zeros(act_dim)) if self.model_config.get("policy") == "gaussian"
                        else None)

    def actions(self, obs: torch.Tensor) -> torch.Tensor:
        """π(s): the tanh-squashed mean in the normalised action box [-1, 1]."""
        return torch.tanh(self.actor(obs))

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = batch[Columns.OBS].float()
        return {Columns.ACTIONS: self.actions(obs)}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)  # offline: never explores

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        log_std = None if self.log_std is None else self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        return {BC_MEANS: self.actions(batch[Columns.OBS]), BC_LOG_STD: log_std}
