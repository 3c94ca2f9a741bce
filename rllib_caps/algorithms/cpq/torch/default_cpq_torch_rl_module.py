"""Torch CPQ RLModule: the family's networks (``vae_actor_critic.vae_actor_critic``) with one critic twin pair each;
``_forward_train`` is ``cpq.forward.cpq_training_outputs``."""

from __future__ import annotations

from typing import Any

from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cpq.default_cpq_rl_module import DefaultCPQRLModule
from rllib_caps.algorithms.cpq.forward import CRITIC_GROUPS, TARGETS, cpq_training_outputs
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticTorchModule


class DefaultCPQTorchRLModule(VAEActorCriticTorchModule, DefaultCPQRLModule):
    CRITIC_GROUPS = CRITIC_GROUPS
    TARGETS = TARGETS

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return cpq_training_outputs(self, batch)
