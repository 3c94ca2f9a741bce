"""Torch CAPS learner: one Adam per network group, the pure losses of the configured backbone."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID, TensorType

from rllib_caps.algorithms.caps.losses import caps_iql_losses
from rllib_caps.core.torch_learner import OfflineSafeTorchLearner

BACKBONE_LOSSES = {"iql": caps_iql_losses}


def optimizer_groups(module: torch.nn.Module, config: Any) -> dict[str, tuple[torch.nn.Module, float]]:
    """One Adam per network group: name -> (network, learning rate)."""
    return {"actor": (module.actor, config.actor_lr), "qr": (module.qr, config.critic_lr),
            "qc": (module.qc, config.critic_lr), "values": (module.values, config.value_lr)}


class CAPSTorchLearner(OfflineSafeTorchLearner):
    """CAPS losses (paper Sec. "IQL Instantiation") on top of the in-memory ``OfflineSafeTorchLearner``.

    The loss terms touch disjoint parameters, so TorchLearner's single backward pass on their sum is
    exact (RLlib's IQL learner needs one backward per optimiser; this one does not).
    """

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        for name, (net, lr) in optimizer_groups(self._module[module_id], config).items():
            params = self.get_parameters(net)
            self.register_optimizer(module_id=module_id, optimizer_name=name, optimizer=torch.optim.Adam(params),
                                    params=params, lr_or_lr_schedule=lr)

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id: ModuleID, config: Any, batch: dict,
                                fwd_out: dict) -> TensorType:
        losses = BACKBONE_LOSSES[config.backbone](fwd_out, batch, config.loss_settings())
        self.record_losses(module_id, losses)
        return sum(losses.values())
