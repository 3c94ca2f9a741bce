"""Framework-agnostic part of the CPQ RLModule; the torch implementation is in
``torch/default_cpq_torch_rl_module.py`` (like RLlib's IQL)."""

from __future__ import annotations

import abc

from ray.rllib.core.rl_module.rl_module import RLModule


class DefaultCPQRLModule(RLModule, abc.ABC):
    """Squashed-Gaussian actor, conditional VAE, reward and cost critics of one twin pair each (OSRL's
    ``EnsembleQCritic`` with ``num_q=2``) with targets, and the OOD multiplier α as a buffer. ``_forward_train``
    returns what ``cpq.losses.cpq_losses`` consumes."""
