"""``BEARLConfig`` and ``BEARL``: BEAR-Lag, BEAR (Kumar et al., NeurIPS 2019) with a cost critic and a
PID-Lagrangian multiplier (Stooke et al., ICML 2020) as OSRL builds it, trained for one cost limit κ.

    config = (
        BEARLConfig()
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

from rllib_caps.algorithms.bearl.losses import KERNELS, BEARLLossSettings
from rllib_caps.algorithms.cost_limited.lagrangian import PIDGains
from rllib_caps.algorithms.vae_actor_critic.vae_actor_critic import VAEActorCriticConfig
from rllib_caps.core.offline import OfflineSafeAlgorithm

if TYPE_CHECKING:
    import torch


class BEARLConfig(VAEActorCriticConfig):
    """Configuration of BEAR-Lag; defaults are OSRL's (docs/baselines.md). The family's settings are documented on
    ``VAEActorCriticConfig``, κ on ``CostLimitedConfig``.

    BEAR-Lag settings (``.training(...)``):
        mmd_kernel: "gaussian" (OSRL) or "laplacian"; mmd_sigma: its width σ (50); mmd_epsilon: ε (0.05).
        target_mix: λ of the soft-clipped double-Q backup λ min + (1 − λ) max (0.75).
        pid_gains: (K_P, K_I, K_D) of the cost multiplier's PID controller ((0.1, 0.003, 0.001)).
        implementation: "osrl" (cost backup without done mask and mixed like the reward's, actor penalty on the
            min of the cost critics) or "paper" (both pessimistic for cost: masked backup weighted to the max,
            penalty on the max).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or BEARL)
        self.num_gradient_steps = 300_000
        self.mmd_kernel = "gaussian"
        self.mmd_sigma = 50.0
        self.mmd_epsilon = 0.05
        self.target_mix = 0.75
        self.pid_gains = (0.1, 0.003, 0.001)

    @override(VAEActorCriticConfig)
    def training(self, *, mmd_kernel: str = NotProvided, mmd_sigma: float = NotProvided,
                 mmd_epsilon: float = NotProvided, target_mix: float = NotProvided,
                 pid_gains: tuple[float, float, float] = NotProvided, **kwargs: Any) -> BEARLConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    def loss_settings(self, hyperparameters: Mapping[str, torch.Tensor] | None = None) -> BEARLLossSettings:
        """The losses' settings, with a population member's own q̄_c among ``hyperparameters`` (``cost_threshold``)."""
        return BEARLLossSettings(
            gamma=self.gamma, reward_scale=self.reward_scale, kl_weight=self.kl_weight, target_mix=self.target_mix,
            mmd_sigma=self.mmd_sigma, mmd_kernel=self.mmd_kernel, mmd_epsilon=self.mmd_epsilon,
            pid=PIDGains(*self.pid_gains), alpha_lr=self.alpha_lr, cost_threshold=self.cost_threshold(hyperparameters),
            implementation=self.implementation, time_limit=self.time_limit,
        )

    @override(VAEActorCriticConfig)
    def validate(self) -> None:
        super().validate()
        if self.mmd_kernel not in KERNELS:
            self.config_error(f"mmd_kernel must be one of {KERNELS}, got {self.mmd_kernel!r}")
        if self.mmd_sigma <= 0:
            self.config_error(f"mmd_sigma must be > 0, got {self.mmd_sigma}")
        if not 0.0 <= self.target_mix <= 1.0:
            self.config_error(f"target_mix must be in [0, 1], got {self.target_mix}")
        if len(self.pid_gains) != 3 or min(self.pid_gains) < 0:
            self.config_error(f"pid_gains must be three gains (K_P, K_I, K_D) >= 0, got {self.pid_gains}")

    @override(VAEActorCriticConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.algorithms.bearl.torch.default_bearl_torch_rl_module import DefaultBEARLTorchRLModule

        return RLModuleSpec(module_class=DefaultBEARLTorchRLModule)

    @override(VAEActorCriticConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.algorithms.bearl.torch.bearl_torch_learner import BEARLTorchLearner

        return BEARLTorchLearner


class BEARL(OfflineSafeAlgorithm):
    """BEAR-Lag: MMD-constrained actor on soft-clipped double-Q critics, cost penalised by a PID multiplier."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> BEARLConfig:
        return BEARLConfig()
