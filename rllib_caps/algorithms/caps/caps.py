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

import logging
import math
from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.caps.backbone import Backbone
from rllib_caps.algorithms.caps.backbones import BACKBONES
from rllib_caps.algorithms.caps.calibration import CALIBRATIONS
from rllib_caps.algorithms.caps.shared_losses import default_lambdas
from rllib_caps.algorithms.caps.switching import DEFAULT_HEAD_SELECTION, HEAD_SELECTIONS
from rllib_caps.core.offline import OfflineSafeAlgorithm, OfflineSafeConfig

logger = logging.getLogger(__name__)

IMPLEMENTATIONS = ("paper", "code")


class CAPSConfig(OfflineSafeConfig):
    """Configuration of CAPS. Defaults are the paper's hyperparameters (docs/paper.md, "Training"); the
    shared ones (steps, hidden sizes, τ, time limit, evaluation) are documented on ``OfflineSafeConfig``.

    CAPS settings (``.training(...)``):
        backbone: the offline RL algorithm that trains the heads and critics: "iql" (paper Eq. 8-9) or "sacbc"
            (SAC+BC: squashed-Gaussian heads, a learned temperature α, a BC term; no value nets).
        num_heads: K ≥ 2 policy heads: head 0 maximises reward, head K−1 minimises cost.
        lambdas: the K−2 middle heads' trade-offs λ_k; default λ_k = k / ((K − 1) / 2).
        shared_actor: one shared actor body (paper) or K independent actors (ablation).
        implementation: "paper" or "code" (the authors' code), docs/paper.md "Choices". "code" trains the cost
            critics on −c and treats time-outs as terminal (``time_limit`` "terminal"); with IQL it also sums
            separately clipped weights with their own β (``beta_cost``), fixes the std at 1, averages the actor
            loss over the heads and anneals the actor lr by a cosine over ``ACTOR_LR_COSINE_STEPS`` steps.
        time_limit: as on ``OfflineSafeConfig``; None (default): "bootstrap" with "paper", "terminal" with
            "code" (any other value with "code" is refused).
        actor_time: with ``time_limit="time_aware"`` only: the actor heads also see the remaining-time fraction
            (T − t)/T (default False: only the critics do; docs/paper.md, choice 7).
        cost_gamma: the discount of the cost critics (Q^c, V^c); None (default): ``gamma``. 1.0 makes Q^c the
            undiscounted cost-to-go, which the switching rule compares with κ − c_<t itself (no conversion); it
            needs time-outs to end the bootstrap (``time_limit`` "terminal" or "time_aware"), or Q^c diverges.
        clamp_cost_q: clamp the act-time Q^c at ≥ 0 before comparing it with the budget; None (default): the
            backbone's (on for "sacbc", as the authors' SAC+BC code; off for "iql").
        head_selection: which feasible head acts: "head_order" (default), the most reward-seeking one (the lowest
            index); "q_reward", the one with the highest Q^r (paper Eq. 4); "q_trust", head order's unless another
            head's Q^r exceeds it by more than the twin critics' disagreement (``switching.trusted_heads``).
            Switching only: training is the same,
            and a checkpoint's may be changed at deployment (docs/paper.md, "Choosing among feasible heads").
        cost_calibration: how the Q^c the switching rule reads is shifted, from its bias against the dataset's
            realised discounted cost-to-go, before each evaluation (``calibration.calibration_shift``):
            "pessimism" (default) removes measured pessimism only, "mean" the bias either way, "none" nothing;
            "per_step" and "per_step_pessimism" do the same per time bin of the episode, with a table fitted on
            held-out episodes (``calibration.calibrate_cost_critic_per_step``; the critic trains on every episode).
        calibration_holdout: train on the episodes outside the per-step calibration's held-out split
            (``calibration.held_out_episodes``), so a per-step fit reads episodes the critics never trained on
            (default False: training reads every episode). Every calibration still reads the whole dataset.
            The shift is part of the module state (checkpoints, exports). docs/paper.md, "Calibrated Q^c".
        cost_head_episode_limit: the cost head K−1, the fallback, learns from the episodes whose total cost is at
            most this only (BC-Safe's filter: ``training_data.training_dataset``); the critics and the other heads
            still read every episode. ``math.inf`` (default): every episode. docs/paper.md, "A cost head of the
            safe episodes".
        awr_beta: the advantage temperature β (RLlib's MARWIL/IQL ``beta`` is capped at 1; CAPS uses 3).
        beta_cost: "code" with IQL only: the cost advantage's β; None (default): ``awr_beta`` (the authors'
            code has a separate β with the same default 3).
        expectile_reward, expectile_cost: IQL expectiles τ_r, τ_c.
        reward_scale: rewards are multiplied by this in training (costs are not).
        max_weight: clip of the advantage weights (IQL).
        actor_lr, critic_lr: Adam learning rates; None (default): the backbone's (IQL 3e-4 and 3e-4, SAC+BC 1e-4
            and 1e-3; each ``Backbone.defaults``). The SAC+BC temperature uses the actor's.
        value_lr: Adam learning rate of the IQL value nets.
        initial_alpha: SAC+BC's initial temperature α (0.1); its target entropy is −|A|.
        q_weight: SAC+BC's TD3+BC normaliser: the Q term is scaled by q_weight / mean|Q| (2.5).
        fused_critics: evaluate each critic pair (twin Qs, V^r/V^c) as one ensemble, one batched matmul per
            layer (``rllib_caps.core.nets``): the same functions with fewer kernel launches, for GPUs.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or CAPS)
        self.backbone = "iql"
        self.num_heads = 2
        self.lambdas: list[float] | None = None
        self.shared_actor = True
        self.implementation = "paper"
        self.time_limit: str | None = None  # the implementation's: see resolved_time_limit
        self.actor_time = False
        self.cost_gamma: float | None = None
        self.clamp_cost_q: bool | None = None
        self.head_selection = DEFAULT_HEAD_SELECTION  # the rule's verdict (docs/paper.md, "Calibrated Q^c")
        self.cost_calibration = "pessimism"  # idem
        self.calibration_holdout = False
        self.cost_head_episode_limit = math.inf
        self.awr_beta = 3.0
        self.beta_cost: float | None = None
        self.expectile_reward = 0.7
        self.expectile_cost = 0.7
        self.reward_scale = 0.1
        self.max_weight = 100.0
        self.actor_lr: float | None = None
        self.critic_lr: float | None = None
        self.value_lr = 3e-4
        self.initial_alpha = 0.1
        self.q_weight = 2.5
        self.fused_critics = False

    @override(OfflineSafeConfig)
    def training(
        self,
        *,
        backbone: str = NotProvided,
        num_heads: int = NotProvided,
        lambdas: list[float] | None = NotProvided,
        shared_actor: bool = NotProvided,
        implementation: str = NotProvided,
        actor_time: bool = NotProvided,
        cost_gamma: float | None = NotProvided,
        clamp_cost_q: bool | None = NotProvided,
        head_selection: str = NotProvided,
        cost_calibration: str = NotProvided,
        calibration_holdout: bool = NotProvided,
        cost_head_episode_limit: float = NotProvided,
        awr_beta: float = NotProvided,
        beta_cost: float | None = NotProvided,
        expectile_reward: float = NotProvided,
        expectile_cost: float = NotProvided,
        reward_scale: float = NotProvided,
        max_weight: float = NotProvided,
        actor_lr: float | None = NotProvided,
        critic_lr: float | None = NotProvided,
        value_lr: float = NotProvided,
        initial_alpha: float = NotProvided,
        q_weight: float = NotProvided,
        fused_critics: bool = NotProvided,
        **kwargs: Any,
    ) -> CAPSConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @property
    def resolved_lambdas(self) -> list[float]:
        return list(self.lambdas) if self.lambdas is not None else default_lambdas(self.num_heads)

    @property
    @override(OfflineSafeConfig)
    def resolved_time_limit(self) -> str:
        """``time_limit``, or when None the implementation's: "terminal" for "code" (the authors' done = terminal
        or time-out), "bootstrap" for "paper" (docs/paper.md, choice 7)."""
        if self.time_limit is not None:
            return self.time_limit
        return "terminal" if self.implementation == "code" else "bootstrap"

    @property
    def resolved_cost_gamma(self) -> float:
        """The cost critics' discount: ``cost_gamma``, or ``gamma`` when None."""
        return float(self.gamma if self.cost_gamma is None else self.cost_gamma)

    @property
    def backbone_spec(self) -> Backbone:
        """The backbone the config names (``backbones.BACKBONES``)."""
        return BACKBONES[self.backbone]

    def _backbone_default(self, name: str) -> Any:
        value = getattr(self, name)
        return self.backbone_spec.defaults[name] if value is None else value

    @property
    def resolved_actor_lr(self) -> float:
        return float(self._backbone_default("actor_lr"))

    @property
    def resolved_critic_lr(self) -> float:
        return float(self._backbone_default("critic_lr"))

    @property
    def resolved_clamp_cost_q(self) -> bool:
        return bool(self._backbone_default("clamp_cost_q"))

    @property
    def cost_maximize(self) -> bool:
        """The cost critics hold −c, maximised (the authors' code, "code"), instead of +c (the paper)."""
        return self.implementation == "code"

    @property
    def anneal_actor_lr(self) -> bool:
        """The authors' IQL code anneals the actor lr with a cosine (``CAPSTorchLearner``)."""
        return self.implementation == "code" and self.backbone_spec.code_anneals_actor_lr

    @override(OfflineSafeConfig)
    def member_hyperparameters(self) -> dict[str, Any]:
        """The settings in which the members of one population may differ (an Optuna search's samples), by config
        name: β and the middle heads' λ_k (``rllib_caps.core.population``)."""
        return {"awr_beta": self.awr_beta, "lambdas": self.resolved_lambdas}

    def loss_settings(self) -> Any:
        """The settings the backbone's pure loss function takes (``Backbone.loss_settings``)."""
        return self.backbone_spec.loss_settings(self)

    @override(OfflineSafeConfig)
    def validate(self) -> None:
        if self.backbone not in BACKBONES:  # first: the backbone's defaults resolve other settings
            self.config_error(f"backbone must be one of {tuple(BACKBONES)}, got {self.backbone!r}")
        super().validate()
        if self.num_heads < 2:
            self.config_error(f"num_heads must be >= 2, got {self.num_heads}")
        if len(self.resolved_lambdas) != self.num_heads - 2:
            self.config_error(f"lambdas needs num_heads - 2 = {self.num_heads - 2} values, got {self.lambdas}")
        if self.implementation not in IMPLEMENTATIONS:
            self.config_error(f"implementation must be one of {IMPLEMENTATIONS}, got {self.implementation!r}")
        if self.implementation == "code" and self.time_limit not in (None, "terminal"):
            self.config_error(f"time_limit {self.time_limit!r} conflicts with implementation 'code', which treats "
                              "time-outs as terminal like the authors' code: leave time_limit unset (or 'terminal'), "
                              "or use implementation 'paper'")
        if self.actor_time and self.resolved_time_limit != "time_aware":
            self.config_error(f"actor_time needs time_limit 'time_aware' (got {self.resolved_time_limit!r}): the "
                              "heads see the remaining time only where the critics do")
        if not 0.0 < self.resolved_cost_gamma <= 1.0:
            self.config_error(f"cost_gamma must be in (0, 1], got {self.cost_gamma}")
        if self.resolved_cost_gamma == 1.0 and self.resolved_time_limit == "bootstrap":
            self.config_error("cost_gamma 1.0 needs time_limit 'terminal' or 'time_aware' (got 'bootstrap'): "
                              "an undiscounted Q^c that bootstraps through time-outs has no finite fixed point")
        if self.beta_cost is not None and not (self.implementation == "code" and self.backbone_spec.advantage_weighted):
            self.config_error(f"beta_cost is only used by implementation 'code' with backbone 'iql' (got "
                              f"{self.implementation!r}, {self.backbone!r}): the paper's Eq. 8 has one β")
        for name in ("awr_beta", "beta_cost", "initial_alpha", "q_weight", "actor_lr", "critic_lr", "value_lr"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                self.config_error(f"{name} must be > 0, got {getattr(self, name)}")
        if self.head_selection not in HEAD_SELECTIONS:
            self.config_error(f"head_selection must be one of {HEAD_SELECTIONS}, got {self.head_selection!r}")
        if self.cost_calibration not in CALIBRATIONS:
            self.config_error(f"cost_calibration must be one of {CALIBRATIONS}, got {self.cost_calibration!r}")
        if not self.cost_head_episode_limit >= 0:
            self.config_error(f"cost_head_episode_limit must be a total episode cost >= 0 (inf: every episode), "
                              f"got {self.cost_head_episode_limit}")
        for name in ("expectile_reward", "expectile_cost"):
            if not 0.0 < getattr(self, name) < 1.0:
                self.config_error(f"{name} must be in (0, 1), got {getattr(self, name)}")

    @override(OfflineSafeConfig)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {
            "num_heads": self.num_heads, "shared_actor": self.shared_actor,
            "learn_std": self.implementation == "paper", "cost_maximize": self.cost_maximize,
            "backbone": self.backbone, "actor_time": bool(self.actor_time), "cost_gamma": self.resolved_cost_gamma,
            "clamp_cost_q": self.resolved_clamp_cost_q, "head_selection": self.head_selection,
            "initial_alpha": self.initial_alpha,
            "fused_critics": bool(self.fused_critics),
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
    """CAPS: K policy heads trained by IQL or SAC+BC (``backbone``), switched at act time by Q^r/Q^c."""

    @classmethod
    @override(OfflineSafeAlgorithm)
    def get_default_config(cls) -> CAPSConfig:
        return CAPSConfig()

    @override(OfflineSafeAlgorithm)
    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """RLlib's evaluation, with the Q^c shift of ``cost_calibration`` set first on every learner (whose weights
        the evaluation runners then receive): ``calibrate_cost_critic``."""
        self.calibrate_cost_critic()
        return super().evaluate(*args, **kwargs)

    def calibrate_cost_critic(self) -> float:
        """Sets the learners' Q^c shift by ``config.cost_calibration`` from the critic's bias on the dataset
        (``calibration.calibrate_cost_critic``; every learner holds the whole dataset and the same weights, so
        each computes the same shift). Returns it."""
        mode = self.config.cost_calibration
        results = self.learner_group.foreach_learner(lambda learner: learner.calibrate_cost_critic(mode))
        shift = [result.get() for result in results][0]
        logger.info("cost calibration %r: the switching rule reads Q^c - %.4g", mode, shift)
        return shift
