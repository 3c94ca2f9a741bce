"""Torch CAPS learner: one Adam per network group, the pure losses of the configured backbone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID, ParamDict, StateDict

from rllib_caps.algorithms.caps.keys import NEXT_PI_NOISE, PI_NOISE
from rllib_caps.algorithms.caps.losses import caps_iql_losses
from rllib_caps.algorithms.caps.sacbc_losses import caps_sacbc_losses
from rllib_caps.core.calibration import CALIBRATION_COLUMNS, calibrate_cost_critic
from rllib_caps.core.learner import OfflineSafeTorchLearner
from rllib_caps.data import TransitionDataset, schema

BACKBONE_LOSSES = {"iql": caps_iql_losses, "sacbc": caps_sacbc_losses}
ACTOR_LR_COSINE_STEPS = 1_000_000  # the authors' IQL code: CosineAnnealingLR(actor optimiser, T_max = 1e6 steps)


def optimizer_groups(module: torch.nn.Module, config: Any) -> dict[str, tuple[list[torch.nn.Parameter], float]]:
    """The parameters and Adam learning rate of each optimiser: actor and twin critics for both backbones, plus the
    value nets (IQL) or the temperature log α (SAC+BC, at the actor's rate)."""
    groups = {"actor": (module.actor, config.resolved_actor_lr), "qr": (module.qr, config.resolved_critic_lr),
              "qc": (module.qc, config.resolved_critic_lr)}
    if config.backbone == "sacbc":
        return {name: (list(net.parameters()), lr) for name, (net, lr) in groups.items()} | {
            "alpha": ([module.log_alpha], config.resolved_actor_lr)}
    groups["values"] = (module.values, config.value_lr)
    return {name: (list(net.parameters()), lr) for name, (net, lr) in groups.items()}


def caps_minibatch(dataset: TransitionDataset, batch_size: int, generator: torch.Generator, config: Any
                   ) -> dict[str, torch.Tensor]:
    """A CAPS step's minibatch: uniformly sampled transitions, then ``caps_noise``, all from ``generator``."""
    return dataset.sample(batch_size, generator) | caps_noise(dataset, batch_size, generator, config)


def caps_noise(dataset: TransitionDataset, batch_size: int, generator: torch.Generator, config: Any
               ) -> dict[str, torch.Tensor]:
    """For SAC+BC, the standard-normal noise of every head's sampled action at s and at s' (``PI_NOISE``,
    ``NEXT_PI_NOISE``, each ``(B, K, A)``) from ``generator``; IQL draws none."""
    if config.backbone != "sacbc":
        return {}
    shape = (batch_size, config.num_heads, dataset.tensors[schema.ACTIONS].shape[-1])
    return {key: torch.randn(shape, generator=generator, device=generator.device)
            for key in (PI_NOISE, NEXT_PI_NOISE)}


class CAPSTorchLearner(OfflineSafeTorchLearner):
    """CAPS losses (paper Sec. "Two CAPS Instantiations") on top of the in-memory ``OfflineSafeTorchLearner``.

    The loss terms touch disjoint parameters, so TorchLearner's single backward pass on their sum is
    exact (RLlib's IQL learner needs one backward per optimiser; this one does not). With
    ``config.anneal_actor_lr`` (IQL, implementation "code") the actor's learning rate follows torch's
    ``CosineAnnealingLR`` over ``ACTOR_LR_COSINE_STEPS`` gradient steps, stepped after every optimiser step, as in
    the authors' code; RLlib's own lr scheduler is then not registered for the actor (it would reset the lr).
    """

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        self._actor_lr_schedulers = getattr(self, "_actor_lr_schedulers", {})
        annealed = ("actor",) if config.anneal_actor_lr else ()
        optimizers = self.register_adam_optimizers(module_id, optimizer_groups(self.module[module_id], config),
                                                   unscheduled=annealed)
        if annealed:
            self._actor_lr_schedulers[module_id] = torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizers["actor"], T_max=ACTOR_LR_COSINE_STEPS)

    def calibrate_cost_critic(self, mode: str) -> float:
        """Sets the module's Q^c shift by ``mode`` from its critic's bias on this learner's dataset
        (``core.calibration.calibrate_cost_critic``); returns the shift."""
        columns = {name: self.dataset.tensors[name].cpu().numpy() for name in CALIBRATION_COLUMNS}
        return calibrate_cost_critic(self.module[DEFAULT_MODULE_ID], columns, mode)

    @override(OfflineSafeTorchLearner)
    def draw_extras(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return caps_noise(self.dataset, batch_size, generator, self.config)

    @override(OfflineSafeTorchLearner)
    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        return BACKBONE_LOSSES[config.backbone](fwd_out, batch, config.loss_settings(hyperparameters))

    @override(OfflineSafeTorchLearner)
    def captured_step_blockers(self) -> list[str]:
        blockers = super().captured_step_blockers()
        if self.config.anneal_actor_lr:
            blockers.append("the actor's cosine learning rate (implementation='code') steps on the host")
        return blockers

    @override(OfflineSafeTorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        super().apply_gradients(gradients_dict)
        for scheduler in self._actor_lr_schedulers.values():
            scheduler.step()

    @override(TorchLearner)
    def set_state(self, state: StateDict) -> None:
        """Restores the module and optimisers, then puts each cosine schedule at the actor optimiser's step count
        (the restored lr is already annealed; the schedule continues from there)."""
        super().set_state(state)
        for scheduler in self._actor_lr_schedulers.values():
            steps = [int(s["step"]) for s in scheduler.optimizer.state.values() if "step" in s]
            scheduler.last_epoch = max(steps, default=0)
