"""The CAPS switching rule (paper, Sec. "Decision-Making in CAPS"), as one batched pure function.

Evaluation inside RLlib (the module's ``_forward_inference``) and deployment without Ray
(:class:`rllib_caps.algorithms.caps.policy.CAPSPolicy`) both call :func:`select_heads`; there is no other copy.
The budget it compares against comes from ``rllib_caps.core.budget.remaining_budget_threshold``.
"""

from __future__ import annotations

import torch

HEAD_SELECTIONS = ("q_reward", "head_order")  # how the feasible heads are ranked (the first is the paper's)
# The one default of ``head_selection`` (CAPSConfig, the module, the rule): docs/paper.md, "Choosing among feasible
# heads" and "Calibrated Q^c".
DEFAULT_HEAD_SELECTION = "head_order"


def select_heads(q_reward: torch.Tensor, q_cost: torch.Tensor, threshold: torch.Tensor,
                 selection: str = DEFAULT_HEAD_SELECTION) -> torch.Tensor:
    """Filter-then-select (paper Eq. 3-4, and the fallback below them).

    Among the heads whose pessimistic cost-to-go is strictly below the threshold (the authors'
    ``qc < thr``), pick the best; if none is feasible, pick the head with the lowest Q^c. ``selection`` says which
    feasible head is best: "q_reward", the one with the highest Q^r (paper Eq. 4); "head_order", the most
    reward-seeking one, i.e. the lowest index (heads are ordered by their trade-off, head 0 maximising reward;
    docs/paper.md, "Choosing among feasible heads"). Filter and fallback are the same for both, so both keep
    Theorem 1's guarantee, which holds for any ranking of the feasible heads. Ties go to the lowest head index.

    Args:
        q_reward: Q^r(s, π_k(s)) for every head, shape ``(B, K)`` (min over the twin critics).
        q_cost: Q^c(s, π_k(s)) for every head, shape ``(B, K)`` (the pessimistic twin, in cost units).
        threshold: the per-state budget Q^c is compared against, shape ``(B,)``.
        selection: one of ``HEAD_SELECTIONS``.

    Returns:
        The chosen head index per state, shape ``(B,)``, dtype long.
    """
    feasible = q_cost < threshold.unsqueeze(-1)
    if selection == "q_reward":
        rank = q_reward
    elif selection == "head_order":
        rank = -torch.arange(q_cost.shape[-1], device=q_cost.device, dtype=q_cost.dtype).expand_as(q_cost)
    else:
        raise ValueError(f"selection must be one of {HEAD_SELECTIONS}, got {selection!r}")
    best_feasible = torch.argmax(torch.where(feasible, rank, torch.full_like(rank, -torch.inf)), dim=-1)
    cheapest = torch.argmin(q_cost, dim=-1)
    return torch.where(feasible.any(dim=-1), best_feasible, cheapest)
