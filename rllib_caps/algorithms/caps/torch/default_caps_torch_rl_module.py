"""Torch CAPS RLModule: shared-body multi-head actor, twin reward and cost critics, value functions."""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import StateDict
from torch import nn

from rllib_caps.algorithms.caps.backbones import BACKBONES
from rllib_caps.algorithms.caps.calibration import STEP_BINS, CostCriticAPI, finite_shift, step_bins
from rllib_caps.algorithms.caps.default_caps_rl_module import DefaultCAPSRLModule
from rllib_caps.algorithms.caps.keys import (
    HEAD,
    PREDICTED_COST,
    QC_PREDS,
    QC_TARGET_PREDS,
    QC_TARGET_TWIN_PREDS,
    QC_TWIN_PREDS,
    QR_PREDS,
    QR_TARGET_PREDS,
    QR_TARGET_TWIN_PREDS,
    QR_TWIN_PREDS,
)
from rllib_caps.algorithms.caps.sacbc.losses import SAC_LOG_STD_MAX, SAC_LOG_STD_MIN
from rllib_caps.algorithms.caps.switching import DEFAULT_HEAD_SELECTION, select_heads
from rllib_caps.core.budget import remaining_budget_threshold
from rllib_caps.core.cost_threshold_api import CostThresholdAPI
from rllib_caps.core.keys import COST_SPENT, STEP
from rllib_caps.core.nets import OutputLinear, TwinQ, mlp
from rllib_caps.core.time_limit import remaining_time
from rllib_caps.core.torch_rl_module import OfflineTorchRLModule
from rllib_caps.data.schema import T

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class CriticOverride(Protocol):
    """Critics the switching rule reads in place of the module's own (e.g. ``fqe.FQECritics``)."""

    def replace(self, critic_obs: torch.Tensor, head_actions: torch.Tensor, q_reward: torch.Tensor,
                q_cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class MultiHeadActor(nn.Module):
    """K Gaussian heads; ``shared=True`` puts them on one body (paper), else K separate actors (ablation).

    Means are tanh-squashed into the normalised action box [-1, 1]. The log-std is
    - ``std="learned"``: one state-independent parameter per head (CAPS(IQL), paper);
    - ``std="fixed"``: held at 0 (CAPS(IQL), authors' code: std stays 1);
    - ``std="state"``: an output of each head, clamped to [−20, 2] (CAPS(SAC+BC): squashed-Gaussian heads).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], num_heads: int, shared: bool,
                 std: str) -> None:
        super().__init__()
        self.num_heads, self.act_dim, self.shared, self.std = num_heads, act_dim, shared, std
        bodies = 1 if shared else num_heads
        self.bodies = nn.ModuleList(mlp(obs_dim, hidden, None) for _ in range(bodies))
        outputs = 2 * act_dim if std == "state" else act_dim
        self.heads = nn.ModuleList(OutputLinear(hidden[-1], outputs) for _ in range(num_heads))
        log_std = torch.zeros(num_heads, act_dim)
        if std == "learned":
            self.log_std = nn.Parameter(log_std)
        elif std == "fixed":
            self.register_buffer("log_std", log_std)
        elif std != "state":
            raise ValueError(f"std must be 'learned', 'fixed' or 'state', got {std!r}")

    def head_outputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Every head's raw output, shape ``(B, K, A)`` (``(B, K, 2A)``: means, then log-stds, with ``"state"``)."""
        features = [body(obs) for body in self.bodies]
        return torch.stack([head(features[0 if self.shared else k]) for k, head in enumerate(self.heads)], dim=1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-head deterministic actions tanh(μ_k(s)), shape ``(B, K, A)``."""
        return torch.tanh(self.head_outputs(obs)[..., :self.act_dim])

    def squashed_gaussian(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash means and clamped log-stds of the state-dependent heads, each ``(B, K, A)``."""
        mean, log_std = self.head_outputs(obs).split(self.act_dim, dim=-1)
        return mean, log_std.clamp(SAC_LOG_STD_MIN, SAC_LOG_STD_MAX)

    def clamped_log_std(self) -> torch.Tensor:
        return self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


class DefaultCAPSTorchRLModule(OfflineTorchRLModule, DefaultCAPSRLModule, CostCriticAPI):
    framework: str = "torch"
    extension_path = "rllib_caps.algorithms.caps.extension:CAPSExtension"  # head usage, Q^c at the first step

    @override(TorchRLModule)
    def setup(self) -> None:
        cfg = self.model_config
        obs_dim = int(math.prod(self.observation_space.shape))
        act_dim = int(math.prod(self.action_space.shape))
        hidden = list(cfg["hidden"])
        self.num_heads = int(cfg["num_heads"])
        self.gamma = float(cfg["gamma"])
        self._cost_gamma = float(cfg.get("cost_gamma", self.gamma))  # checkpoints before cost_gamma: γ
        self.horizon = int(cfg["horizon"])
        # +1: cost critics hold +c (paper); -1: they hold -c (authors' code). Q^c in cost units is sign * q.
        self.cost_sign = -1.0 if cfg["cost_maximize"] else 1.0
        self.cost_threshold = math.inf
        # Time-aware critics see (T − t)/T as one more input (rllib_caps.core.time_limit); the actor heads only
        # with ``actor_time``.
        self.time_aware = cfg.get("time_limit", "bootstrap") == "time_aware"
        self.actor_time = bool(cfg.get("actor_time", False))
        critic_obs_dim = obs_dim + int(self.time_aware)
        # Checkpoints record the backbone; those from before SAC+BC are IQL.
        self.backbone = cfg.get("backbone", "iql")
        self.backbone_spec = BACKBONES[self.backbone]
        self.clamp_cost_q = bool(cfg.get("clamp_cost_q", False))
        self.head_selection = cfg.get("head_selection", DEFAULT_HEAD_SELECTION)
        # Subtracted from Q^c where the rule reads it (``set_cost_shift``: the calibration of
        # ``calibration``, set before each evaluation by ``CAPS.evaluate`` or at deployment); saved with the
        # module state, so evaluation runners, checkpoints and exports act with it.
        self.register_buffer("cost_offset", torch.zeros(()))
        # and, per time bin of the step (``set_cost_step_shifts``, a per-step ``cost_calibration``), this table's
        # entry; zeros otherwise, and then Q^c − cost_offset − 0 is Q^c − cost_offset to the bit.
        self.register_buffer("cost_offset_per_step", torch.zeros(STEP_BINS))

        std = "state" if self.backbone_spec.state_dependent_std else "learned" if cfg["learn_std"] else "fixed"
        self.actor = MultiHeadActor(obs_dim + int(self.actor_time), act_dim, hidden, self.num_heads,
                                    bool(cfg["shared_actor"]), std)
        fused = bool(cfg.get("fused_critics", False))
        self.qr = TwinQ(critic_obs_dim, act_dim, hidden, fused)
        self.qc = TwinQ(critic_obs_dim, act_dim, hidden, fused)
        if self.inference_only:
            return
        self.backbone_spec.add_training_nets(self, cfg, critic_obs_dim, hidden, fused)  # IQL's V, SAC+BC's α

    def critic_input(self, obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        """The critics' state input: ``obs``, with the remaining-time fraction appended when time-aware."""
        return self._with_time(obs, step) if self.time_aware else obs

    def actor_input(self, obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        """The actor heads' state input: ``obs``, with the remaining-time fraction appended under ``actor_time``."""
        return self._with_time(obs, step) if self.actor_time else obs

    def _with_time(self, obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        return torch.cat([obs, remaining_time(step, self.horizon).to(obs.dtype)], dim=-1)

    def head_means(self, obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        """Every head's (deterministic) action at step ``step``, ``(B, K, A)``."""
        return self.actor(self.actor_input(obs, step))

    @override(TargetNetworkAPI)
    def make_target_networks(self) -> None:
        self.qr_target = make_target_network(self.qr)
        self.qc_target = make_target_network(self.qc)

    @override(TargetNetworkAPI)
    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.qr, self.qr_target), (self.qc, self.qc_target)]

    @override(TargetNetworkAPI)
    def forward_target(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs, actions = self.critic_input(batch[Columns.OBS], batch.get(T)), batch[Columns.ACTIONS]
        qr1, qr2 = self.qr_target(obs, actions)
        qc1, qc2 = self.qc_target(obs, actions)
        return {QR_TARGET_PREDS: qr1, QR_TARGET_TWIN_PREDS: qr2, QC_TARGET_PREDS: qc1, QC_TARGET_TWIN_PREDS: qc2}

    @property
    @override(CostCriticAPI)
    def cost_gamma(self) -> float:
        return self._cost_gamma

    @torch.no_grad()
    @override(CostCriticAPI)
    def predicted_cost(self, obs: np.ndarray, actions: np.ndarray, steps: np.ndarray) -> np.ndarray:
        device = self.cost_offset.device
        step = torch.as_tensor(np.asarray(steps), dtype=torch.float64, device=device)
        critic_obs = self.critic_input(torch.as_tensor(np.asarray(obs, np.float32), device=device), step)
        return self.cost_q(critic_obs, torch.as_tensor(np.asarray(actions, np.float32), device=device),
                           step).cpu().numpy()

    @property
    @override(CostCriticAPI)
    def cost_shift(self) -> float:
        return float(self.cost_offset)

    @override(CostCriticAPI)
    def set_cost_shift(self, shift: float) -> None:
        self.cost_offset.fill_(finite_shift(shift))
        self.cost_offset_per_step.zero_()

    @property
    @override(CostCriticAPI)
    def cost_step_shifts(self) -> np.ndarray:
        return self.cost_offset_per_step.cpu().numpy().astype(np.float64)

    @override(CostCriticAPI)
    def set_cost_step_shifts(self, shifts: np.ndarray) -> None:
        table = torch.as_tensor(np.asarray([finite_shift(s) for s in np.asarray(shifts, np.float64)]),
                                dtype=self.cost_offset_per_step.dtype, device=self.cost_offset_per_step.device)
        if table.shape != self.cost_offset_per_step.shape:
            raise ValueError(f"a per-step Q^c shift table has {STEP_BINS} entries, got {tuple(table.shape)}")
        self.cost_offset.zero_()
        self.cost_offset_per_step.copy_(table)

    @override(TorchRLModule)
    def set_state(self, state: StateDict) -> None:
        """RLlib's, for checkpoints from before the saved Q^c shift or its per-step table too (they act with none)."""
        super().set_state({"cost_offset": torch.zeros(()), "cost_offset_per_step": torch.zeros(STEP_BINS)} | state)

    @override(CostThresholdAPI)
    def set_cost_threshold(self, threshold: float) -> None:
        self.cost_threshold = float(threshold)

    def head_values(self, obs: torch.Tensor, step: torch.Tensor, critics: CriticOverride | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every head's action with its Q^r (min twin) and pessimistic Q^c in cost units at step ``step``
        (``head_values_and_spread`` without the spread)."""
        means, q_reward, q_cost, _ = self.head_values_and_spread(obs, step, critics)
        return means, q_reward, q_cost

    def head_values_and_spread(self, obs: torch.Tensor, step: torch.Tensor, critics: CriticOverride | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Every head's action with its Q^r (min twin), pessimistic Q^c in cost units, and the twin reward critics'
        disagreement |Q^r_1 − Q^r_2| (what "q_trust" reads, ``switching.trusted_heads``) at step ``step``.

        Returns ``(means (B, K, A), q_reward (B, K), q_cost (B, K), q_reward_spread (B, K))``; the online critics
        are used (docs/paper.md, choice 6). ``critics`` (e.g. the FQE critics of ``rllib_caps.algorithms.caps.fqe``)
        replaces some or all of these values: ``critics.replace(critic_obs, means, q_reward, q_cost)``; the spread is
        then None, as the override's Q^r has no twins here. With
        ``clamp_cost_q`` (the authors' SAC+BC code) Q^c is then clamped at ≥ 0, so no head is feasible once the
        budget is spent (docs/paper.md, choice 5).
        """
        means = self.head_means(obs, step)
        critic_obs = self.critic_input(obs, step)
        obs_k = critic_obs.unsqueeze(1).expand(-1, self.num_heads, -1)
        qr1, qr2 = self.qr(obs_k, means)
        q_reward, q_cost = torch.min(qr1, qr2), self.cost_q(obs_k, means, step.unsqueeze(1))
        spread = torch.abs(qr1 - qr2)
        if critics is not None:
            q_reward, q_cost = critics.replace(critic_obs, means, q_reward, q_cost)
            spread = None
        if self.clamp_cost_q:
            q_cost = q_cost.clamp(min=0.0)
        return means, q_reward, q_cost, spread

    def cost_q(self, critic_obs: torch.Tensor, actions: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """The pessimistic Q^c(s, a) in cost units: the larger twin (the switching rule's, before any clamp), minus
        ``cost_offset`` and the per-step table's entry at step ``step`` (shaped to broadcast with Q^c)."""
        qc1, qc2 = self.qc(critic_obs, actions)
        per_step = self.cost_offset_per_step[step_bins(step, self.horizon).long()]
        return torch.max(self.cost_sign * qc1, self.cost_sign * qc2) - self.cost_offset - per_step

    def switching_actions(self, obs: torch.Tensor, cost_spent: torch.Tensor, step: torch.Tensor,
                          cost_threshold: torch.Tensor | float, critics: CriticOverride | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """The CAPS action for each state and the head that produced it (``critics``: see ``head_values``)."""
        means, q_reward, q_cost, spread = self.head_values_and_spread(obs, step, critics)
        threshold = remaining_budget_threshold(cost_threshold, cost_spent, step, self.horizon, self.cost_gamma)
        heads = select_heads(q_reward, q_cost, threshold, self.head_selection, spread)
        actions = means[torch.arange(means.shape[0], device=means.device), heads]
        return actions, heads

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = batch[Columns.OBS].float()
        zeros = torch.zeros(obs.shape[0], device=obs.device)
        cost_spent = batch.get(COST_SPENT, zeros).double()  # float64, as CAPSPolicy and the ONNX export read it
        step = batch.get(STEP, zeros).double()
        actions, heads = self.switching_actions(obs, cost_spent, step, self.cost_threshold)
        predicted = self.cost_q(self.critic_input(obs, step), actions, step)  # as CAPSPolicy.predicted_cost reads it
        return {Columns.ACTIONS: actions, HEAD: heads, PREDICTED_COST: predicted}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        # Offline training never explores; evaluation always uses the deterministic switching rule.
        return self._forward_inference(batch, **kwargs)

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs, actions, step = batch[Columns.OBS], batch[Columns.ACTIONS], batch.get(T)
        next_step = None if step is None else step + 1
        critic_obs = self.critic_input(obs, step)
        next_critic_obs = self.critic_input(batch[Columns.NEXT_OBS], next_step)
        qr1, qr2 = self.qr(critic_obs, actions)
        qc1, qc2 = self.qc(critic_obs, actions)
        return self.backbone_spec.forward_train(self, batch, critic_obs, next_critic_obs, step, next_step) | {
            QR_PREDS: qr1, QR_TWIN_PREDS: qr2, QC_PREDS: qc1, QC_TWIN_PREDS: qc2}

