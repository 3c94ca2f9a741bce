"""BC-Safe's data: the transitions of the episodes whose undiscounted total cost is at most κ (pure, no Ray)."""

from __future__ import annotations

import torch

from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import COSTS, EPS_ID


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


def safe_episodes(dataset: TransitionDataset, cost_limit: float) -> TransitionDataset:
    """The transitions of the episodes with total cost ≤ ``cost_limit``; a ValueError if none has."""
    tensors = dataset.tensors
    mask = safe_episode_mask(tensors[EPS_ID], tensors[COSTS], cost_limit)
    if not bool(mask.any()):
        _, totals = episode_costs(tensors[EPS_ID], tensors[COSTS])
        raise ValueError(f"BC-Safe: no episode of the dataset has total cost <= cost_limit {cost_limit:g} (the "
                         f"cheapest has {float(totals.min()):g}); raise cost_limit or use bc-all")
    return TransitionDataset({name: t[mask] for name, t in tensors.items()})
