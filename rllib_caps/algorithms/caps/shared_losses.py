"""The loss pieces both CAPS backbones share, as small pure torch functions (no Ray import): the heads' trade-offs
λ_k and their mixing of the reward and cost signals, the signal the cost critics regress on, and the rows each head
learns from.

Advantages and Q-values enter the mixing goodness-oriented (larger is better: ``A^r`` and ``−A^c``), see
``rllib_caps.core.losses``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rllib_caps.algorithms.caps.keys import COST_HEAD_ROWS


def default_lambdas(num_heads: int) -> list[float]:
    """λ_k = k / ((K − 1) / 2) for the K − 2 middle heads k = 1 … K − 2 (paper, hyperparameter table)."""
    if num_heads < 2:
        raise ValueError(f"num_heads must be >= 2, got {num_heads}")
    return [k / ((num_heads - 1) / 2) for k in range(1, num_heads - 1)]


def head_coefficients(lambdas: Sequence[float] | torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head (reward, cost) coefficients, each ``(K,)`` of ``like``'s dtype and device: head 0 uses the reward
    signal only, head K−1 the cost signal only, middle head k reward − λ_k cost (paper, text after Eq. 9).
    ``lambdas``: the K−2 middle λ_k (a learner passes them as a tensor on its device, built before any step)."""
    middle = torch.as_tensor(lambdas, dtype=like.dtype, device=like.device)
    one, zero = like.new_ones(1), like.new_zeros(1)
    return torch.cat([one, torch.ones_like(middle), zero]), torch.cat([zero, middle, one])


def cost_signal(costs: torch.Tensor, cost_maximize: bool) -> torch.Tensor:
    """What the cost critics regress on: −c where they are maximised (the authors' code), +c where minimised (the
    paper's equations)."""
    return -costs if cost_maximize else costs


def head_row_weights(batch: dict[str, torch.Tensor], num_heads: int) -> torch.Tensor | None:
    """Per-row, per-head weights of the actor loss, ``(B, K)``, or None where every head learns from every row.

    With ``cost_head_episode_limit`` the minibatch has ``COST_HEAD_ROWS``: the cost head K−1 then learns from those
    rows only, each weighted ``1 / mean(COST_HEAD_ROWS)`` so its loss stays a mean over the rows it reads (a batch
    with none of them gives the head no gradient); the other heads weigh every row 1.
    """
    rows = batch.get(COST_HEAD_ROWS)
    if rows is None:
        return None
    cost_head = rows / rows.mean().clamp(min=torch.finfo(rows.dtype).eps)
    others = torch.ones_like(rows).unsqueeze(-1).expand(-1, num_heads - 1)
    return torch.cat([others, cost_head.unsqueeze(-1)], dim=-1)
