"""The dataset a CAPS learner trains on (no Ray import): the converted dataset, less the per-step calibration's
held-out episodes with ``calibration_holdout``, and with the cost head's rows marked with
``cost_head_episode_limit`` (docs/paper.md, "A cost head of the safe episodes"). The learner and the plain-PyTorch
reference loop both call ``training_dataset``."""

from __future__ import annotations

import math
from typing import Any

import torch

from rllib_caps.algorithms.caps.calibration import held_out_episodes
from rllib_caps.algorithms.caps.keys import COST_HEAD_ROWS
from rllib_caps.data import TransitionDataset
from rllib_caps.data.episodes import nonempty_safe_episode_mask
from rllib_caps.data.schema import COSTS, EPS_ID


def cost_head_rows(eps_id: torch.Tensor, costs: torch.Tensor, limit: float) -> torch.Tensor:
    """``COST_HEAD_ROWS``: 1.0 on the transitions of the episodes whose total cost is ≤ ``limit``, else 0.0; a
    ValueError naming ``cost_head_episode_limit`` if no episode is that cheap."""
    return nonempty_safe_episode_mask(eps_id, costs, limit, setting="cost_head_episode_limit",
                                      remedy="raise the limit, or leave it unset (inf) to train the cost head on "
                                             "every episode").to(torch.float32)


def training_dataset(dataset: TransitionDataset, config: Any) -> TransitionDataset:
    """``dataset`` as a CAPS learner with ``config`` trains on it (see the module docstring); the same object when
    neither setting is on (no holdout, an infinite limit)."""
    tensors = dataset.tensors
    if config.calibration_holdout:  # training reads the episodes outside the calibration's held-out split
        held_out = torch.as_tensor(held_out_episodes(tensors[EPS_ID].cpu().numpy()), device=tensors[EPS_ID].device)
        tensors = {name: t[~held_out] for name, t in tensors.items()}
    if math.isfinite(config.cost_head_episode_limit):
        tensors = tensors | {COST_HEAD_ROWS: cost_head_rows(tensors[EPS_ID], tensors[COSTS],
                                                            config.cost_head_episode_limit)}
    return dataset if tensors is dataset.tensors else TransitionDataset(tensors)
