"""Torch BEAR-Lag RLModule: the family's networks (``vae_actor_critic.vae_actor_critic``) with two critic groups and
a target actor; ``_forward_train`` is ``bearl.forward.bearl_training_outputs``."""

from __future__ import annotations

from typing import Any

from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.bearl.default_bearl_rl_module import DefaultBEARLRLModule
from rllib_caps.algorithms.bearl.forward import CRITIC_GROUPS, TARGETS, bearl_training_outputs
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticTorchModule


class DefaultBEARLTorchRLModule(VAEActorCriticTorchModule, DefaultBEARLRLModule):
    CRITIC_GROUPS = CRITIC_GROUPS
    TARGETS = TARGETS

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return bearl_training_outputs(self, batch)
