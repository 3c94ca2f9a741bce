"""Torch BEAR-Lag learner: the family's learner (``vae_actor_critic.vae_actor_critic``) with BEAR-Lag's noise, losses
and multiplier state (α and the PID's)."""

from __future__ import annotations

from rllib_caps.algorithms.bearl.forward import bearl_noise_shapes
from rllib_caps.algorithms.bearl.losses import bearl_losses
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticTorchLearner, multiplier_buffers


class BEARLTorchLearner(VAEActorCriticTorchLearner):
    LOSS_FUNCTION = staticmethod(bearl_losses)
    NOISE_SHAPES = staticmethod(bearl_noise_shapes)
    STATE_BUFFERS = multiplier_buffers(k.LOG_ALPHA, k.PID_INTEGRAL, k.PID_ERROR)
