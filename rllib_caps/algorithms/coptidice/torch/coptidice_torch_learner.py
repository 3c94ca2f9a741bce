"""Torch COptiDICE learner: one Adam per network and multiplier, the data statistics, initial-state samples and
noise the training forward needs, and the pure losses (so trials per seed and κ can train as one population)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID

from rllib_caps.algorithms.coptidice.forward import coptidice_extras
from rllib_caps.algorithms.coptidice.losses import coptidice_losses
from rllib_caps.core.learner import OfflineSafeTorchLearner


class COptiDICETorchLearner(OfflineSafeTorchLearner):
    """Every cross term of the losses is detached, so TorchLearner's single backward pass on their sum gives each
    network its own loss's gradient, and all five step at once on this step's batch. OSRL steps χ → τ → ν → λ →
    actor in sequence and recomputes the actor's weights w after the ν step; here the actor's w is the one from
    before this step's ν update (docs/baselines.md)."""

    @override(OfflineSafeTorchLearner)
    def build(self) -> None:
        super().build()
        self.module.foreach_module(lambda _mid, module: module.unwrapped().stats.assign_from(self.dataset))

    @override(OfflineSafeTorchLearner)
    def draw_extras(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return coptidice_extras(self.dataset, batch_size, generator, self.config.implementation)

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        module = self.module[module_id]
        self.register_adam_optimizers(module_id, {
            "actor": (module.actor, config.actor_lr), "nu": (module.nu, config.critic_lr),
            "chi": (module.chi, config.critic_lr), "lagrange": (module.lagrange, config.scalar_lr),
            "temperature": (module.temperature, config.scalar_lr)})

    @override(OfflineSafeTorchLearner)
    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        losses, metrics = coptidice_losses(fwd_out, batch, config.loss_settings(hyperparameters))
        return losses | metrics  # the metrics are detached: they are logged, not minimised
