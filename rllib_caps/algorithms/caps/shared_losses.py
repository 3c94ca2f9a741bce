"""The loss pieces both CAPS backbones share, as small pure torch functions (no Ray import): the heads' trade-offs
λ_k and their mixing of the reward and cost signals, and the signal the cost critics regress on.

Advantages and Q-values enter the mixing goodness-oriented (larger is better: ``A^r`` and ``−A^c``), see
``rllib_caps.core.losses``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


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
