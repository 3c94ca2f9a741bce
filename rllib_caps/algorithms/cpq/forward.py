"""CPQ's training forward as a function of the networks (no Ray): what ``losses.cpq_losses`` consumes. The
RLModule's ``_forward_train`` and the plain benchmark loop both call it."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.cpq.keys import OOD_KL, OOD_NOISE, QC_OOD
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.noise import reparameterised
from rllib_caps.algorithms.vae_actor_critic.vae import gaussian_kl
from rllib_caps.core.nets import frozen_call
from rllib_caps.data import schema

CRITIC_GROUPS = 1  # OSRL's EnsembleQCritic with num_q = 2: the min of one twin pair
TARGETS = ["qr", "qc"]  # OSRL also soft-updates an actor copy it never reads


def cpq_noise_shapes(nets: Any, batch_size: int) -> dict[str, tuple[int, ...]]:
    """The standard-normal batch columns of one step (``vae_actor_critic.noise``): the VAE's latent, the actor's sample
    at s′, its N OOD probes per s and its sample at s."""
    act_dim = nets.act_dim
    return {k.VAE_NOISE: (batch_size, nets.vae.latent_dim), k.NEXT_ACTION_NOISE: (batch_size, act_dim),
            OOD_NOISE: (nets.num_samples, batch_size, act_dim), k.ACTION_NOISE: (batch_size, act_dim)}


def cpq_training_outputs(nets: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """VAE reconstruction, every critic net at (s, a), the target critics' mins at a current-actor sample a′ ~ π(s′),
    the OOD probes (N policy samples per s: their VAE-encoder KL and Q_c), the critics (frozen) at a reparameterised
    policy action, and α's state. Every sample's noise is the batch's (``cpq_noise_shapes``)."""
    obs, actions, next_obs = batch[schema.OBS], batch[schema.ACTIONS], batch[schema.NEXT_OBS]
    recon, mean, std = nets.vae(obs, actions, batch[k.VAE_NOISE])
    out = {k.VAE_RECON: recon, k.VAE_MEAN: mean, k.VAE_STD: std,
           k.Q_DATA: nets.qr(obs, actions), k.QC_DATA: nets.qc(obs, actions), k.LOG_ALPHA: nets.duals.log_alpha}
    with torch.no_grad():
        next_actions = torch.tanh(reparameterised(nets.actor(next_obs), batch[k.NEXT_ACTION_NOISE]))
        out[k.Q_NEXT] = nets.qr_target(next_obs, next_actions).amin(dim=(0, 1))
        out[k.QC_NEXT] = nets.qc_target(next_obs, next_actions).amin(dim=(0, 1))
        # OSRL probes with the pre-tanh samples; the paper with the policy's actions.
        samples = reparameterised(nets.actor(obs), batch[OOD_NOISE])
        samples = samples if nets.osrl else torch.tanh(samples)
        obs_rep = obs.unsqueeze(0).expand(nets.num_samples, -1, -1)
        out[OOD_KL] = gaussian_kl(*nets.vae.encode(obs_rep, samples))
        if nets.osrl:  # OSRL: the detached target critic, so the inflation term has no gradient
            out[QC_OOD] = nets.qc_target(obs_rep, samples).amin(dim=(0, 1))
    if not nets.osrl:
        out[QC_OOD] = nets.qc(obs_rep, samples).amin(dim=(0, 1))
    policy_actions = torch.tanh(reparameterised(nets.actor(obs), batch[k.ACTION_NOISE]))
    out[k.Q_PI] = frozen_call(nets.qr, obs, policy_actions).amin(dim=(0, 1))
    out[k.QC_PI] = frozen_call(nets.qc, obs, policy_actions).amin(dim=(0, 1))
    return out
