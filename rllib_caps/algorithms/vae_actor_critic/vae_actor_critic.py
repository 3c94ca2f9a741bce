"""The family of BEAR-Lag and CPQ: a squashed-Gaussian actor, a conditional VAE behaviour model, reward and cost
critic ensembles with targets, Lagrange multipliers kept as module buffers, trained for one cost limit κ.

``VAEActorCriticConfig`` holds their shared settings, ``VAEActorCriticTorchModule`` their networks and the
deterministic act-time forward (tanh μ: a per-threshold agent needs no budget bookkeeping), and
``VAEActorCriticTorchLearner`` their optimisers, the step's noise and each algorithm's pure loss function, so that
trials per seed and κ train as one population.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID
from torch import nn

from rllib_caps.algorithms.cost_limited.cost_limited import CostLimitedConfig
from rllib_caps.algorithms.vae_actor_critic.nets import add_networks
from rllib_caps.algorithms.vae_actor_critic.noise import standard_normal_draws
from rllib_caps.core.learner import OfflineSafeTorchLearner
from rllib_caps.core.torch_rl_module import OfflineTorchRLModule
from rllib_caps.utils.smoke import smoke_test

IMPLEMENTATIONS = ("osrl", "paper")


class VAEActorCriticConfig(CostLimitedConfig):
    """Shared settings of BEAR-Lag and CPQ (``.training(...)``); defaults are OSRL's (docs/baselines.md):

        implementation: "osrl" (reproduce OSRL's code, whose numbers the CAPS paper reports) or "paper" (the
            method as its paper states it); each algorithm's docstring lists what the switch changes.
        vae_hidden: hidden widths of the VAE's encoder and decoder ([400, 400]).
        kl_weight: β of the VAE loss MSE + β KL (0.5).
        num_samples: actions sampled per state (target backups, MMD, OOD probes; 10).
        reward_scale: rewards are multiplied by this in training (0.1); costs are not.
        actor_lr, critic_lr, vae_lr, alpha_lr: Adam learning rates, and the step size of the log α dual ascent.

    Also OSRL's: hidden [256, 256] for actor and critics, and ``time_limit="terminal"`` (OSRL's done =
    terminals OR timeouts masks the reward bootstrap).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class)
        self.hidden = [256, 256]
        self.time_limit = "terminal"
        self.implementation = "osrl"
        self.vae_hidden = [400, 400]
        self.kl_weight = 0.5
        self.num_samples = 10
        self.reward_scale = 0.1
        self.actor_lr = 1e-3
        self.critic_lr = 1e-3
        self.vae_lr = 1e-3
        self.alpha_lr = 1e-3

    @override(CostLimitedConfig)
    def training(self, *, implementation: str = NotProvided, vae_hidden: list[int] = NotProvided,
                 kl_weight: float = NotProvided, num_samples: int = NotProvided, reward_scale: float = NotProvided,
                 actor_lr: float = NotProvided, critic_lr: float = NotProvided, vae_lr: float = NotProvided,
                 alpha_lr: float = NotProvided, **kwargs: Any) -> VAEActorCriticConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @override(CostLimitedConfig)
    def validate(self) -> None:
        super().validate()
        if self.implementation not in IMPLEMENTATIONS:
            self.config_error(f"implementation must be one of {IMPLEMENTATIONS}, got {self.implementation!r}")
        if not (self.vae_hidden and all(isinstance(h, int) and h >= 1 for h in self.vae_hidden)):
            self.config_error(f"vae_hidden must be a non-empty list of layer widths >= 1, got {self.vae_hidden}")
        if self.num_samples < 1:
            self.config_error(f"num_samples must be >= 1, got {self.num_samples}")
        if self.kl_weight < 0:
            self.config_error(f"kl_weight must be >= 0, got {self.kl_weight}")

    @override(CostLimitedConfig)
    def apply_smoke_test_limits(self) -> VAEActorCriticConfig:
        super().apply_smoke_test_limits()
        if smoke_test():
            self.vae_hidden = [16, 16]
        return self

    @override(CostLimitedConfig)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {
            "vae_hidden": list(self.vae_hidden), "num_samples": self.num_samples,
            "implementation": self.implementation,
        }

    @override(CostLimitedConfig)
    def member_hyperparameters(self) -> dict[str, Any]:
        """Members of one population trained for different κ differ in the losses' q̄_c."""
        return {"discounted_cost_limit": self.discounted_cost_limit}

    def cost_threshold(self, hyperparameters: Mapping[str, torch.Tensor] | None = None) -> float | torch.Tensor:
        """The losses' q̄_c: a population member's own (its tensor among ``hyperparameters``), else the config's."""
        return (hyperparameters or {}).get("discounted_cost_limit", self.discounted_cost_limit)


