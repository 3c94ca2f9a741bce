"""The CAPS switching rule (paper, Sec. "Decision-Making in CAPS"), as one batched pure function.

Evaluation inside RLlib (the module's ``_forward_inference``) and deployment without Ray
(:class:`rllib_caps.policy.CAPSPolicy`) both call :func:`select_heads`; there is no other copy.
"""

from __future__ import annotations

import torch


def remaining_budget_threshold(
    cost_threshold: torch.Tensor | float,
    cost_spent: torch.Tensor,
    step: torch.Tensor,
    horizon: int,
    gamma: float,
) -> torch.Tensor:
    """Converts the undiscounted remaining budget into the scale of a discounted Q^c (digest, choice 4).

    ``thr_t = max(κ − c_<t, 0) · (1 − γ^(T−t)) / ((1 − γ)(T − t))``: the remaining budget spread evenly
    over the T − t remaining steps and re-summed with discounting. At t = 0 with γ → 1 this is κ itself.

    Args:
        cost_threshold: κ, scalar or shape ``(B,)``.
        cost_spent: c_<t, the undiscounted cost already incurred, shape ``(B,)``.
        step: t, the 0-based step index within the episode, shape ``(B,)``.
        horizon: T, the episode length.
        gamma: the discount the cost critic was trained with.
    """
    remaining = torch.clamp(torch.as_tensor(cost_threshold, dtype=cost_spent.dtype) - cost_spent, min=0.0)
    steps_left = torch.clamp(horizon - step.to(cost_spent.dtype), min=1.0)
    if gamma >= 1.0:
        return remaining
    discounted_sum = (1.0 - gamma**steps_left) / (1.0 - gamma)
    return remaining * discounted_sum / steps_left


def select_heads(q_reward: torch.Tensor, q_cost: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Filter-then-select (paper Eq. 3-4, and the fallback below them).

    Among the heads whose pessimistic cost-to-go is strictly below the threshold (the authors'
    ``qc < thr``), pick the one with the highest Q^r; if none is feasible, pick the head with the
    lowest Q^c. Ties go to the lowest head index (head 0 is the reward head).

    Args:
        q_reward: Q^r(s, π_k(s)) for every head, shape ``(B, K)`` (min over the twin critics).
        q_cost: Q^c(s, π_k(s)) for every head, shape ``(B, K)`` (the pessimistic twin, in cost units).
        threshold: the per-state budget Q^c is compared against, shape ``(B,)``.

    Returns:
        The chosen head index per state, shape ``(B,)``, dtype long.
    """
    feasible = q_cost < threshold.unsqueeze(-1)
    masked_reward = torch.where(feasible, q_reward, torch.full_like(q_reward, -torch.inf))
    best_feasible = torch.argmax(masked_reward, dim=-1)
    cheapest = torch.argmin(q_cost, dim=-1)
    return torch.where(feasible.any(dim=-1), best_feasible, cheapest)
