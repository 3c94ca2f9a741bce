"""Torch CPQ learner: the family's learner (``vae_actor_critic.vae_actor_critic``) with CPQ's noise, losses and
multiplier state (α)."""

from __future__ import annotations

from rllib_caps.algorithms.cpq.forward import cpq_noise_shapes
from rllib_caps.algorithms.cpq.losses import cpq_losses
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticTorchLearner, multiplier_buffers


class CPQTorchLearner(VAEActorCriticTorchLearner):
    LOSS_FUNCTION = staticmethod(cpq_losses)
    NOISE_SHAPES = staticmethod(cpq_noise_shapes)
    STATE_BUFFERS = multiplier_buffers(k.LOG_ALPHA)
