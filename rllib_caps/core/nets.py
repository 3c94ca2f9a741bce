"""Torch networks every offline safe algorithm here reuses: the MLP, pairs of MLPs on one input (V^r/V^c) and
the twin Q critic, each either as separate MLPs or fused into one ensemble (one batched matmul per layer)."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn


class OutputLinear(nn.Linear):
    """``nn.Linear`` computed in float32 even under bf16 autocast: a network's outputs (values, action means) keep
    float32 resolution (a Q of 100 resolves 1e-5, not bf16's 0.5), while the hidden layers before it run in bf16.
    Without autocast it is ``nn.Linear`` (the same parameters and state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


def mlp(in_dim: int, hidden: list[int], out_dim: int | None) -> nn.Sequential:
    """ReLU MLP; with ``out_dim=None`` it ends at the last hidden layer (a body), else at an ``OutputLinear``."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    if out_dim is not None:
        layers.append(OutputLinear(in_dim, out_dim))
    return nn.Sequential(*layers)


class EnsembleLinear(nn.Module):
    """``members`` independent linear layers applied as one batched matmul: ``(M, N, in) -> (M, N, out)``; an
    input without the member dimension, ``(N, in)``, is shared by all members.

    Each member is initialised as ``nn.Linear`` is: weight and bias uniform in ±1/√in. ``output=True`` computes
    in float32 under autocast, as ``OutputLinear`` does.
    """

    def __init__(self, in_dim: int, out_dim: int, members: int, output: bool = False) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.output = output
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # a shared input: an expanded view, not a copy (faster than matmul's broadcast on CPU)
            x = x.expand(self.weight.shape[0], -1, -1)
        if self.output and torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return torch.baddbmm(self.bias, x.float(), self.weight)
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """``members`` ReLU MLPs of the same shape, evaluated together: ``(..., in) -> (M, ..., out)``."""

    def __init__(self, in_dim: int, hidden: list[int], out_dim: int, members: int) -> None:
        super().__init__()
        widths = [in_dim, *hidden, out_dim]
        self.layers = nn.ModuleList(EnsembleLinear(i, o, members, output=j == len(hidden))
                                    for j, (i, o) in enumerate(zip(widths, widths[1:], strict=False)))

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
        self.mean = OutputLinear(hidden[-1], act_dim)
        self.log_std = OutputLinear(hidden[-1], act_dim)

    def forward(self, obs: torch.Tensor) -> torch.distributions.Normal:
        """The pre-tanh action distribution at ``obs``."""
        features = self.body(obs)
        log_std = self.log_std(features).clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        return torch.distributions.Normal(self.mean(features), log_std.exp(), validate_args=False)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(self.body(obs)))


def squashed_log_prob(dist: torch.distributions.Normal, actions: torch.Tensor, edge: float = 1e-4) -> torch.Tensor:
    """log π(a | s) of actions ``a`` in [−1, 1] under the tanh-squashed Gaussian whose pre-tanh distribution is
    ``dist``: ``log N(atanh a) − Σ log(1 − a²)``, summed over action dimensions. Actions are clipped to
    ±(1 − ``edge``) first, so boundary actions have a finite likelihood."""
    actions = actions.clamp(-1.0 + edge, 1.0 - edge)
    return (dist.log_prob(torch.atanh(actions)) - torch.log1p(-actions.pow(2))).sum(-1)


def frozen_call(module: nn.Module, *args: torch.Tensor) -> Any:
    """``module(*args)`` with its parameters detached: gradients flow to the inputs only (an actor's loss through a
    critic), so one backward pass on a sum of losses gives each network the gradient of its own loss alone."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    return torch.func.functional_call(module, params, args)
