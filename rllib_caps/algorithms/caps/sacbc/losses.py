"""CAPS(SAC+BC) losses as small pure torch functions (paper Sec. "SAC+BC Instantiation", the objective after Eq. 9).

Head k maximises ``E[Q^k(s, ã) − α log π_k(ã|s) − (ã − a)²]`` with ``ã ~ π_k(·|s)`` and
``Q^k = Q^r − λ_k Q^c`` (head 0: Q^r, head K−1: −Q^c). As in TD3+BC (Fujimoto & Gu 2021) the Q term is
scaled by ``q_weight / mean|Q^k|`` (q_weight = 2.5), so the BC term keeps a fixed weight whatever the scale
of the returns. One temperature α, shared by the heads, is learned towards the target entropy −|A| (SAC,
Haarnoja et al. 2018). Each critic regresses onto K backups, one per head, built from that head's next action.

Everything here works on plain tensors: the module's ``_forward_train`` samples the actions and evaluates the
critics (at ``(s, ã)`` with frozen parameters, so the actor loss moves only the actor); the RLlib learner and
the plain benchmark loop both call :func:`caps_sacbc_losses`. The TD pieces are the shared ones of
``rllib_caps.core.losses``; the heads' λ-mixing and the cost signal are CAPS's
(``rllib_caps.algorithms.caps.shared_losses``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rllib_caps.algorithms.caps import keys as m
from rllib_caps.algorithms.caps.shared_losses import cost_signal, head_coefficients, head_row_weights
from rllib_caps.core.losses import pessimistic_twin, td_target, twin_td_loss
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import schema

SAC_LOG_STD_MIN, SAC_LOG_STD_MAX = -20.0, 2.0  # the clamp of the heads' state-dependent log-std (SAC's usual bounds)


def squashed_log_prob(pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log π(tanh(u)) of a tanh-squashed diagonal Gaussian at pre-squash sample ``u``, summed over the last axis:
    ``Σ_i [log N(u_i; μ_i, σ_i) − log(1 − tanh²(u_i))]``, the Jacobian in its stable form
    ``log(1 − tanh² u) = 2 (log 2 − u − softplus(−2u))``."""
    gaussian = torch.distributions.Normal(mean, log_std.exp(), validate_args=False).log_prob(pre_tanh)
    log_det = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))
    return (gaussian - log_det).sum(-1)


def squashed_gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample ``a = tanh(μ + σ ε)`` and its log-density (:func:`squashed_log_prob`); ``noise`` is
    ε (standard normal, the shape of ``mean``), drawn from torch's global generator when not given."""
    pre_tanh = mean + log_std.exp() * (torch.randn_like(mean) if noise is None else noise)
    return torch.tanh(pre_tanh), squashed_log_prob(pre_tanh, mean, log_std)


def head_q_values(q_reward: torch.Tensor, q_cost_goodness: torch.Tensor, lambdas: Sequence[float] | torch.Tensor
                  ) -> torch.Tensor:
    """``Q^k = Q^r − λ_k Q^c`` per head, shape ``(B, K)``, from ``(B, K)`` inputs; ``q_cost_goodness`` is the
    cost critic oriented so that larger is cheaper (−Q^c), as everywhere in the losses."""
    r, c = head_coefficients(lambdas, q_reward)
    return r * q_reward + c * q_cost_goodness


def sacbc_actor_loss(q_heads: torch.Tensor, log_probs: torch.Tensor, pi_actions: torch.Tensor,
                     actions: torch.Tensor, alpha: torch.Tensor, q_weight: float,
                     row_weights: torch.Tensor | None = None) -> torch.Tensor:
    """``Σ_k E[α log π_k(ã_k|s) − η_k Q^k(s, ã_k)] + mean((ã_k − a)²)`` with ``η_k = q_weight / mean|Q^k|``
    (detached, per head, over the batch: TD3+BC's normaliser).

    Args:
        q_heads: ``(B, K)`` Q^k at the heads' sampled actions; log_probs: ``(B, K)``;
        pi_actions: ``(B, K, A)`` the sampled actions ã_k; actions: ``(B, A)`` the dataset's; alpha: the
        temperature (detached here); row_weights: ``(B, K)`` weights of each row in each head's expectations
        (``shared_losses.head_row_weights``), None for 1.
    """
    eta = q_weight / q_heads.abs().mean(0).detach()
    policy = alpha.detach() * log_probs - eta * q_heads  # (B, K)
    bc = (pi_actions - actions.unsqueeze(1)).pow(2)  # (B, K, A)
    if row_weights is not None:
        policy, bc = policy * row_weights, bc * row_weights.unsqueeze(-1)
    return (policy.mean(0) + bc.mean(dim=(0, 2))).sum()


