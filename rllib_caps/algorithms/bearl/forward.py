"""BEAR-Lag's training forward as a function of the networks (no Ray): what ``losses.bearl_losses`` consumes. The
RLModule's ``_forward_train`` and the plain benchmark loop both call it."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.bearl.keys import ACTOR_SAMPLES, VAE_SAMPLES
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.core.nets import frozen_call
from rllib_caps.data import schema

CRITIC_GROUPS = 2  # OSRL's EnsembleDoubleQCritic with num_q = 2: Q¹ and Q² are each the min of a twin pair
TARGETS = ["qr", "qc", "actor"]  # OSRL soft-updates the actor too; the backups sample the target actor


def bearl_training_outputs(nets: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """VAE reconstruction, every critic net at (s, a), the target critics' group mins at N target-actor samples
    per s′ (2, B, N), N pre-tanh VAE and policy samples per s (B, N, A), the critics (frozen) at the first policy
    sample, and the multipliers' state."""
    obs, actions, next_obs = batch[schema.OBS], batch[schema.ACTIONS], batch[schema.NEXT_OBS]
    size, n = obs.shape[0], nets.num_samples
    recon, mean, std = nets.vae(obs, actions)
    out = {k.VAE_RECON: recon, k.VAE_MEAN: mean, k.VAE_STD: std,
           k.Q_DATA: nets.qr(obs, actions), k.QC_DATA: nets.qc(obs, actions),
           k.LOG_ALPHA: nets.duals.log_alpha, k.PID_INTEGRAL: nets.duals.pid_integral,
           k.PID_ERROR: nets.duals.pid_error}
    # rsample under no_grad: the values sample() draws, without its check of σ on the host (a device sync)
    with torch.no_grad():
        next_rep = next_obs.repeat_interleave(n, 0)
        next_actions = torch.tanh(nets.actor_target(next_rep).rsample())
        out[k.Q_NEXT] = nets.qr_target(next_rep, next_actions).min(1).values.view(-1, size, n)
        out[k.QC_NEXT] = nets.qc_target(next_rep, next_actions).min(1).values.view(-1, size, n)
        out[VAE_SAMPLES] = nets.vae.sample_raw(obs, n)
    raw = nets.actor(obs.repeat_interleave(n, 0)).rsample().view(size, n, nets.act_dim)
    first = torch.tanh(raw[:, 0])
    out[ACTOR_SAMPLES] = raw
    out[k.Q_PI] = frozen_call(nets.qr, obs, first).min(1).values
    out[k.QC_PI] = frozen_call(nets.qc, obs, first).min(1).values
    return out
