"""Framework-agnostic part of the BC RLModule; the torch implementation is in ``torch/``."""

from __future__ import annotations

import abc

from ray.rllib.core.rl_module.rl_module import RLModule

BC_MEANS, BC_LOG_STD = "bc_means", "bc_log_std"  # training outputs: tanh action means (B, A), log-std (A,) or None


class DefaultBCRLModule(RLModule, abc.ABC):
    """One actor π(s) (tanh-squashed into the normalised action box); ``model_config`` keys (filled in by
    ``BCConfig``): ``hidden``, ``policy`` ("deterministic" or "gaussian"), plus the shared ``task``, ``seed``,
    ``cost_limit``. Evaluation always acts with the mean."""
