"""``CPQConfig`` and ``CPQ``: Constraints Penalized Q-learning (Xu, Zhan and Zhu, AAAI 2022) as OSRL builds it,
trained for one cost limit κ.

    config = (
        CPQConfig()
        .environment("BallCircle")
        .offline_data(input_="datasets/BallCircle")
        .training(cost_limit=20)
    )
    algo = config.build_algo()
    algo.train()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cpq.losses import CPQLossSettings
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticConfig
from rllib_caps.core.offline import OfflineSafeAlgorithm

if TYPE_CHECKING:
    import torch


class CPQConfig(VAEActorCriticConfig):
    """Configuration of CPQ; defaults are OSRL's (docs/baselines.md). The family's settings are documented on
    ``VAEActorCriticConfig``, κ on ``CostLimitedConfig``.

    CPQ settings (``.training(...)``):
        ood_quantile: policy samples whose VAE-encoder KL is at or above this quantile of the batch are OOD (0.75).
        ood_cost_scale: the OOD cost is pushed up to this × q̄_c (OSRL's ``qc_scalar``, 1.5).
        implementation: "osrl" (the OOD term is computed from the detached target critic on pre-tanh samples,
            so the cost inflation has no effect, as in OSRL) or "paper" (the term goes through the online cost
            critic on tanh-squashed policy actions, so Q_c is inflated on OOD actions; cost backups masked at
            episode ends).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or CPQ)
        self.num_gradient_steps = 100_000
        self.actor_lr = 1e-4
        self.alpha_lr = 1e-4
        self.ood_quantile = 0.75
        self.ood_cost_scale = 1.5

    @override(VAEActorCriticConfig)
    def training(self, *, ood_quantile: float = NotProvided, ood_cost_scale: float = NotProvided,
                 **kwargs: Any) -> CPQConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    def loss_settings(self, hyperparameters: Mapping[str, torch.Tensor] | None = None) -> CPQLossSettings:
        """The losses' settings, with a population member's own q̄_c among ``hyperparameters`` (``cost_threshold``)."""
        return CPQLossSettings(
            gamma=self.gamma, reward_scale=self.reward_scale, kl_weight=self.kl_weight,
            ood_quantile=self.ood_quantile, ood_cost_scale=self.ood_cost_scale, alpha_lr=self.alpha_lr,
            cost_threshold=self.cost_threshold(hyperparameters), implementation=self.implementation,
            time_limit=self.time_limit,
        )

    @override(VAEActorCriticConfig)
    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.ood_quantile <= 1.0:
            self.config_error(f"ood_quantile must be in [0, 1], got {self.ood_quantile}")
        if self.ood_cost_scale <= 0:
            self.config_error(f"ood_cost_scale must be > 0, got {self.ood_cost_scale}")

    @override(VAEActorCriticConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.algorithms.cpq.torch.default_cpq_torch_rl_module import DefaultCPQTorchRLModule

        return RLModuleSpec(module_class=DefaultCPQTorchRLModule)

    @override(VAEActorCriticConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.algorithms.cpq.torch.cpq_torch_learner import CPQTorchLearner

        return CPQTorchLearner


class CPQ(OfflineSafeAlgorithm):
    """CPQ: cost critic inflated on OOD actions, reward backed up and maximised only where Q_c ≤ q̄_c."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> CPQConfig:
        return CPQConfig()
