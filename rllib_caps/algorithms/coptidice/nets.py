"""COptiDICE's networks without Ray: the RLModule and a plain PyTorch loop build them with the same function, and
``forward.coptidice_training_outputs`` reads them by attribute name."""

from __future__ import annotations

import torch
from torch import nn

from rllib_caps.algorithms.cost_limited.lagrangian import SoftplusMultiplier
from rllib_caps.core.nets import MLPPair, SquashedGaussianActor
from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import ACTIONS, OBS


class StateValue(MLPPair):
    """ν(s) or χ(s): the min of two state-only MLPs (OSRL's ``EnsembleQCritic`` with ``num_q=2`` and no action)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        first, second = super().forward(obs)
        return torch.min(first, second)


class DataStatistics(nn.Module):
    """What the training forward needs of the dataset, as buffers (saved with the module): the per-dimension
    standard deviations of observations and actions (the scale of the BC noise) and the fraction of rows that
    are initial transitions (p_init of OSRL's initial-state estimator)."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.register_buffer("obs_std", torch.ones(obs_dim))
        self.register_buffer("act_std", torch.ones(act_dim))
        self.register_buffer("init_fraction", torch.ones(()))

    @torch.no_grad()
    def assign_from(self, dataset: TransitionDataset) -> None:
        self.obs_std.copy_(dataset.tensors[OBS].float().std(0))
        self.act_std.copy_(dataset.tensors[ACTIONS].float().std(0))
        self.init_fraction.copy_(torch.tensor(dataset.initial_rows().numel() / len(dataset)))


def add_networks(owner: nn.Module, *, obs_dim: int, act_dim: int, hidden: list[int],
                 inference_only: bool = False) -> None:
    """Sets ``owner.actor`` and, unless ``inference_only``, ``owner.nu``, ``owner.chi`` (``StateValue``),
    ``owner.lagrange`` (λ) and ``owner.temperature`` (τ) (``SoftplusMultiplier``) and ``owner.stats``."""
    owner.actor = SquashedGaussianActor(obs_dim, act_dim, hidden)
    if not inference_only:
        owner.nu = StateValue(obs_dim, hidden)
        owner.chi = StateValue(obs_dim, hidden)
        owner.lagrange = SoftplusMultiplier()
        owner.temperature = SoftplusMultiplier()
        owner.stats = DataStatistics(obs_dim, act_dim)


NETWORKS = ("actor", "nu", "chi", "lagrange", "temperature")  # one Adam each


class COptiDICENets(nn.Module):
    """The networks in a plain ``nn.Module`` (no RLlib), for a bare training loop; ``settings`` is the module's
    model config (``hidden``, ``implementation``, ``data_noise``)."""

    def __init__(self, obs_dim: int, act_dim: int, settings: dict) -> None:
        super().__init__()
        self.osrl = settings["implementation"] == "osrl"
        self.data_noise = float(settings["data_noise"])
        add_networks(self, obs_dim=obs_dim, act_dim=act_dim, hidden=list(settings["hidden"]))
