"""Framework-agnostic part of the BEAR-Lag RLModule; the torch implementation is in
``torch/default_bearl_torch_rl_module.py`` (like RLlib's IQL)."""

from __future__ import annotations

import abc

from ray.rllib.core.rl_module.rl_module import RLModule


class DefaultBEARLRLModule(RLModule, abc.ABC):
    """Squashed-Gaussian actor with a target copy, conditional VAE, reward and cost critics of two twin groups
    each (OSRL's ``EnsembleDoubleQCritic`` with ``num_q=2``) with targets, and the MMD multiplier α and the PID
    state as buffers. ``_forward_train`` returns what ``bearl.losses.bearl_losses`` consumes."""
