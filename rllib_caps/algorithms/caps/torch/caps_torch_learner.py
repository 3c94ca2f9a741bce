"""Torch CAPS learner: one Adam per network group and the pure losses of the configured backbone
(``CAPSConfig.backbone_spec``: ``iql/`` or ``sacbc/``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID, ParamDict, StateDict

from rllib_caps.algorithms.caps.backbone import Backbone
from rllib_caps.algorithms.caps.calibration import CALIBRATION_COLUMNS, calibrate_cost_critic
from rllib_caps.algorithms.caps.training_data import training_dataset
from rllib_caps.core.learner import OfflineSafeTorchLearner

ACTOR_LR_COSINE_STEPS = 1_000_000  # the authors' IQL code: CosineAnnealingLR(actor optimiser, T_max = 1e6 steps)


class CAPSTorchLearner(OfflineSafeTorchLearner):
    """CAPS losses (paper Sec. "Two CAPS Instantiations") on top of the in-memory ``OfflineSafeTorchLearner``:
    its backbone's (``backbone.Backbone``) optimiser groups, extra draws and loss terms.

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
        optimizers = self.register_adam_optimizers(
            module_id, self.backbone.optimizer_groups(self.module[module_id], config), unscheduled=annealed)
        if annealed:
            self._actor_lr_schedulers[module_id] = torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizers["actor"], T_max=ACTOR_LR_COSINE_STEPS)

    def calibrate_cost_critic(self, mode: str) -> float:
        """Sets the module's Q^c shift by ``mode`` from its critic's bias on this learner's dataset
        (``calibration.calibrate_cost_critic``); returns the shift."""
        columns = self.calibration_data.numpy_columns(CALIBRATION_COLUMNS)
        return calibrate_cost_critic(self.module[DEFAULT_MODULE_ID], columns, mode)

    @override(OfflineSafeTorchLearner)
    def build(self) -> None:
        """The config's backbone first (the optimisers are its groups), then RLlib's build, then the backbone's loss
        settings made once on the learner's device (plain attributes: a compiled step reads them)."""
        self.backbone: Backbone = self.config.backbone_spec
        super().build()
        self.loss_settings = self.backbone.settings_on(self.config, self.device)
        self.calibration_data = self.dataset  # what calibrate_cost_critic reads: every episode
        self.dataset = training_dataset(self.dataset, self.config)

    @override(OfflineSafeTorchLearner)
    def draw_extras(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return self.backbone.draw_extras(self.dataset, batch_size, generator, self.config)

    @override(OfflineSafeTorchLearner)
    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The backbone's loss terms (``iql.losses.caps_iql_losses``, ``sacbc.losses.caps_sacbc_losses``), with a
        population member's own β and λ_k where it has them."""
        settings = self.loss_settings
        if hyperparameters:
            settings = self.backbone.with_member_values(settings, hyperparameters)
        return self.backbone.loss_terms(fwd_out, batch, settings)

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
