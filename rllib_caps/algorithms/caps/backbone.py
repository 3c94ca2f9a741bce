"""What CAPS asks of a backbone, the offline RL algorithm that trains the heads and critics: the learner its loss
terms, its optimiser groups, its extra minibatch draws and the settings its losses take; the module its own nets
and its part of the training forward pass. Each backbone package (``iql/``, ``sacbc/``) defines one ``Backbone``;
``backbones.BACKBONES`` names them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

# (fwd_out, batch, settings) -> the named loss terms, whose sum is the step's loss.
LossTerms = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor], Any], dict[str, torch.Tensor]]
# (module, config) -> optimiser name -> (its parameters, its Adam learning rate).
OptimizerGroups = Callable[[torch.nn.Module, Any], dict[str, tuple[list[torch.nn.Parameter], float]]]
# (dataset, batch size, generator, config) -> the step's random draws besides its rows, from that generator.
DrawExtras = Callable[[Any, int, torch.Generator, Any], dict[str, torch.Tensor]]
# (module, model config, critic input size, hidden sizes, fused critics) -> None: adds the backbone's own nets.
AddTrainingNets = Callable[[torch.nn.Module, dict[str, Any], int, list[int], bool], None]
# (module, batch, critic input at s, at s', t, t + 1) -> the forward outputs its losses need besides the critics at
# (s, a).
ForwardTrain = Callable[[torch.nn.Module, dict[str, Any], torch.Tensor, torch.Tensor, Any, Any], dict[str, Any]]


def no_extras(dataset: Any, batch_size: int, generator: torch.Generator, config: Any) -> dict[str, torch.Tensor]:
    """A backbone whose step draws nothing besides the minibatch's rows."""
    return {}


@dataclass(frozen=True)
class Backbone:
    """One CAPS backbone.

    ``loss_terms`` and ``loss_settings`` (config -> the settings ``loss_terms`` takes, vector settings as
    sequences); ``member_settings`` names, per config setting in which a population's members may differ
    (``CAPSConfig.member_hyperparameters``), the loss setting it fills; ``defaults`` are the backbone's values of
    the config's backbone-dependent settings left None (learning rates, ``clamp_cost_q``); ``add_training_nets``
    and ``forward_train``: the module's own nets and its part of the training forward pass, beside the heads and
    twin critics every backbone has; ``state_dependent_std``: the heads' std is an output of the actor (else a
    learned or fixed parameter); ``advantage_weighted``: its heads are trained by advantage-weighted regression
    (β, the weight clip and code mode's ``beta_cost`` apply); ``code_anneals_actor_lr``: with implementation
    "code" the authors' code anneals the actor's lr.
    """

    name: str
    loss_terms: LossTerms
    loss_settings: Callable[[Any], Any]
    optimizer_groups: OptimizerGroups
    defaults: Mapping[str, Any]
    member_settings: Mapping[str, str]
    add_training_nets: AddTrainingNets
    forward_train: ForwardTrain
    draw_extras: DrawExtras = no_extras
    state_dependent_std: bool = False
    advantage_weighted: bool = False
    code_anneals_actor_lr: bool = False

    def settings_on(self, config: Any, device: torch.device | str) -> Any:
        """``loss_settings(config)`` with the heads' λ_k as a float32 tensor on ``device``, made once before any
        step: a captured step then copies nothing from the host."""
        settings = self.loss_settings(config)
        return dataclasses.replace(settings, lambdas=torch.tensor(settings.lambdas, dtype=torch.float32,
                                                                  device=device))

    def with_member_values(self, settings: Any, hyperparameters: Mapping[str, torch.Tensor]) -> Any:
        """``settings`` with a population member's own values (``hyperparameters``, by config name; see
        ``rllib_caps.core.population``): under the population's vmap each is that member's scalar or vector."""
        return dataclasses.replace(settings, **{field: hyperparameters[name]
                                                for name, field in self.member_settings.items()
                                                if name in hyperparameters})
