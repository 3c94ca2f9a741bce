"""``CAPSConfig`` and ``CAPS``: Constraint-Adaptive Policy Switching (Chemingui et al., AAAI 2025) on
RLlib's new API stack, built on the offline base of ``rllib_caps.core.offline``.

    config = (
        CAPSConfig()
        .environment("BallCircle")
        .offline_data(input_="datasets/BallCircle")
        .training(num_heads=4)
    )
    algo = config.build_algo()
    algo.train()
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.caps.losses import CAPSLossSettings, default_lambdas
from rllib_caps.core.offline import OfflineSafeAlgorithm, OfflineSafeConfig

IMPLEMENTATIONS = ("paper", "code")
BACKBONES = ("iql",)  # the offline RL algorithm under the heads; SAC+BC joins here as a sibling


class CAPSConfig(OfflineSafeConfig):
    """Configuration of CAPS. Defaults are the paper's hyperparameters (docs/paper.md, "Training"); the
    shared ones (steps, hidden sizes, τ, time limit, evaluation) are documented on ``OfflineSafeConfig``.

    CAPS settings (``.training(...)``):
        backbone: the offline RL algorithm that trains the heads and critics ("iql").
        num_heads: K ≥ 2 policy heads: head 0 maximises reward, head K−1 minimises cost.
        lambdas: the K−2 middle heads' trade-offs λ_k; default λ_k = k / ((K − 1) / 2).
        shared_actor: one shared actor body (paper) or K independent actors (ablation).
        implementation: "paper" (Eq. 8 weights, learned std, critics on +c) or "code" (the authors'
            code: summed clipped weights, std fixed at 1, critics on −c); docs/paper.md, choices 1-3.
        awr_beta: the advantage temperature β (RLlib's MARWIL/IQL ``beta`` is capped at 1; CAPS uses 3).
        expectile_reward, expectile_cost: IQL expectiles τ_r, τ_c.
        reward_scale: rewards are multiplied by this in training (costs are not).
        max_weight: clip of the advantage weights.
        actor_lr, critic_lr, value_lr: Adam learning rates.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or CAPS)
        self.backbone = "iql"
        self.num_heads = 2
        self.lambdas: list[float] | None = None
        self.shared_actor = True
        self.implementation = "paper"
        self.awr_beta = 3.0
        self.expectile_reward = 0.7
        self.expectile_cost = 0.7
        self.reward_scale = 0.1
        self.max_weight = 100.0
        self.actor_lr = 3e-4
        self.critic_lr = 3e-4
        self.value_lr = 3e-4

    @override(OfflineSafeConfig)
    def training(
        self,
        *,
        backbone: str = NotProvided,
        num_heads: int = NotProvided,
        lambdas: list[float] | None = NotProvided,
        shared_actor: bool = NotProvided,
        implementation: str = NotProvided,
        awr_beta: float = NotProvided,
        expectile_reward: float = NotProvided,
        expectile_cost: float = NotProvided,
        reward_scale: float = NotProvided,
        max_weight: float = NotProvided,
        actor_lr: float = NotProvided,
        critic_lr: float = NotProvided,
        value_lr: float = NotProvided,
        **kwargs: Any,
    ) -> CAPSConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @property
    def num_policy_heads(self) -> int:
        return self.num_heads

    @property
    def resolved_lambdas(self) -> list[float]:
        return list(self.lambdas) if self.lambdas is not None else default_lambdas(self.num_heads)

    def loss_settings(self) -> CAPSLossSettings:
        """The hyperparameters the pure loss functions take."""
        return CAPSLossSettings(
            gamma=self.gamma, reward_scale=self.reward_scale, expectile_reward=self.expectile_reward,
            expectile_cost=self.expectile_cost, beta=self.awr_beta, max_weight=self.max_weight,
            lambdas=tuple(self.resolved_lambdas), implementation=self.implementation, time_limit=self.time_limit,
        )

    @override(OfflineSafeConfig)
    def validate(self) -> None:
        super().validate()
        if self.backbone not in BACKBONES:
            self._value_error(f"backbone must be one of {BACKBONES}, got {self.backbone!r}")
        if self.num_heads < 2:
            self._value_error(f"num_heads must be >= 2, got {self.num_heads}")
        if len(self.resolved_lambdas) != self.num_heads - 2:
            self._value_error(f"lambdas needs num_heads - 2 = {self.num_heads - 2} values, got {self.lambdas}")
        if self.implementation not in IMPLEMENTATIONS:
            self._value_error(f"implementation must be one of {IMPLEMENTATIONS}, got {self.implementation!r}")
        if self.awr_beta <= 0:
            self._value_error(f"awr_beta must be > 0, got {self.awr_beta}")
        for name in ("expectile_reward", "expectile_cost"):
            if not 0.0 < getattr(self, name) < 1.0:
                self._value_error(f"{name} must be in (0, 1), got {getattr(self, name)}")

    @property
    @override(OfflineSafeConfig)
    def _model_config_auto_includes(self) -> dict[str, Any]:
        return super()._model_config_auto_includes | {
            "num_heads": self.num_heads, "shared_actor": self.shared_actor,
            "learn_std": self.implementation == "paper", "cost_maximize": self.implementation == "code",
        }

    @override(OfflineSafeConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.algorithms.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule

        return RLModuleSpec(module_class=DefaultCAPSTorchRLModule)

    @override(OfflineSafeConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.algorithms.caps.torch.caps_torch_learner import CAPSTorchLearner

        return CAPSTorchLearner


class CAPS(OfflineSafeAlgorithm):
    """CAPS: K policy heads trained by IQL-style advantage weighting, switched at act time by Q^r/Q^c."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> CAPSConfig:
        return CAPSConfig()
