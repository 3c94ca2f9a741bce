"""BC-Safe's data: the transitions of the episodes whose undiscounted total cost is at most κ (pure, no Ray)."""

from __future__ import annotations

from rllib_caps.data import TransitionDataset
from rllib_caps.data.episodes import nonempty_safe_episode_mask
from rllib_caps.data.schema import COSTS, EPS_ID


def safe_episodes(dataset: TransitionDataset, cost_limit: float) -> TransitionDataset:
    """The transitions of the episodes with total cost ≤ ``cost_limit``; a ValueError if none has."""
    tensors = dataset.tensors
    mask = nonempty_safe_episode_mask(tensors[EPS_ID], tensors[COSTS], cost_limit, setting="cost_limit",
                                      remedy="BC-Safe: raise cost_limit or use bc-all")
    return TransitionDataset({name: t[mask] for name, t in tensors.items()})
