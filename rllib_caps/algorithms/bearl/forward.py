"""BEAR-Lag's training forward as a function of the networks (no Ray): what ``losses.bearl_losses`` consumes. The
RLModule's ``_forward_train`` and the plain benchmark loop both call it."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.bearl.keys import ACTOR_SAMPLES, PRIOR_NOISE, VAE_SAMPLES
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.noise import reparameterised
from rllib_caps.core.nets import frozen_call
from rllib_caps.data import schema

CRITIC_GROUPS = 2  # OSRL's EnsembleDoubleQCritic with num_q = 2: Q¹ and Q² are each the min of a twin pair
TARGETS = ["qr", "qc", "actor"]  # OSRL soft-updates the actor too; the backups sample the target actor


def bearl_noise_shapes(nets: Any, batch_size: int) -> dict[str, tuple[int, ...]]:
    """The standard-normal batch columns of one step (``vae_actor_critic.noise``): the VAE's latent, the N target-actor
    samples per s′, the N prior latents and the N policy samples per s."""
    n, act_dim, latent = nets.num_samples, nets.act_dim, nets.vae.latent_dim
    return {k.VAE_NOISE: (batch_size, latent), k.NEXT_ACTION_NOISE: (batch_size, n, act_dim),
            PRIOR_NOISE: (batch_size, n, latent), k.ACTION_NOISE: (batch_size, n, act_dim)}


def bearl_training_outputs(nets: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """VAE reconstruction, every critic net at (s, a), the target critics' group mins at N target-actor samples
    per s′ (2, B, N), N pre-tanh VAE and policy samples per s (B, N, A), the critics (frozen) at the first policy
    sample, and the multipliers' state. Every sample's noise is the batch's (``bearl_noise_shapes``)."""
    obs, actions, next_obs = batch[schema.OBS], batch[schema.ACTIONS], batch[schema.NEXT_OBS]
    size, n = obs.shape[0], nets.num_samples
    recon, mean, std = nets.vae(obs, actions, batch[k.VAE_NOISE])
    out = {k.VAE_RECON: recon, k.VAE_MEAN: mean, k.VAE_STD: std,
           k.Q_DATA: nets.qr(obs, actions), k.QC_DATA: nets.qc(obs, actions),
           k.LOG_ALPHA: nets.duals.log_alpha, k.PID_INTEGRAL: nets.duals.pid_integral,
           k.PID_ERROR: nets.duals.pid_error}
    with torch.no_grad():
        next_rep = next_obs.repeat_interleave(n, 0)
        next_noise = batch[k.NEXT_ACTION_NOISE].reshape(size * n, nets.act_dim)
        next_actions = torch.tanh(reparameterised(nets.actor_target(next_rep), next_noise))
        out[k.Q_NEXT] = nets.qr_target(next_rep, next_actions).min(1).values.view(-1, size, n)
        out[k.QC_NEXT] = nets.qc_target(next_rep, next_actions).min(1).values.view(-1, size, n)
        out[VAE_SAMPLES] = nets.vae.sample_raw(obs, batch[PRIOR_NOISE])
    noise = batch[k.ACTION_NOISE].reshape(size * n, nets.act_dim)
    raw = reparameterised(nets.actor(obs.repeat_interleave(n, 0)), noise).view(size, n, nets.act_dim)
    first = torch.tanh(raw[:, 0])
    out[ACTOR_SAMPLES] = raw
    out[k.Q_PI] = frozen_call(nets.qr, obs, first).min(1).values
    out[k.QC_PI] = frozen_call(nets.qc, obs, first).min(1).values
    return out
