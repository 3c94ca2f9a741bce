"""COptiDICE losses as small pure torch functions (no Ray): Lee et al. (ICLR 2022) with OSRL's choices;
docs/baselines.md lists every choice and its OSRL/paper switch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rllib_caps.algorithms.coptidice import keys as ck
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import schema


def soft_chi2(x: torch.Tensor) -> torch.Tensor:
    """The soft-χ² f-divergence generator (OSRL's ``softchi``): x log x − x + 1 for x < 1, ½(x − 1)² otherwise."""
    return torch.where(x < 1, x * torch.log(x + 1e-10) - x + 1, 0.5 * (x - 1).pow(2))


def soft_chi2_prime_inverse(y: torch.Tensor) -> torch.Tensor:
    """(f′)⁻¹ of ``soft_chi2``: e^y for y < 0, y + 1 otherwise."""
    return torch.where(y < 0, torch.exp(y.clamp(max=0.0)), y + 1)


def stationary_ratio(advantage: torch.Tensor, alpha: float) -> torch.Tensor:
    """w*(s, a) = max(0, (f′)⁻¹(e(s, a)/α)): the closed-form d^π/d^D of the inner maximisation (paper, Eq. 8)."""
    return torch.relu(soft_chi2_prime_inverse(advantage / alpha))


@dataclass(frozen=True)
class COptiDICELossSettings:
    """What the COptiDICE losses need; ``COptiDICEConfig.loss_settings()`` fills it (the one home of the
    defaults)."""

    gamma: float
    reward_scale: float
    alpha: float  # weight of the f-divergence
    cost_ub_epsilon: float  # ε: radius of the KL ball of the cost upper bound
    cost_threshold: float | torch.Tensor  # what ĉ is compared with: q̄_c ("osrl") or (1 − γ) q̄_c ("paper"); a
    # tensor: a population member's own (its κ's)
    time_limit: str


def coptidice_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], s: COptiDICELossSettings,
                     ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """All COptiDICE loss terms of one step and the logged metrics. With e = r − λ̄c + γ(1 − d)ν(s′) − ν(s)
    (λ̄ detached) and w = ``stationary_ratio(e, α)``:

    - ν: (1 − γ) E[ν(s₀)] + E[w e − α f(w)] (paper, Eq. 9);
    - χ: ℓ = (1 − γ) χ(s₀) + w̄ (c + γ(1 − d) χ(s′) − χ(s)), q = B softmax(ℓ / τ̄), loss E[q ℓ];
      D_KL = E[q log q − q + 1] and the cost upper bound ĉ = E[q w̄ c] (paper, Eq. 13-14);
    - τ: τ (ε − D̄_KL);
    - λ: λ (threshold − ĉ̄), so λ grows while ĉ exceeds the threshold;
    - actor: −E[w̄ log π(ã | s̃)] (weighted BC on the noised pair that ``forward`` scored).

    w̄, τ̄, λ̄, D̄_KL, ĉ̄ are detached, so each term's gradient reaches only its own network or multiplier.
    The ``*_INIT`` outputs are per-row terms whose mean estimates E[ν(s₀)] and E[χ(s₀)].
    """
    ends = episode_ends(batch, s.time_limit)
    rewards, costs = s.reward_scale * batch[schema.REWARDS], batch[schema.COSTS]
    lagrange, temperature = fwd_out[ck.LAGRANGE], fwd_out[ck.TEMPERATURE]
    advantage = rewards - lagrange.detach() * costs + s.gamma * (1 - ends) * fwd_out[ck.NU_NEXT] - fwd_out[ck.NU]
    w = stationary_ratio(advantage, s.alpha)
    w_bar = w.detach()
    nu_loss = (1 - s.gamma) * fwd_out[ck.NU_INIT].mean() + (w * advantage - s.alpha * soft_chi2(w)).mean()

    ell = (1 - s.gamma) * fwd_out[ck.CHI_INIT] + w_bar * (
        costs + s.gamma * (1 - ends) * fwd_out[ck.CHI_NEXT] - fwd_out[ck.CHI])
    logits = ell / temperature.detach()
    batch_size = ell.shape[0]
    q = torch.softmax(logits, dim=0) * batch_size
    log_q = torch.log_softmax(logits, dim=0) + math.log(batch_size)
    kl = (q * log_q - q + 1).mean()
    cost_bound = (q * w_bar * costs).mean()

    losses = {
        "nu_loss": nu_loss,
        "chi_loss": (q * ell).mean(),
        "tau_loss": temperature * (s.cost_ub_epsilon - kl.detach()),
        "lambda_loss": lagrange * (s.cost_threshold - cost_bound.detach()),
        "actor_loss": -(w_bar * fwd_out[ck.LOG_PROB]).mean(),
    }
    metrics = {"w_mean": w_bar.mean(), "w_max": w_bar.max(), "divergence": soft_chi2(w_bar).mean(),
               "td_error": advantage.detach().pow(2).mean(), "kl": kl.detach(), "cost_bound": cost_bound.detach(),
               "lagrange": lagrange.detach(), "temperature": temperature.detach(),
               "cost_threshold": torch.zeros_like(cost_bound) + s.cost_threshold}
    return losses, metrics
