"""Torch BEAR-Lag RLModule: the family's networks (``rllib_caps.core.vae_actor_critic``) with two critic groups and
a target actor, and the training forward BEAR-Lag's losses read."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.bearl.default_bearl_rl_module import DefaultBEARLRLModule
from rllib_caps.algorithms.bearl.keys import ACTOR_SAMPLES, VAE_SAMPLES
from rllib_caps.core import keys as k
from rllib_caps.core.nets import frozen_call
from rllib_caps.core.vae_actor_critic import VAEActorCriticTorchModule


class DefaultBEARLTorchRLModule(VAEActorCriticTorchModule, DefaultBEARLRLModule):
    CRITIC_GROUPS = 2

    def target_names(self) -> list[str]:
        return ["qr", "qc", "actor"]  # OSRL soft-updates the actor too; the backups sample the target actor

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs, actions, next_obs = batch[Columns.OBS], batch[Columns.ACTIONS], batch[Columns.NEXT_OBS]
        size, n = obs.shape[0], self.num_samples
        recon, mean, std = self.vae(obs, actions)
        out = {k.VAE_RECON: recon, k.VAE_MEAN: mean, k.VAE_STD: std,
               k.Q_DATA: self.qr(obs, actions), k.QC_DATA: self.qc(obs, actions),
               k.LOG_ALPHA: self.duals.log_alpha, k.PID_INTEGRAL: self.duals.pid_integral,
               k.PID_ERROR: self.duals.pid_error}
        with torch.no_grad():
            next_rep = next_obs.repeat_interleave(n, 0)
            next_actions = torch.tanh(self.actor_target(next_rep).sample())
            out[k.Q_NEXT] = self.qr_target(next_rep, next_actions).min(1).values.view(-1, size, n)
            out[k.QC_NEXT] = self.qc_target(next_rep, next_actions).min(1).values.view(-1, size, n)
            out[VAE_SAMPLES] = self.vae.sample_raw(obs, n)
        raw = self.actor(obs.repeat_interleave(n, 0)).rsample().view(size, n, self.act_dim)
        first = torch.tanh(raw[:, 0])
        out[ACTOR_SAMPLES] = raw
        out[k.Q_PI] = frozen_call(self.qr, obs, first).min(1).values
        out[k.QC_PI] = frozen_call(self.qc, obs, first).min(1).values
        return out
