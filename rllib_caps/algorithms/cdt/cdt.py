"""``CDTConfig`` and ``CDT``: the Constrained Decision Transformer (Liu et al., ICML 2023) as OSRL builds it. One
model serves every cost limit κ: κ is the initial cost-to-go given at deployment, with a return target taken
from OSRL's per-task table (``targets.py``).

    config = (
        CDTConfig()
        .environment("BallCircle")
        .offline_data(input_="datasets/BallCircle")
        .training(num_gradient_steps=100_000)
    )
    algo = config.build_algo()
    algo.train()
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cdt.losses import CDTLossSettings
from rllib_caps.algorithms.cdt.relabel import AugmentationSettings
from rllib_caps.algorithms.cdt.targets import task_settings
from rllib_caps.core.offline import OfflineSafeAlgorithm, OfflineSafeConfig
from rllib_caps.utils.smoke import smoke_test


class CDTConfig(OfflineSafeConfig):
    """Configuration of CDT; defaults are OSRL's (``examples/configs/cdt_configs.py``; docs/baselines.md "CDT").
    The shared settings (``num_gradient_steps`` 100k, evaluation) are documented on ``OfflineSafeConfig``;
    ``hidden``, ``tau`` and ``time_limit`` do not apply.

    CDT settings (``.training(...)``):
        embedding_dim: token embedding width (128).
        num_layers: transformer blocks (3).
        attention_heads: heads of each block's causal self-attention (8).
        seq_len: L, steps per context window (10); the timestep table has horizon + L rows.
        dropout: embedding, attention and residual dropout (0.1 each in OSRL).
        stochastic: Gaussian action head with unclamped log σ and a learned entropy bonus (True), else a
            deterministic head trained by MSE.
        lr: AdamW learning rate of the transformer (1e-4), reached after ``warmup_steps`` (500) linear steps.
        weight_decay: AdamW's decoupled weight decay (1e-4).
        grad_clip: global-norm clip of the transformer's gradients (0.25; RLlib's setting, ``grad_clip_by``
            "global_norm"); the temperature is not clipped.
        train_batch_size_per_learner: windows per step (2048).
        reward_scale: the return token is reward_scale · R̂ (0.1); costs are not scaled.
        cost_offset: the cost token is cost_offset − Ĉ (50, OSRL's cost_transform).
        cost_cap: episodes are sampled with probability ∝ max(0, cost_cap − C) (70), so costlier ones never are.
        cost_loss_weight: weight of the auxiliary cost-prediction NLL (0.02; the state prediction's is 0 in OSRL,
            so it is left out).
        init_temperature, temperature_lr: the entropy temperature's start (0.1) and Adam learning rate (1e-4); it
            drives the mean per-dimension entropy towards −|A|.
        augment_fraction: relabelled episodes per grid-filtered episode (0.2; 0 turns augmentation off).
        augment_deg, augment_max_reward, augment_max_rew_decrease: the Pareto polynomial's degree, the ceiling of
            the relabelled returns and the reward decrease allowed for a duplicate's substitute (None: the task's
            OSRL values, ``targets.TASK_SETTINGS``).
        return_targets: (κ, R) pairs in raw units the return target for any κ is interpolated from (None: the
            task's OSRL table).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or CDT)
        self.embedding_dim = 128
        self.num_layers = 3
        self.attention_heads = 8
        self.seq_len = 10
        self.dropout = 0.1
        self.stochastic = True
        self.lr = 1e-4
        self.weight_decay = 1e-4
        self.warmup_steps = 500
        self.grad_clip = 0.25
        self.grad_clip_by = "global_norm"
        self.train_batch_size_per_learner = 2048
        self.reward_scale = 0.1
        self.cost_offset = 50.0
        self.cost_cap = 70.0
        self.cost_loss_weight = 0.02
        self.init_temperature = 0.1
        self.temperature_lr = 1e-4
        self.augment_fraction = 0.2
        self.augment_deg: int | None = None
        self.augment_max_reward: float | None = None
        self.augment_max_rew_decrease: float | None = None
        self.return_targets: list[tuple[float, float]] | None = None

    @override(OfflineSafeConfig)
    def training(self, *, embedding_dim: int = NotProvided, num_layers: int = NotProvided,
                 attention_heads: int = NotProvided, seq_len: int = NotProvided, dropout: float = NotProvided,
                 stochastic: bool = NotProvided, weight_decay: float = NotProvided, warmup_steps: int = NotProvided,
                 reward_scale: float = NotProvided, cost_offset: float = NotProvided, cost_cap: float = NotProvided,
                 cost_loss_weight: float = NotProvided, init_temperature: float = NotProvided,
                 temperature_lr: float = NotProvided, augment_fraction: float = NotProvided,
                 augment_deg: int | None = NotProvided, augment_max_reward: float | None = NotProvided,
                 augment_max_rew_decrease: float | None = NotProvided,
                 return_targets: list[tuple[float, float]] | None = NotProvided, **kwargs: Any) -> CDTConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @property
    def resolved_return_targets(self) -> list[tuple[float, float]]:
        """The (κ, R) pairs in effect: ``return_targets`` or the task's OSRL table."""
        pairs = self.return_targets or task_settings(self.task.name if self.task else None).targets
        return [(float(k), float(r)) for k, r in pairs]

    def augmentation_settings(self) -> AugmentationSettings:
        task = task_settings(self.task.name if self.task else None)
        return AugmentationSettings(
            fraction=self.augment_fraction,
            deg=task.deg if self.augment_deg is None else self.augment_deg,
            max_reward=task.max_reward if self.augment_max_reward is None else self.augment_max_reward,
            max_rew_decrease=(task.max_rew_decrease if self.augment_max_rew_decrease is None
                              else self.augment_max_rew_decrease))

    def loss_settings(self) -> CDTLossSettings:
        act_dim = int(self.action_space.shape[0]) if self.action_space is not None else 1
        return CDTLossSettings(stochastic=self.stochastic, cost_weight=self.cost_loss_weight,
                               target_entropy=-float(act_dim))

    @override(OfflineSafeConfig)
    def apply_smoke_test_limits(self) -> CDTConfig:
        """``OfflineSafeConfig``'s limits, and a 1-block transformer of width 16 with 2 attention heads."""
        super().apply_smoke_test_limits()
        if smoke_test():
            self.embedding_dim, self.num_layers, self.attention_heads = 16, 1, 2
        return self

    @override(OfflineSafeConfig)
    def validate(self) -> None:
        super().validate()
        for name in ("embedding_dim", "num_layers", "attention_heads", "seq_len", "warmup_steps"):
            if not getattr(self, name) >= 1:
                self.config_error(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.embedding_dim % self.attention_heads:
            self.config_error(f"embedding_dim ({self.embedding_dim}) must be a multiple of attention_heads "
                              f"({self.attention_heads})")
        for name in ("lr", "temperature_lr", "init_temperature", "reward_scale"):
            if not getattr(self, name) > 0:
                self.config_error(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            self.config_error(f"dropout must be in [0, 1), got {self.dropout}")
        if self.augment_fraction < 0:
            self.config_error(f"augment_fraction must be >= 0, got {self.augment_fraction}")
        if not self.resolved_return_targets:
            self.config_error("return_targets must hold at least one (cost, return) pair")

    @override(OfflineSafeConfig)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {
            "embedding_dim": self.embedding_dim, "num_layers": self.num_layers,
            "attention_heads": self.attention_heads, "seq_len": self.seq_len, "dropout": self.dropout,
            "stochastic": self.stochastic, "reward_scale": self.reward_scale, "cost_offset": self.cost_offset,
            "init_temperature": self.init_temperature,
            "return_targets": [list(pair) for pair in self.resolved_return_targets]}

    @override(OfflineSafeConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.algorithms.cdt.torch.default_cdt_torch_rl_module import DefaultCDTTorchRLModule

        return RLModuleSpec(module_class=DefaultCDTTorchRLModule)

    @override(OfflineSafeConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.algorithms.cdt.torch.cdt_torch_learner import CDTTorchLearner

        return CDTTorchLearner

    @override(OfflineSafeConfig)
    def build_env_to_module_connector(self, env=None, spaces=None, device=None):
        from rllib_caps.algorithms.cdt.connector import CDTContext

        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        pipeline.prepend(CDTContext())
        return pipeline


class CDT(OfflineSafeAlgorithm):
    """CDT: a return- and cost-conditioned GPT over (R̂, Ĉ, s, a) windows of the data and its Pareto-relabelled
    episodes; at deployment Ĉ₀ = κ, so one model serves every κ."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> CDTConfig:
        return CDTConfig()
