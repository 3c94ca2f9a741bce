"""Torch CPQ learner: the family's learner (``vae_actor_critic.vae_actor_critic``) with CPQ's losses."""

from __future__ import annotations

from rllib_caps.algorithms.cpq.losses import cpq_losses
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticTorchLearner


class CPQTorchLearner(VAEActorCriticTorchLearner):
    LOSS_FUNCTION = staticmethod(cpq_losses)
