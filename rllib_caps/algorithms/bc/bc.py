"""``BCConfig``/``BC`` (BC-All) and ``BCSafeConfig``/``BCSafe`` (BC-Safe): behaviour cloning as in OSRL, on
RLlib's new API stack and the offline base of ``rllib_caps.core``.

    config = (
        BCSafeConfig()
        .environment("BallCircle")
        .offline_data(input_="datasets/BallCircle")
        .training(cost_limit=20)
    )
    algo = config.build_algo()
    algo.train()
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.bc.losses import POLICIES
from rllib_caps.algorithms.cost_limited.cost_limited import CostLimitedConfig
from rllib_caps.core.offline import OfflineSafeAlgorithm, OfflineSafeConfig


class BCConfig(CostLimitedConfig):
    """Behaviour cloning; defaults are OSRL's (docs/baselines.md): hidden [256, 256], Adam lr 1e-3, batch 512,
    100k steps. The shared settings are documented on ``OfflineSafeConfig`` and ``CostLimitedConfig``.

    BC settings (``.training(...)``):
        safe_only: imitate only the episodes whose total cost is ≤ ``cost_limit`` (BC-Safe) instead of every
            transition (BC-All).
        policy: "deterministic" (OSRL: tanh MLP, MSE loss) or "gaussian" (tanh mean and a learned
            state-independent std, maximum likelihood); both act with their mean.
        actor_lr: Adam learning rate.

    BC-All ignores κ in training: with ``cost_limit`` it is evaluated at that κ, without it at all of the task's
    thresholds (one model serves every κ; docs/baselines.md).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or BC)
        self.safe_only = False
        self.policy = "deterministic"
        self.actor_lr = 1e-3
        self.hidden = [256, 256]

    @override(CostLimitedConfig)
    def training(self, *, safe_only: bool = NotProvided, policy: str = NotProvided, actor_lr: float = NotProvided,
                 **kwargs: Any) -> BCConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @override(CostLimitedConfig)
    def validate(self) -> None:
        if self.safe_only or self.cost_limit is not None:
            super().validate()  # κ required (BC-Safe filters at it) and > 0
        else:
            OfflineSafeConfig.validate(self)  # BC-All without κ: evaluated at every threshold of the task
        if self.policy not in POLICIES:
            self.config_error(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if not self.actor_lr > 0:
            self.config_error(f"actor_lr must be > 0, got {self.actor_lr}")

    @override(CostLimitedConfig)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {"policy": self.policy}

    @override(CostLimitedConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.algorithms.bc.torch.default_bc_torch_rl_module import DefaultBCTorchRLModule

        return RLModuleSpec(module_class=DefaultBCTorchRLModule)

    @override(CostLimitedConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.algorithms.bc.torch.bc_torch_learner import BCTorchLearner

        return BCTorchLearner


class BCSafeConfig(BCConfig):
    """``BCConfig`` with ``safe_only=True``: BC-Safe, one model per cost limit κ."""

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or BCSafe)
        self.safe_only = True


class BC(OfflineSafeAlgorithm):
    """BC-All: imitates every transition of the dataset."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> BCConfig:
        return BCConfig()


class BCSafe(BC):
    """BC-Safe: imitates the episodes whose total cost is ≤ κ."""

    @classmethod
    @override(BC)
    def get_default_config(cls) -> BCSafeConfig:
        return BCSafeConfig()
