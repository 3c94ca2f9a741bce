"""``COptiDICEConfig`` and ``COptiDICE``: offline constrained policy optimisation by stationary distribution
correction estimation (Lee et al., ICLR 2022) as OSRL builds it, trained for one cost limit κ.

    config = (
        COptiDICEConfig()
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

from rllib_caps.algorithms.coptidice.losses import COptiDICELossSettings
from rllib_caps.algorithms.cost_limited.cost_limited import CostLimitedConfig
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import IMPLEMENTATIONS
from rllib_caps.core.offline import OfflineSafeAlgorithm

if TYPE_CHECKING:
    import torch


class COptiDICEConfig(CostLimitedConfig):
    """Configuration of COptiDICE; defaults are OSRL's (docs/baselines.md): hidden [256, 256] for the actor, ν and
    χ, batch 512, 100k steps, ``time_limit="terminal"`` (OSRL's done = terminals OR timeouts). κ is documented
    on ``CostLimitedConfig``.

    COptiDICE settings (``.training(...)``):
        implementation: "osrl" (OSRL's code: ĉ is compared with q̄_c, E[ν(s₀)] from the t = 0 rows of the
            uniform batch, the policy fitted by the pre-tanh Gaussian likelihood of the raw action) or "paper"
            (ĉ compared with (1 − γ) q̄_c, the occupancy scale of ĉ; initial states sampled separately from the
            data's t = 0 rows; the policy fitted by the likelihood of the tanh-squashed policy it acts with).
        alpha: weight α of the soft-χ² divergence (0.5).
        cost_ub_epsilon: ε, radius of the KL ball of the cost upper bound (0.01; must be > 0).
        data_noise: BC noise as a multiple of the data's per-dimension std, on observations and actions (0.1).
        reward_scale: rewards are multiplied by this in training (0.1); costs are not.
        actor_lr, critic_lr (ν and χ), scalar_lr (λ and τ): Adam learning rates (1e-4 each).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or COptiDICE)
        self.hidden = [256, 256]
        self.time_limit = "terminal"
        self.implementation = "osrl"
        self.alpha = 0.5
        self.cost_ub_epsilon = 0.01
        self.data_noise = 0.1
        self.reward_scale = 0.1
        self.actor_lr = 1e-4
        self.critic_lr = 1e-4
        self.scalar_lr = 1e-4

    @override(CostLimitedConfig)
    def training(self, *, implementation: str = NotProvided, alpha: float = NotProvided,
                 cost_ub_epsilon: float = NotProvided, data_noise: float = NotProvided,
                 reward_scale: float = NotProvided, actor_lr: float = NotProvided, critic_lr: float = NotProvided,
                 scalar_lr: float = NotProvided, **kwargs: Any) -> COptiDICEConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @property
    def constraint_threshold(self) -> float:
        """What the occupancy-average cost bound ĉ is held below: q̄_c ("osrl"), or (1 − γ) q̄_c ("paper")."""
        scale = 1.0 if self.implementation == "osrl" else 1.0 - self.gamma
        return scale * self.discounted_cost_limit

    @override(CostLimitedConfig)
    def member_hyperparameters(self) -> dict[str, Any]:
        """Members of one population trained for different κ differ in the λ loss's threshold."""
        return {"constraint_threshold": self.constraint_threshold}

    def loss_settings(self, hyperparameters: Mapping[str, torch.Tensor] | None = None) -> COptiDICELossSettings:
        """The losses' settings; ``hyperparameters`` (``member_hyperparameters``' names) replace the config's with a
        population member's own tensors."""
        own = {"constraint_threshold": self.constraint_threshold, **(hyperparameters or {})}
        return COptiDICELossSettings(gamma=self.gamma, reward_scale=self.reward_scale, alpha=self.alpha,
                                     cost_ub_epsilon=self.cost_ub_epsilon, cost_threshold=own["constraint_threshold"],
                                     time_limit=self.time_limit)

    @override(CostLimitedConfig)
    def validate(self) -> None:
        super().validate()
        if self.implementation not in IMPLEMENTATIONS:
            self.config_error(f"implementation must be one of {IMPLEMENTATIONS}, got {self.implementation!r}")
        for name in ("alpha", "cost_ub_epsilon", "actor_lr", "critic_lr", "scalar_lr"):
            if not getattr(self, name) > 0:
                self.config_error(f"{name} must be > 0, got {getattr(self, name)}")
        if self.data_noise < 0:
            self.config_error(f"data_noise must be >= 0, got {self.data_noise}")

    @override(CostLimitedConfig)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {"implementation": self.implementation,
                                                      "data_noise": self.data_noise}

    @override(CostLimitedConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.algorithms.coptidice.torch.default_coptidice_torch_rl_module import (
            DefaultCOptiDICETorchRLModule,
        )

        return RLModuleSpec(module_class=DefaultCOptiDICETorchRLModule)

    @override(CostLimitedConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.algorithms.coptidice.torch.coptidice_torch_learner import COptiDICETorchLearner

        return COptiDICETorchLearner


class COptiDICE(OfflineSafeAlgorithm):
    """COptiDICE: a DICE dual ν gives the stationary ratio w = d^π/d^D for the reward r − λc, a KL-ball upper bound
    (χ, τ) the cost under w, λ is tuned against the cost limit, and the policy is w-weighted BC."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> COptiDICEConfig:
        return COptiDICEConfig()
