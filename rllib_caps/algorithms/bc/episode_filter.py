"""BC-Safe's data: the transitions of the episodes whose undiscounted total cost is at most κ (pure, no Ray)."""

from __future__ import annotations

from rllib_caps.data import TransitionDataset
from rllib_caps.data.episodes import episode_costs, safe_episode_mask
from rllib_caps.data.schema import COSTS, EPS_ID


def safe_episodes(dataset: TransitionDataset, cost_limit: float) -> TransitionDataset:
    """The transitions of the episodes with total cost ≤ ``cost_limit``; a ValueError if none has."""
    tensors = dataset.tensors
    mask = safe_episode_mask(tensors[EPS_ID], tensors[COSTS], cost_limit)
    if not bool(mask.any()):
        _, totals = episode_costs(tensors[EPS_ID], tensors[COSTS])
        raise ValueError(f"BC-Safe: no episode of the dataset has total cost <= cost_limit {cost_limit:g} (the "
                         f"cheapest has {float(totals.min()):g}); raise cost_limit or use bc-all")
    return TransitionDataset({name: t[mask] for name, t in tensors.items()})
