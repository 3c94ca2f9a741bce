"""Torch BEAR-Lag learner: the family's learner (``vae_actor_critic.vae_actor_critic``) with BEAR-Lag's losses."""

from __future__ import annotations

from rllib_caps.algorithms.bearl.losses import bearl_losses
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticTorchLearner


class BEARLTorchLearner(VAEActorCriticTorchLearner):
    LOSS_FUNCTION = staticmethod(bearl_losses)
