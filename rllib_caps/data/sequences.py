"""Whole episodes of a transition dataset and fixed-length windows over them, for sequence models (Decision
Transformers): the rows ordered by episode and step, undiscounted return-to-go and cost-to-go per row, and
right-padded windows gathered on the dataset's device. No Ray import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rllib_caps.data.dataset import TransitionDataset
from rllib_caps.data.errors import DatasetError
from rllib_caps.data.schema import ACTIONS, COSTS, EPS_ID, OBS, REWARDS, T

# Window columns (each (B, L, ...)); the window starts at step ``TIMESTEPS[:, 0]`` of its episode.
WINDOW_OBS, WINDOW_ACTIONS = "window_obs", "window_actions"  # (B, L, O), (B, L, A)
WINDOW_COSTS = "window_costs"  # c_t of each step, (B, L)
RETURNS_TO_GO, COSTS_TO_GO = "returns_to_go", "costs_to_go"  # R̂_t = Σ_{t' ≥ t} r_t', Ĉ_t likewise, (B, L)
TIMESTEPS = "timesteps"  # t of each position (continuing past the episode's end on padding), (B, L) long
MASK = "mask"  # 1.0 on steps of the episode, 0.0 on the right padding, (B, L)


def _reverse_cumsum(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Σ_{t' ≥ t} values within each episode (float64, so long episodes do not drift)."""
    cumsum = np.cumsum(values, dtype=np.float64)
    ends = starts + lengths - 1
    episode = np.repeat(np.arange(len(starts)), lengths)
    return cumsum[ends][episode] - cumsum + values


@dataclass
class EpisodeSequences:
    """The episodes of a ``TransitionDataset`` (``eps_id``, ``t`` columns): episode ``e`` is the rows
    ``rows[starts[e] : starts[e] + lengths[e]]`` of the dataset in step order, ``t = 0, 1, …``.

    The dataset's tensors are not copied: ``rows`` maps the episode order to dataset rows.
    """

    dataset: TransitionDataset
    rows: torch.Tensor  # (N,) long: dataset row of each position in episode order
    starts: torch.Tensor  # (E,) long
    lengths: torch.Tensor  # (E,) long
    returns_to_go: torch.Tensor  # (N,) float32, in episode order
    costs_to_go: torch.Tensor  # (N,) float32, in episode order

    @classmethod
    def from_dataset(cls, dataset: TransitionDataset) -> EpisodeSequences:
        """Orders the rows by (``eps_id``, ``t``) and checks every episode has the steps 0, 1, …, n − 1."""
        eps_id = dataset.tensors[EPS_ID].cpu().numpy()
        steps = dataset.tensors[T].cpu().numpy()
        order = np.lexsort((steps, eps_id))
        _, starts, lengths = np.unique(eps_id[order], return_index=True, return_counts=True)
        expected = np.arange(len(order)) - np.repeat(starts, lengths)
        bad = np.flatnonzero(steps[order] != expected)
        if bad.size:
            episode = eps_id[order][bad[0]]
            raise DatasetError(f"{EPS_ID}/{T} columns: episode {episode} does not have the steps 0, 1, ... in order "
                               f"(found t = {steps[order][bad[0]]} where {expected[bad[0]]} belongs)")
        rewards = dataset.tensors[REWARDS].cpu().numpy()[order]
        costs = dataset.tensors[COSTS].cpu().numpy()[order]
        device = dataset.tensors[REWARDS].device

        def tensor(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
            return torch.as_tensor(array).to(device=device, dtype=dtype)

        return cls(dataset=dataset, rows=tensor(order, torch.long), starts=tensor(starts, torch.long),
                   lengths=tensor(lengths, torch.long),
                   returns_to_go=tensor(_reverse_cumsum(rewards, starts, lengths), torch.float32),
                   costs_to_go=tensor(_reverse_cumsum(costs, starts, lengths), torch.float32))

    def __len__(self) -> int:
        return self.starts.numel()

    @property
    def episode_returns(self) -> torch.Tensor:
        """R of every episode: its undiscounted return, (E,)."""
        return self.returns_to_go[self.starts]

    @property
    def episode_costs(self) -> torch.Tensor:
        """C of every episode: its undiscounted cost, (E,)."""
        return self.costs_to_go[self.starts]

    def windows(self, episodes: torch.Tensor, first_steps: torch.Tensor, length: int) -> dict[str, torch.Tensor]:
        """The windows of steps ``first_steps[i], …, first_steps[i] + length − 1`` of episode ``episodes[i]``;
        steps past the episode's end are zero with ``MASK`` 0 (right padding), their ``TIMESTEPS`` continue."""
        offsets = torch.arange(length, device=episodes.device)
        steps = first_steps[:, None] + offsets  # (B, L)
        valid = steps < self.lengths[episodes][:, None]
        position = torch.where(valid, self.starts[episodes][:, None] + steps, 0)
        rows = self.rows[position]
        mask = valid.to(torch.float32)

        def padded(picked: torch.Tensor) -> torch.Tensor:
            return picked * mask.view(*mask.shape, *([1] * (picked.dim() - 2))).to(picked.dtype)

        tensors = self.dataset.tensors
        return {WINDOW_OBS: padded(tensors[OBS][rows]), WINDOW_ACTIONS: padded(tensors[ACTIONS][rows]),
                WINDOW_COSTS: padded(tensors[COSTS][rows]), RETURNS_TO_GO: padded(self.returns_to_go[position]),
                COSTS_TO_GO: padded(self.costs_to_go[position]), TIMESTEPS: steps, MASK: mask}
