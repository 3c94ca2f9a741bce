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


class QEnsemble(nn.Module):
    """``groups`` independent ``TwinQ`` pairs; ``forward`` returns every net's value, shape ``(groups, 2, ...)``.

    BEAR-Lag (OSRL's ``EnsembleDoubleQCritic``) uses 2 groups, each reduced by its min to Q¹ and Q²; CPQ
    (``EnsembleQCritic``) one group reduced by its min.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], groups: int) -> None:
        super().__init__()
        self.twins = nn.ModuleList(TwinQ(obs_dim, act_dim, hidden) for _ in range(groups))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.stack(twin(obs, actions)) for twin in self.twins])


class SquashedGaussianActor(nn.Module):
    """Gaussian policy over pre-tanh actions; the action is tanh of a sample (OSRL's ``SquashedGaussianMLPActor``,
    log σ clamped to [−20, 2]). The deterministic action is tanh(μ)."""

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.body = mlp(obs_dim, hidden, None)
        self.mean = nn.Linear(hidden[-1], act_dim)
        self.log_std = nn.Linear(hidden[-1], act_dim)

    def forward(self, obs: torch.Tensor) -> torch.distributions.Normal:
        """The pre-tanh action distribution at ``obs``."""
        features = self.body(obs)
        log_std = self.log_std(features).clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        return torch.distributions.Normal(self.mean(features), log_std.exp())

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(self.body(obs)))


def frozen_call(module: nn.Module, *args: torch.Tensor) -> torch.Tensor:
    """``module(*args)`` with its parameters detached: gradients flow to the inputs only (an actor's loss through a
    critic), so one backward pass on a sum of losses gives each network the gradient of its own loss alone."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    return torch.func.functional_call(module, params, args)
