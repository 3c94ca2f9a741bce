"""Framework-agnostic part of the COptiDICE RLModule; the torch implementation is in
``torch/default_coptidice_torch_rl_module.py`` (like RLlib's IQL)."""

from __future__ import annotations

import abc

from ray.rllib.core.rl_module.rl_module import RLModule


class DefaultCOptiDICERLModule(RLModule, abc.ABC):
    """Squashed-Gaussian actor, the ν and χ networks, λ and τ, and the data statistics (``nets.add_networks``);
    ``_forward_train`` returns what ``losses.coptidice_losses`` consumes; the actor acts with tanh(μ)."""
