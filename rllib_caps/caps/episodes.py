"""Reduce RLlib episodes to what CAPS evaluation reports (runs on the EnvRunners)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rllib_caps.caps.keys import HEAD
from rllib_caps.scoring import EpisodeOutcome


def episode_outcomes(episodes: Iterable[Any], num_heads: int) -> list[EpisodeOutcome]:
    """Undiscounted return, summed ``info["cost"]``, length and per-head step counts of each episode."""
    outcomes = []
    for episode in episodes:
        infos = episode.get_infos()[1:]  # infos[0] comes from reset
        heads = np.asarray(episode.get_extra_model_outputs(HEAD), dtype=np.int64).reshape(-1)
        outcomes.append(EpisodeOutcome(
            reward=float(episode.get_return()),
            cost=float(sum(info.get("cost", 0.0) for info in infos)),
            length=len(episode),
            head_counts=tuple(int(c) for c in np.bincount(heads, minlength=num_heads)),
        ))
    return outcomes
