"""Torch networks every offline safe algorithm here reuses: the MLP, pairs of MLPs on one input (V^r/V^c) and
the twin Q critic, each either as separate MLPs or fused into one ensemble (one batched matmul per layer)."""

from __future__ import annotations

import copy
import math

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


class EnsembleLinear(nn.Module):
    """``members`` independent linear layers applied as one batched matmul: ``(M, N, in) -> (M, N, out)``; an
    input without the member dimension, ``(N, in)``, is shared by all members.

    Each member is initialised as ``nn.Linear`` is: weight and bias uniform in ±1/√in.
    """

    def __init__(self, in_dim: int, out_dim: int, members: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return torch.matmul(x, self.weight) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """``members`` ReLU MLPs of the same shape, evaluated together: ``(..., in) -> (M, ..., out)``."""

    def __init__(self, in_dim: int, hidden: list[int], out_dim: int, members: int) -> None:
        super().__init__()
        widths = [in_dim, *hidden, out_dim]
        self.layers = nn.ModuleList(EnsembleLinear(i, o, members) for i, o in zip(widths, widths[1:], strict=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else torch.relu(layer(x))
        return x.reshape(x.shape[0], *lead, x.shape[-1])

    @classmethod
    def from_mlps(cls, mlps: list[nn.Sequential]) -> EnsembleMLP:
        """An ensemble holding copies of the weights of ``mlps`` (each built by ``mlp`` with the same shape)."""
        linears = [[m for m in net if isinstance(m, nn.Linear)] for net in mlps]
        first = linears[0]
        ensemble = cls(first[0].in_features, [lin.out_features for lin in first[:-1]], first[-1].out_features,
                       len(mlps))
        with torch.no_grad():
            for i, layer in enumerate(ensemble.layers):
                layer.weight.copy_(torch.stack([net[i].weight.T for net in linears]))
                layer.bias.copy_(torch.stack([net[i].bias[None] for net in linears]))
        return ensemble


class MLPPair(nn.Module):
    """Two MLPs with one input and one output each, e.g. V^r and V^c; ``forward`` returns both, each shape
    ``(...,)``. ``fused=True`` evaluates them as one ``EnsembleMLP`` (the same functions, fewer kernels)."""

    def __init__(self, in_dim: int, hidden: list[int], fused: bool = False) -> None:
        super().__init__()
        self.fused = fused
        if fused:
            self.ensemble = EnsembleMLP(in_dim, hidden, 1, members=2)
        else:
            self.members = nn.ModuleList(mlp(in_dim, hidden, 1) for _ in range(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fused:
            first, second = self.ensemble(x).squeeze(-1).unbind(0)
            return first, second
        return self.members[0](x).squeeze(-1), self.members[1](x).squeeze(-1)

    def fused_copy(self) -> MLPPair:
        """The same pair as one ensemble with these weights (for checking fused against unfused)."""
        if self.fused:
            raise ValueError("this pair is already fused")
        pair = copy.deepcopy(self)
        del pair.members
        pair.fused, pair.ensemble = True, EnsembleMLP.from_mlps(list(self.members))
        return pair


class TwinQ(MLPPair):
    """Two independent Q(s, a) networks; ``forward`` returns both, each shape ``(...,)``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], fused: bool = False) -> None:
        super().__init__(obs_dim + act_dim, hidden, fused)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(torch.cat([obs, actions], dim=-1))
