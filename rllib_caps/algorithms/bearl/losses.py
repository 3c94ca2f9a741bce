"""BEAR-Lag losses as small pure torch functions (no Ray): BEAR (Kumar et al. 2019) with OSRL's cost critic and
PID-Lagrangian multiplier (Stooke et al. 2020). docs/baselines.md lists every choice and its OSRL/paper switch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rllib_caps.algorithms.bearl.keys import ACTOR_SAMPLES, VAE_SAMPLES
from rllib_caps.algorithms.cost_limited.lagrangian import PIDGains, dual_log_step, pid_lagrangian
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.vae import vae_loss
from rllib_caps.core.losses import ensemble_mse, td_target
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import schema

KERNELS = ("gaussian", "laplacian")


def mmd(x: torch.Tensor, y: torch.Tensor, sigma: float, kernel: str) -> torch.Tensor:
    """Per-state MMD between sample sets ``x`` (B, N, A) and ``y`` (B, M, A), shape ``(B,)``:
    sqrt(E k(x, x') + E k(y, y') − 2 E k(x, y) + 1e−6), with k = exp(−‖x − y‖² / (2σ)) ("gaussian") or
    exp(−‖x − y‖₁ / (2σ)) ("laplacian"), as BEAR's and OSRL's code write them."""
    if kernel not in KERNELS:
        raise ValueError(f"mmd_kernel must be one of {KERNELS}, got {kernel!r}")

    def mean_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = a.unsqueeze(2) - b.unsqueeze(1)
        distance = diff.pow(2).sum(-1) if kernel == "gaussian" else diff.abs().sum(-1)
        return torch.exp(-distance / (2.0 * sigma)).mean(dim=(1, 2))

    return (mean_kernel(x, x) + mean_kernel(y, y) - 2.0 * mean_kernel(x, y) + 1e-6).sqrt()


def soft_clipped_target(q_next: torch.Tensor, weight_on_min: float) -> torch.Tensor:
    """BEAR's backup value: over the two critic groups, w·min + (1 − w)·max, then the max over the N sampled next
    actions. ``q_next`` has shape ``(2, B, N)``; returns ``(B,)``."""
    mixed = weight_on_min * q_next.min(0).values + (1.0 - weight_on_min) * q_next.max(0).values
    return mixed.max(-1).values


@dataclass(frozen=True)
class BEARLLossSettings:
    """What the BEAR-Lag losses need; ``BEARLConfig.loss_settings()`` fills it (the one home of the defaults)."""

    gamma: float
    reward_scale: float
    kl_weight: float
    target_mix: float
    mmd_sigma: float
    mmd_kernel: str
    mmd_epsilon: float
    pid: PIDGains
    alpha_lr: float
    cost_threshold: float | torch.Tensor  # q̄_c; a tensor: a population member's own (its κ's)
    implementation: str
    time_limit: str


def bearl_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], s: BEARLLossSettings,
                 ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """All BEAR-Lag loss terms of one step, the logged metrics, and the multipliers' new state.

    - VAE: MSE + β KL;
    - critics: every net of each ensemble regresses to y = r + γ(1 − d)Q̃ (reward) and y_c = c + γQ̃_c (cost;
      "osrl": no done mask, Q̃_c mixed like the reward's, optimistic; "paper": masked, pessimistic mix);
    - actor: E[−min(Q¹, Q²)(s, a₀) + α(MMD − ε)] + λ E[Q_c(s, a₀) − q̄_c] with Q_c the min ("osrl") or max
      ("paper") of the cost groups, λ from the PID on this batch's error, α the MMD multiplier before its step.
    """
    osrl = s.implementation == "osrl"
    ends = episode_ends(batch, s.time_limit)
    reward_target = td_target(s.reward_scale * batch[schema.REWARDS], soft_clipped_target(fwd_out[k.Q_NEXT],
                              s.target_mix), s.gamma, ends)
    cost_mix = s.target_mix if osrl else 1.0 - s.target_mix
    cost_target = td_target(batch[schema.COSTS], soft_clipped_target(fwd_out[k.QC_NEXT], cost_mix), s.gamma,
                            None if osrl else ends)

    divergence = mmd(fwd_out[VAE_SAMPLES], fwd_out[ACTOR_SAMPLES], s.mmd_sigma, s.mmd_kernel)
    q_pi = fwd_out[k.Q_PI].min(0).values
    qc_pi = fwd_out[k.QC_PI].min(0).values if osrl else fwd_out[k.QC_PI].max(0).values
    error = (qc_pi - s.cost_threshold).mean().detach()
    multiplier, integral = pid_lagrangian(error, fwd_out[k.PID_INTEGRAL], fwd_out[k.PID_ERROR], s.pid)
    alpha = fwd_out[k.LOG_ALPHA].exp()
    actor = (-q_pi + alpha * (divergence - s.mmd_epsilon)).mean() + multiplier * (qc_pi - s.cost_threshold).mean()

    losses = {
        "vae_loss": vae_loss(fwd_out[k.VAE_RECON], batch[schema.ACTIONS], fwd_out[k.VAE_MEAN], fwd_out[k.VAE_STD],
                             s.kl_weight),
        "qr_loss": ensemble_mse(fwd_out[k.Q_DATA], reward_target),
        "qc_loss": ensemble_mse(fwd_out[k.QC_DATA], cost_target),
        "actor_loss": actor,
    }
    metrics = {"mmd": divergence.mean(), "alpha": alpha, "cost_multiplier": multiplier, "qc_pi": qc_pi.mean(),
               "cost_threshold": torch.zeros_like(error) + s.cost_threshold}
    state = {k.LOG_ALPHA: dual_log_step(fwd_out[k.LOG_ALPHA], (divergence - s.mmd_epsilon).mean().detach(),
                                        s.alpha_lr),
             k.PID_INTEGRAL: integral, k.PID_ERROR: error}
    return losses, metrics, state
