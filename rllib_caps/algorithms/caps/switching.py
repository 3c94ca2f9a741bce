"""The CAPS switching rule (paper, Sec. "Decision-Making in CAPS"), as one batched pure function.

Evaluation inside RLlib (the module's ``_forward_inference``) and deployment without Ray
(:class:`rllib_caps.algorithms.caps.policy.CAPSPolicy`) both call :func:`select_heads`; there is no other copy.
The budget it compares against comes from ``rllib_caps.core.budget.remaining_budget_threshold``.
"""

from __future__ import annotations

import torch


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
