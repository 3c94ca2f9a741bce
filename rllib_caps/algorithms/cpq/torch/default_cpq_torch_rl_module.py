"""Torch CPQ RLModule: the family's networks (``rllib_caps.core.vae_actor_critic``) with one critic twin pair each,
and the training forward CPQ's losses read."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cpq.default_cpq_rl_module import DefaultCPQRLModule
from rllib_caps.algorithms.cpq.keys import OOD_KL, QC_OOD
from rllib_caps.core import keys as k
from rllib_caps.core.nets import frozen_call
from rllib_caps.core.vae import gaussian_kl
from rllib_caps.core.vae_actor_critic import VAEActorCriticTorchModule


class DefaultCPQTorchRLModule(VAEActorCriticTorchModule, DefaultCPQRLModule):
    CRITIC_GROUPS = 1

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs, actions, next_obs = batch[Columns.OBS], batch[Columns.ACTIONS], batch[Columns.NEXT_OBS]
        recon, mean, std = self.vae(obs, actions)
        out = {k.VAE_RECON: recon, k.VAE_MEAN: mean, k.VAE_STD: std,
               k.Q_DATA: self.qr(obs, actions), k.QC_DATA: self.qc(obs, actions), k.LOG_ALPHA: self.duals.log_alpha}
        with torch.no_grad():
            next_actions = torch.tanh(self.actor(next_obs).sample())  # the current actor (OSRL and the paper)
            out[k.Q_NEXT] = self.qr_target(next_obs, next_actions).amin(dim=(0, 1))
            out[k.QC_NEXT] = self.qc_target(next_obs, next_actions).amin(dim=(0, 1))
            # OOD probes: N policy samples per state; OSRL probes with the pre-tanh samples, the paper with actions.
            samples = self.actor(obs).sample((self.num_samples,))
            samples = samples if self.osrl else torch.tanh(samples)
            obs_rep = obs.unsqueeze(0).expand(self.num_samples, -1, -1)
            out[OOD_KL] = gaussian_kl(*self.vae.encode(obs_rep, samples))
            if self.osrl:
                out[QC_OOD] = self.qc_target(obs_rep, samples).amin(dim=(0, 1))
        if not self.osrl:
            out[QC_OOD] = self.qc(obs_rep, samples).amin(dim=(0, 1))
        policy_actions = torch.tanh(self.actor(obs).rsample())
        out[k.Q_PI] = frozen_call(self.qr, obs, policy_actions).amin(dim=(0, 1))
        out[k.QC_PI] = frozen_call(self.qc, obs, policy_actions).amin(dim=(0, 1))
        return out