def temperature_loss(log_alpha: torch.Tensor, log_probs: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """SAC's temperature loss ``−E[log α (log π(ã|s) + H̄)]`` over every head's samples: α falls while the heads'
    entropy is above the target H̄ (= −|A| here) and rises below it. Only ``log_alpha`` gets a gradient."""
    return -(log_alpha * (log_probs + target_entropy).detach()).mean()


def per_head_backup_loss(q1: torch.Tensor, q2: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor, *,
                         signal: torch.Tensor, terminateds: torch.Tensor, gamma: float, maximize: bool,
                         entropy_bonus: torch.Tensor | None = None) -> torch.Tensor:
    """Twin TD loss against K backups, one per head: ``y_k = signal + γ (1 − d) (Q̂(s', a'_k) + bonus_k)``, with
    Q̂ the pessimistic target twin at head k's next action (min when maximising, max when minimising).

    ``q1, q2``: ``(B,)`` online twins at the dataset's (s, a); ``next_q1, next_q2``: ``(B, K)`` target twins at
    (s', a'_k); ``entropy_bonus``: ``(B, K)`` (−α log π_k(a'_k|s') for the reward critic) or None. The loss is the
    mean over heads of each head's twin MSE (its gradient regresses Q onto the heads' mean backup).
    """
    next_value = pessimistic_twin(next_q1, next_q2, maximize=maximize)
    if entropy_bonus is not None:
        next_value = next_value + entropy_bonus
    target = td_target(signal.unsqueeze(-1), next_value, gamma, terminateds.unsqueeze(-1))
    return twin_td_loss(q1.unsqueeze(-1), q2.unsqueeze(-1), target)


@dataclass(frozen=True)
class SACBCLossSettings:
    """Hyperparameters the CAPS(SAC+BC) loss needs; ``CAPSConfig.loss_settings()`` fills them from the config."""

    gamma: float
    reward_scale: float
    lambdas: Sequence[float] | torch.Tensor  # the K−2 middle heads' λ_k (``shared_losses.head_coefficients``)
    cost_maximize: bool  # the cost critics hold −c (the authors' convention, "code") instead of +c ("paper")
    time_limit: str
    q_weight: float  # TD3+BC's α: the Q term is scaled by q_weight / mean|Q^k|
    cost_gamma: float  # the cost critics' discount (``CAPSConfig.cost_gamma``; γ unless set)


def caps_sacbc_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                      settings: SACBCLossSettings) -> dict[str, torch.Tensor]:
    """All CAPS(SAC+BC) loss terms from one ``_forward_train`` output; their sum is the total loss.

    The terms touch disjoint parameters (the actor term sees the critics frozen, the backups and the α term are
    detached where they must be), so one backward pass on the sum gives each network its own loss's gradient.
    """
    terminateds = episode_ends(batch, settings.time_limit)
    alpha = fwd_out[m.LOG_ALPHA].exp().detach()
    goodness = 1.0 if settings.cost_maximize else -1.0  # +1: the critics hold −c (larger is cheaper already)
    qr_loss = per_head_backup_loss(
        fwd_out[m.QR_PREDS], fwd_out[m.QR_TWIN_PREDS], fwd_out[m.QR_NEXT], fwd_out[m.QR_NEXT_TWIN],
        signal=settings.reward_scale * batch[schema.REWARDS], terminateds=terminateds, gamma=settings.gamma,
        maximize=True, entropy_bonus=-alpha * fwd_out[m.NEXT_LOG_PROBS],
    )
    qc_loss = per_head_backup_loss(
        fwd_out[m.QC_PREDS], fwd_out[m.QC_TWIN_PREDS], fwd_out[m.QC_NEXT], fwd_out[m.QC_NEXT_TWIN],
        signal=cost_signal(batch[schema.COSTS], settings.cost_maximize), terminateds=terminateds,
        gamma=settings.cost_gamma,
        maximize=settings.cost_maximize,
    )
    q_cost = goodness * pessimistic_twin(fwd_out[m.QC_PI], fwd_out[m.QC_PI_TWIN], maximize=settings.cost_maximize)
    q_heads = head_q_values(torch.min(fwd_out[m.QR_PI], fwd_out[m.QR_PI_TWIN]), q_cost, settings.lambdas)
    log_probs = fwd_out[m.PI_LOG_PROBS]
    target_entropy = -float(fwd_out[m.PI_ACTIONS].shape[-1])
    return {
        "actor_loss": sacbc_actor_loss(q_heads, log_probs, fwd_out[m.PI_ACTIONS], batch[schema.ACTIONS], alpha,
                                       settings.q_weight, head_row_weights(batch, q_heads.shape[-1])),
        "alpha_loss": temperature_loss(fwd_out[m.LOG_ALPHA], log_probs, target_entropy),
        "qr_loss": qr_loss, "qc_loss": qc_loss,
    }
