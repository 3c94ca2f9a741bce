"""Torch networks every offline safe algorithm here reuses: the MLP and the twin Q critic."""

from __future__ import annotations

import torch
from torch import nn


def mlp(in_dim: int, hidden: list[int], out_dim: int | None) -> nn.Sequential:
    """ReLU MLP; with ``out_dim=None`` it ends at the last hidden layer (a body)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class TwinQ(nn.Module):
    """Two independent Q(s, a) networks; ``forward`` returns both, each shape ``(...,)``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.q1 = mlp(obs_dim + act_dim, hidden, 1)
        self.q2 = mlp(obs_dim + act_dim, hidden, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, actions], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)
