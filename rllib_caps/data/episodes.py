"""Per-episode totals of a transition dataset, read per row: each transition's episode cost, and which rows belong
to episodes within a cost limit (BC-Safe's data, CAPS's ``cost_head_episode_limit``). Pure torch, no Ray."""

from __future__ import annotations

import torch


def episode_costs(eps_id: torch.Tensor, costs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(total cost of each transition's episode, shape (N,), the distinct episodes' totals)``: the undiscounted
    sum of ``costs`` over all rows with the same ``eps_id`` (rows need not be contiguous or sorted)."""
    _, inverse = torch.unique(eps_id, return_inverse=True)
    totals = torch.zeros(int(inverse.max()) + 1, dtype=torch.float64, device=costs.device)
    totals.index_add_(0, inverse, costs.to(torch.float64))
    return totals[inverse], totals


def safe_episode_mask(eps_id: torch.Tensor, costs: torch.Tensor, cost_limit: float) -> torch.Tensor:
    """True for every transition of an episode whose total cost is ≤ ``cost_limit`` (OSRL's ``bc_mode="safe"``:
    the whole episode's cost, not the cost-to-go)."""
    per_row, _ = episode_costs(eps_id, costs)
    return per_row <= cost_limit


def nonempty_safe_episode_mask(eps_id: torch.Tensor, costs: torch.Tensor, cost_limit: float, *, setting: str,
                               remedy: str) -> torch.Tensor:
    """``safe_episode_mask``, or a ValueError if no episode is within ``cost_limit``: it names ``setting`` (the flag
    or config key that set the limit), the cheapest episode's cost and ``remedy``."""
    mask = safe_episode_mask(eps_id, costs, cost_limit)
    if not bool(mask.any()):
        _, totals = episode_costs(eps_id, costs)
        raise ValueError(f"no episode of the dataset has total cost <= {setting} {cost_limit:g} (the cheapest costs "
                         f"{float(totals.min()):g}); {remedy}")
    return mask
