"""Torch BC learner: one Adam on the actor, the BC loss, and BC-Safe's episode filter on the loaded dataset."""

from __future__ import annotations

import logging
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID

from rllib_caps.algorithms.bc.default_bc_rl_module import BC_LOG_STD, BC_MEANS
from rllib_caps.algorithms.bc.episode_filter import safe_episodes
from rllib_caps.algorithms.bc.losses import bc_loss
from rllib_caps.core.learner import OfflineSafeTorchLearner

logger = logging.getLogger(__name__)


class BCTorchLearner(OfflineSafeTorchLearner):
    """BC on the in-memory ``OfflineSafeTorchLearner``; with ``safe_only`` it keeps only the episodes whose
    total cost is ≤ ``cost_limit`` before training starts."""

    @override(OfflineSafeTorchLearner)
    def build(self) -> None:
        super().build()
        if self.config.safe_only:
            rows = len(self.dataset)
            self.dataset = safe_episodes(self.dataset, float(self.config.cost_limit))
            logger.info("BC-Safe: %d of %d transitions are in episodes with cost <= %g", len(self.dataset), rows,
                        self.config.cost_limit)

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        self.register_adam_optimizers(module_id, {"actor": (self.module[module_id], config.actor_lr)})

    @override(OfflineSafeTorchLearner)
    def member_losses(self, fwd_out: dict, batch: dict, config: Any) -> dict[str, torch.Tensor]:
        return {"bc_loss": bc_loss(config.policy, fwd_out[BC_MEANS], fwd_out[BC_LOG_STD], batch[Columns.ACTIONS])}
