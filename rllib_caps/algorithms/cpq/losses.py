"""CPQ losses as small pure torch functions (no Ray): Constraints Penalized Q-learning (Xu et al. 2022) with
OSRL's choices; docs/baselines.md lists every choice and its OSRL/paper switch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rllib_caps.algorithms.cost_limited.lagrangian import dual_log_step
from rllib_caps.algorithms.cpq.keys import OOD_KL, QC_OOD
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.vae import vae_loss
from rllib_caps.core.losses import ensemble_mse, td_target
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import schema


def linear_quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(values, q)`` of a 1-D tensor (linear interpolation between the two nearest ranks) as one sort
    and two static indices, so that it vmaps over a population's members (``torch.quantile`` has no batching rule)
    and compiles into one graph."""
    ordered = values.sort().values
    rank = q * (values.numel() - 1)
    below = math.floor(rank)
    return torch.lerp(ordered[below], ordered[math.ceil(rank)], rank - below)


def ood_cost(kl: torch.Tensor, qc: torch.Tensor, quantile: float) -> torch.Tensor:
    """CPQ's out-of-distribution cost: ``E_samples[1(KL ≥ q) Q_c]`` per state, where q is the ``quantile`` of the
    VAE-encoder KL over all samples of the batch (OSRL: 0.75). ``kl`` and ``qc`` have shape ``(N, B)``; returns
    ``(B,)``. Gradients flow through ``qc`` only."""
    cutoff = linear_quantile(kl.detach().reshape(-1), quantile)
    return ((kl >= cutoff).to(qc.dtype) * qc).mean(0)


def feasible(qc: torch.Tensor, threshold: float | torch.Tensor) -> torch.Tensor:
    """CPQ's safety indicator 1(Q_c ≤ q̄_c) as a float mask."""
    return (qc <= threshold).to(qc.dtype)


@dataclass(frozen=True)
class CPQLossSettings:
    """What the CPQ losses need; ``CPQConfig.loss_settings()`` fills it (the one home of the defaults)."""

    gamma: float
    reward_scale: float
    kl_weight: float
    ood_quantile: float
    ood_cost_scale: float  # OSRL's qc_scalar: the OOD constraint's level is this × q̄_c
    alpha_lr: float
    cost_threshold: float | torch.Tensor  # q̄_c; a tensor: a population member's own (its κ's)
    implementation: str
    time_limit: str


def cpq_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], s: CPQLossSettings,
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """All CPQ loss terms of one step, the logged metrics, and α's new state.

    - VAE: MSE + β KL;
    - reward critic: y = r + γ(1 − d) 1(Q_c′(s′, a′) ≤ q̄_c) Q′(s′, a′), a′ from the current actor;
    - cost critic: MSE to y_c = c + γ Q_c′(s′, a′) ("osrl": no done mask; "paper": masked), minus
      α (E[q_ood] − s·q̄_c) with q_ood = ``ood_cost``; in "osrl" q_ood comes from the detached target critic, so
      this term has no gradient (as in OSRL); in "paper" it raises the online Q_c on OOD actions;
    - α: log α += lr α (s·q̄_c − E[q_ood]);
    - actor: −E[1(Q_c(s, π(s)) ≤ q̄_c) Q(s, π(s))].
    """
    osrl = s.implementation == "osrl"
    ends = episode_ends(batch, s.time_limit)
    q_next, qc_next = fwd_out[k.Q_NEXT], fwd_out[k.QC_NEXT]
    reward_target = td_target(s.reward_scale * batch[schema.REWARDS], feasible(qc_next, s.cost_threshold) * q_next,
                              s.gamma, ends)
    cost_target = td_target(batch[schema.COSTS], qc_next, s.gamma, None if osrl else ends)
    q_ood = ood_cost(fwd_out[OOD_KL], fwd_out[QC_OOD], s.ood_quantile).mean()
    level = s.ood_cost_scale * s.cost_threshold
    alpha = fwd_out[k.LOG_ALPHA].exp()
    cost_regression = ensemble_mse(fwd_out[k.QC_DATA], cost_target)

    losses = {
        "vae_loss": vae_loss(fwd_out[k.VAE_RECON], batch[schema.ACTIONS], fwd_out[k.VAE_MEAN], fwd_out[k.VAE_STD],
                             s.kl_weight),
        "qr_loss": ensemble_mse(fwd_out[k.Q_DATA], reward_target),
        "qc_loss": cost_regression - alpha * (q_ood - level),
        "actor_loss": -(feasible(fwd_out[k.QC_PI], s.cost_threshold) * fwd_out[k.Q_PI]).mean(),
    }
    metrics = {"qc_regression": cost_regression, "qc_ood": q_ood.detach(), "alpha": alpha,
               "qc_pi": fwd_out[k.QC_PI].mean(),
               "feasible_fraction": feasible(fwd_out[k.QC_PI], s.cost_threshold).mean(),
               "cost_threshold": torch.zeros_like(q_ood) + s.cost_threshold}
    state = {k.LOG_ALPHA: dual_log_step(fwd_out[k.LOG_ALPHA], (level - q_ood).detach(), s.alpha_lr)}
    return losses, metrics, state