class VAEActorCriticTorchModule(OfflineTorchRLModule, InferenceOnlyAPI, TargetNetworkAPI, abc.ABC):
    """The family's networks (``vae_actor_critic_nets.add_networks``): actor, VAE, reward and cost ``QEnsemble``s of
    ``CRITIC_GROUPS`` twin pairs, the targets of ``TARGETS`` and the multipliers' state (``duals``).
    ``model_config`` keys (filled by the config): ``hidden``, ``vae_hidden``, ``num_samples``, ``implementation``,
    ``cost_limit``, ``gamma``, ``horizon``.

    The inference-only copy (EnvRunners) keeps the actor alone; it acts with tanh(μ) (OSRL's deterministic
    evaluation). κ is fixed at training time.
    """

    framework: str = "torch"
    CRITIC_GROUPS: int  # twin pairs per critic ensemble; set by each algorithm
    TARGETS: list[str]  # the networks with a Polyak-averaged target copy ``<name>_target``

    @override(TorchRLModule)
    def setup(self) -> None:
        cfg = self.model_config
        obs_dim = int(math.prod(self.observation_space.shape))
        self.act_dim = int(math.prod(self.action_space.shape))
        hidden = list(cfg["hidden"])
        self.num_samples = int(cfg["num_samples"])
        self.osrl = cfg["implementation"] == "osrl"
        add_networks(self, obs_dim=obs_dim, act_dim=self.act_dim, hidden=hidden, vae_hidden=list(cfg["vae_hidden"]),
                     critic_groups=self.CRITIC_GROUPS, inference_only=self.inference_only)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        return ["vae", "qr", "qc", "duals"] + [f"{online}_target" for online in self.TARGETS]

    @override(TargetNetworkAPI)
    def make_target_networks(self) -> None:
        for name in self.TARGETS:
            setattr(self, f"{name}_target", make_target_network(getattr(self, name)))

    @override(TargetNetworkAPI)
    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(self, name), getattr(self, f"{name}_target")) for name in self.TARGETS]

    @override(TargetNetworkAPI)
    def forward_target(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {}  # the algorithms' _forward_train evaluate their targets where the backups need them

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = batch[Columns.OBS].float()
        return {Columns.ACTIONS: self.actor.deterministic(obs)}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)  # offline training never explores


class VAEActorCriticTorchLearner(OfflineSafeTorchLearner):
    """One Adam per network (actor, VAE, reward and cost critics), the step's noise drawn with its minibatch, and the
    algorithm's pure loss function.

    Critics enter the actor's loss with frozen parameters (``core.nets.frozen_call``) and every other cross term
    is detached, so TorchLearner's single backward pass on the sum gives each network its own loss's gradient.
    All four networks step at once on this step's batch: the actor sees the critics as they were before this
    step's critic update, where OSRL updates VAE → critics → actor in sequence (docs/baselines.md). The
    multipliers' new state is returned with the losses and written to the module's buffers after the step
    (``STATE_BUFFERS``), so a population keeps each member's own.
    """

    # (fwd_out, batch, settings) -> (losses per optimiser, metrics, new multiplier state); set by each algorithm.
    LOSS_FUNCTION: Callable[..., tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]]
    # (module, batch size) -> the step's standard-normal batch columns and their shapes; set by each algorithm.
    NOISE_SHAPES: Callable[[Any, int], dict[str, tuple[int, ...]]]

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        module = self.module[module_id]
        groups = {"actor": (module.actor, config.actor_lr), "vae": (module.vae, config.vae_lr),
                  "qr": (module.qr, config.critic_lr), "qc": (module.qc, config.critic_lr)}
        self.register_adam_optimizers(module_id, groups)

    @override(OfflineSafeTorchLearner)
    def draw_extras(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return standard_normal_draws(self.NOISE_SHAPES(self.module[DEFAULT_MODULE_ID].unwrapped(), batch_size),
                                     generator)

    @override(OfflineSafeTorchLearner)
    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        losses, metrics, state = self.LOSS_FUNCTION(fwd_out, batch, config.loss_settings(hyperparameters))
        return losses | {name: value.detach() for name, value in (metrics | state).items()}  # logged, not minimised


def multiplier_buffers(*names: str) -> dict[str, str]:
    """``STATE_BUFFERS`` of the multipliers' state ``names`` (``MultiplierState``'s buffers, ``duals.<name>``)."""
    return {name: f"duals.{name}" for name in names}
