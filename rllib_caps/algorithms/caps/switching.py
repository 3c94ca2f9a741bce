"""The CAPS switching rule (paper, Sec. "Decision-Making in CAPS"), as one batched pure function.

Evaluation inside RLlib (the module's ``_forward_inference``) and deployment without Ray
(:class:`rllib_caps.algorithms.caps.policy.CAPSPolicy`) both call :func:`select_heads`; there is no other copy.
The budget it compares against comes from ``rllib_caps.core.budget.remaining_budget_threshold``.
"""

from __future__ import annotations

import torch

# How the feasible heads are ranked (the first is the paper's; "q_trust": head order unless Q^r's gap is trusted).
HEAD_SELECTIONS = ("q_reward", "head_order", "q_trust")
# The one default of ``head_selection`` (CAPSConfig, the module, the rule): docs/paper.md, "Choosing among feasible
# heads" and "Calibrated Q^c".
DEFAULT_HEAD_SELECTION = "head_order"
# "q_trust"'s c: a gap in Q^r is trusted when it exceeds c times the twins' combined disagreement (``trusted_heads``).
TRUST_COEFFICIENT = 1.0


def select_heads(q_reward: torch.Tensor, q_cost: torch.Tensor, threshold: torch.Tensor,
                 selection: str = DEFAULT_HEAD_SELECTION, q_reward_spread: torch.Tensor | None = None,
                 trust: float = TRUST_COEFFICIENT) -> torch.Tensor:
    """Filter-then-select (paper Eq. 3-4, and the fallback below them).

    Among the heads whose pessimistic cost-to-go is strictly below the threshold (the authors'
    ``qc < thr``), pick the best; if none is feasible, pick the head with the lowest Q^c. ``selection`` says which
    feasible head is best: "q_reward", the one with the highest Q^r (paper Eq. 4); "head_order", the most
    reward-seeking one, i.e. the lowest index (heads are ordered by their trade-off, head 0 maximising reward;
    docs/paper.md, "Choosing among feasible heads"); "q_trust", head order's choice unless another feasible head's
    Q^r exceeds it by more than the critic's own uncertainty (``trusted_heads``). Filter and fallback are the same
    for all three, so all keep Theorem 1's guarantee, which holds for any ranking of the feasible heads. Ties go to
    the lowest head index.

    Args:
        q_reward: Q^r(s, π_k(s)) for every head, shape ``(B, K)`` (min over the twin critics).
        q_cost: Q^c(s, π_k(s)) for every head, shape ``(B, K)`` (the pessimistic twin, in cost units).
        threshold: the per-state budget Q^c is compared against, shape ``(B,)``.
        selection: one of ``HEAD_SELECTIONS``.
        q_reward_spread: the twin reward critics' disagreement |Q^r_1 − Q^r_2| per head, shape ``(B, K)``; read by
            "q_trust" only (which refuses to run without it), ignored by the others.
        trust: "q_trust"'s coefficient c (``trusted_heads``).

    Returns:
        The chosen head index per state, shape ``(B,)``, dtype long.
    """
    feasible = q_cost < threshold.unsqueeze(-1)
    if selection == "q_reward":
        rank = q_reward
    elif selection in ("head_order", "q_trust"):
        rank = -torch.arange(q_cost.shape[-1], device=q_cost.device, dtype=q_cost.dtype).expand_as(q_cost)
    else:
        raise ValueError(f"selection must be one of {HEAD_SELECTIONS}, got {selection!r}")
    best_feasible = torch.argmax(torch.where(feasible, rank, torch.full_like(rank, -torch.inf)), dim=-1)
    if selection == "q_trust":
        if q_reward_spread is None:
            raise ValueError("selection 'q_trust' needs q_reward_spread, the twin reward critics' |Q^r_1 − Q^r_2| "
                             "per head (a critic override such as FQE's gives none)")
        trusted = feasible & trusted_heads(q_reward, q_reward_spread, best_feasible, trust)
        best_trusted = torch.argmax(torch.where(trusted, q_reward, torch.full_like(q_reward, -torch.inf)), dim=-1)
        best_feasible = torch.where(trusted.any(dim=-1), best_trusted, best_feasible)
    cheapest = torch.argmin(q_cost, dim=-1)
    return torch.where(feasible.any(dim=-1), best_feasible, cheapest)


def trusted_heads(q_reward: torch.Tensor, q_reward_spread: torch.Tensor, default: torch.Tensor,
                  trust: float = TRUST_COEFFICIENT) -> torch.Tensor:
    """Which heads' Q^r exceeds the ``default`` head's by more than the critic's own uncertainty, ``(B, K)`` bool.

    At head k's action the twin reward critics give an interval [min, max] = [Q^r_k, Q^r_k + d_k], with
    ``q_reward`` the min twin and d_k = |Q^r_1 − Q^r_2| (``q_reward_spread``); its midpoint m_k = Q^r_k + d_k / 2
    is the twins' mean. Head k is trusted over the default head j when

        m_k − m_j > c · (d_k + d_j) / 2,

    i.e. when the two intervals, each scaled by c about its midpoint, do not overlap. The uncertainty of the gap
    is the SUM of the two heads' half-disagreements, not their max: the gap is a difference of two uncertain values,
    and by interval arithmetic the half-width of a difference is the sum of the half-widths. At c = 1 the test
    reads Q^r_k > Q^r_j + d_j: both twins value head k's action above both twins' values of head j's. c = 0
    trusts any gap of the twins' means. (A lower confidence bound m_k − c · d_k / 2 is no new rule at c = 1: it is
    the min twin, "q_reward"'s ranking.) The default head itself is never trusted over itself (0 > c · d_j ≥ 0 is
    false).

    Args:
        q_reward: the min twin Q^r per head, ``(B, K)``.
        q_reward_spread: |Q^r_1 − Q^r_2| per head, ``(B, K)``, ≥ 0.
        default: the head a gap is measured against (head order's choice), ``(B,)`` long.
        trust: the coefficient c ≥ 0.
    """
    if trust < 0:
        raise ValueError(f"trust (the coefficient c) must be >= 0, got {trust}")
    mean = q_reward + q_reward_spread / 2
    index = default.unsqueeze(-1)
    gap = mean - mean.gather(-1, index)
    return gap > trust * (q_reward_spread + q_reward_spread.gather(-1, index)) / 2
