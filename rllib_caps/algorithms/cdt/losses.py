"""CDT's losses as small pure torch functions (no Ray), as OSRL's ``CDTTrainer.train_one_step`` defines them:
the action loss (Gaussian likelihood with a learned entropy bonus, or MSE), the auxiliary 2-class cost
prediction, and the entropy temperature. Every mean is OSRL's: over the valid positions (and action dimensions)
for the Gaussian terms, over all positions (padding counted as zero) for the MSE and the cost term."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rllib_caps.algorithms.cdt import keys as ck
from rllib_caps.data.sequences import MASK, WINDOW_ACTIONS, WINDOW_COSTS


@dataclass(frozen=True)
class CDTLossSettings:
    """What the CDT losses need; ``CDTConfig.loss_settings()`` fills it."""

    stochastic: bool
    cost_weight: float  # weight of the cost-prediction NLL (OSRL's loss_cost_weight 0.02)
    target_entropy: float  # the temperature drives the mean per-dimension entropy towards this (OSRL: −|A|)


def gaussian_terms(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean log-likelihood of the actions and mean entropy of N(μ, e^{log σ}), each over the valid positions and
    the action dimensions (OSRL's ``log_prob(a)[mask > 0].mean()``, without a boolean index)."""
    variance = torch.exp(2 * log_std)
    log_prob = -(actions - mean).pow(2) / (2 * variance) - log_std - 0.5 * math.log(2 * math.pi)
    entropy = 0.5 + 0.5 * math.log(2 * math.pi) + log_std
    weights = mask.unsqueeze(-1).expand_as(mean)
    count = weights.sum()
    return (log_prob * weights).sum() / count, (entropy * weights).sum() / count


def cost_prediction_nll(log_probs: torch.Tensor, costs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """NLL of the step's cost class c_t ∈ {0, 1} (OSRL's ``costs.long()``, clamped to 1 for costs above 1), masked,
    averaged over all positions."""
    labels = costs.long().clamp(0, 1).unsqueeze(-1)
    return -(log_probs.gather(-1, labels).squeeze(-1) * mask).mean()


def cdt_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], s: CDTLossSettings,
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The loss terms of one step and the logged metrics:

    - action: −(log p(a) + T̄_ent H) for the Gaussian head (T̄_ent detached), else MSE(μ, a) · mask;
    - cost: ``cost_weight`` × ``cost_prediction_nll``;
    - temperature (Gaussian head): T_ent (H̄ − target entropy), so T_ent grows while the entropy is below target.
    """
    mask, actions = batch[MASK], batch[WINDOW_ACTIONS]
    mean = fwd_out[ck.ACTION_MEAN]
    metrics: dict[str, torch.Tensor] = {}
    losses: dict[str, torch.Tensor] = {}
    if s.stochastic:
        log_likelihood, entropy = gaussian_terms(mean, fwd_out[ck.ACTION_LOG_STD], actions, mask)
        temperature = fwd_out[ck.LOG_TEMPERATURE].exp()
        losses["action_loss"] = -(log_likelihood + temperature.detach() * entropy)
        losses["temperature_loss"] = temperature * (entropy.detach() - s.target_entropy)
        metrics |= {"nll": -log_likelihood.detach(), "entropy": entropy.detach(), "temperature": temperature.detach()}
    else:
        losses["action_loss"] = ((mean - actions).pow(2) * mask.unsqueeze(-1)).mean()
    cost_nll = cost_prediction_nll(fwd_out[ck.COST_LOG_PROBS], batch[WINDOW_COSTS], mask)
    losses["cost_loss"] = s.cost_weight * cost_nll
    predicted = fwd_out[ck.COST_LOG_PROBS].argmax(-1)
    correct = (predicted == batch[WINDOW_COSTS].long().clamp(0, 1)).float() * mask
    metrics |= {"cost_nll": cost_nll.detach(), "cost_accuracy": correct.sum() / mask.sum()}
    return losses, metrics
