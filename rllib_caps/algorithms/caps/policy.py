"""Deploy a trained CAPS bundle without Ray: load the RLModule from a checkpoint and act.

    policy = CAPSPolicy.from_checkpoint("checkpoints/BallCircle")
    policy.reset(threshold=20.0)
    obs, info = env.reset(seed=0)
    cost = 0.0
    while True:
        action = policy.act(obs, cost)            # cost: info["cost"] of the previous step
        obs, reward, terminated, truncated, info = env.step(action)
        cost = info["cost"]
        ...

Batched use, with a gymnasium vector env of N copies and its default next-step autoreset (after a copy ends,
the next ``step()`` resets it, ignores its action and returns its first observation)::

    policy.reset(threshold=20.0, batch_size=N)
    obs, infos = envs.reset(seed=0)
    costs, autoreset = np.zeros(N), np.zeros(N, dtype=bool)
    while True:
        actions = policy.act(obs, costs)
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        costs = infos.get("cost", np.zeros(N))      # absent when every copy was just reset
        policy.reset_envs(autoreset)                # the copies this step reset: obs is their first observation
        autoreset = terminated | truncated

With ``autoreset_mode=SAME_STEP`` the first observation comes with the ending step: call
``policy.reset_envs(terminated | truncated)`` right after ``step()`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from ray.rllib.core.rl_module.rl_module import RLModule

from rllib_caps.algorithms.caps.calibration import CostCriticAPI
from rllib_caps.algorithms.caps.critic_variants import FQESettings
from rllib_caps.algorithms.caps.fqe import evaluate_critics
from rllib_caps.algorithms.caps.keys import HEAD, PREDICTED_COST
from rllib_caps.algorithms.caps.switching import HEAD_SELECTIONS
from rllib_caps.algorithms.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule
from rllib_caps.core.budget import BudgetTracker, check_budget_input
from rllib_caps.core.deployment import DeployedPolicy


class CAPSPolicy(DeployedPolicy, CostCriticAPI):
    """The CAPS switching policy on CPU; ``budget`` (a ``BudgetTracker``) keeps c_<t and t per episode. After each
    ``act``, ``last_heads`` holds the heads that acted and ``last_outputs`` those heads and, at an episode's first
    step, Q^c(s, a) of the action taken (what ``CAPSExtension`` turns into head usage and the predicted cost)."""

    module_class = DefaultCAPSTorchRLModule

    def __init__(self, module: RLModule, critics: Any = None, head: int | None = None) -> None:
        super().__init__(module)
        if head is not None and not 0 <= head < self.num_heads:
            raise ValueError(f"head must be in [0, {self.num_heads - 1}], got {head}")
        self.critics = critics  # None: the module's offline critics; else e.g. fqe.FQECritics (head_values)
        self.head = head  # None: the switching rule acts; else this head alone, always (an ablation)
        self.budget: BudgetTracker | None = None  # set by reset(); act() refuses to run without a budget

    def with_head(self, head: int) -> CAPSPolicy:
        """This policy's module acting with head ``head`` alone (e.g. the cost head K−1), bypassing the switching
        rule; the module is shared, not copied."""
        return CAPSPolicy(self.module, self.critics, head)

    @property
    def num_heads(self) -> int:
        return self.module.num_heads

    @property
    def cost_gamma(self) -> float:
        return self.module.cost_gamma

    @property
    def head_selection(self) -> str:
        """Which feasible head acts (``switching.HEAD_SELECTIONS``): the checkpoint's, unless set here. It is a
        deployment choice (the heads and critics are the same), so it can be changed without retraining."""
        return self.module.head_selection

    @head_selection.setter
    def head_selection(self, selection: str) -> None:
        if selection not in HEAD_SELECTIONS:
            raise ValueError(f"head_selection must be one of {HEAD_SELECTIONS}, got {selection!r}")
        self.module.head_selection = selection

    def predicted_cost(self, obs: np.ndarray, actions: np.ndarray, steps: np.ndarray) -> np.ndarray:
        return self.module.predicted_cost(obs, actions, steps)

    @property
    def cost_shift(self) -> float:
        return self.module.cost_shift

    def set_cost_shift(self, shift: float) -> None:
        self.module.set_cost_shift(shift)

    @property
    def horizon(self) -> int:
        return self.module.horizon

    @property
    def cost_step_shifts(self) -> np.ndarray:
        return self.module.cost_step_shifts

    def set_cost_step_shifts(self, shifts: np.ndarray) -> None:
        self.module.set_cost_step_shifts(shifts)

    def evaluate_critics(self, dataset: Any, task: Any, thresholds: Sequence[float], episodes: int,
                         critics: Sequence[str], settings: FQESettings, *, seed: int = 0,
                         progress: bool = True) -> dict[str, dict[str, Any]]:
        """The paper's FQE ablation (``fqe.evaluate_critics``)."""
        return evaluate_critics(self, dataset, task, thresholds, episodes, critics, settings, seed=seed,
                                progress=progress)

    def reset(self, threshold: float, batch_size: int = 1) -> None:
        """Starts new episode(s) with budget κ = ``threshold`` (undiscounted, in the env's cost units)."""
        threshold = float(check_budget_input(threshold, "threshold (the cost limit κ)"))
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.threshold = threshold
        self.budget = BudgetTracker(batch_size)
        self._acted = np.zeros(batch_size, dtype=bool)  # an action whose cost has not been recorded yet
        self.last_heads = np.zeros(batch_size, dtype=np.int64)

    def reset_envs(self, mask: np.ndarray) -> None:
        """Restarts the episode bookkeeping of the batch entries where ``mask`` is True."""
        budget = self._require_budget()
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (len(budget),):
            raise ValueError(f"reset_envs takes a boolean mask of shape ({len(budget)},), got {mask.dtype} "
                             f"{mask.shape}")
        budget.restart(mask)
        self._acted[mask] = False

    def _require_budget(self) -> BudgetTracker:
        if self.budget is None:
            raise RuntimeError("call reset(threshold) before act(): the policy needs the cost limit κ")
        return self.budget

    @torch.no_grad()
    def act(self, obs: np.ndarray, cost: float | np.ndarray = 0.0, reward: float | np.ndarray = 0.0) -> np.ndarray:
        """The CAPS action(s) in the env's action bounds.

        ``cost`` is the cost the previous step incurred (``info["cost"]``); it is ignored on the first
        call of an episode. ``obs`` is one observation or a batch ``(N, D)``. ``reward``, the previous step's
        reward, is part of the deployable-policy protocol (``core.rollout``); CAPS does not use it.
        """
        budget = self._require_budget()
        obs_batch = self.observation_batch(obs, len(budget))
        budget.record(check_budget_input(cost, "cost", len(budget)), mask=self._acted)
        obs_tensor, step = torch.from_numpy(obs_batch), torch.from_numpy(budget.step.astype(np.float64))
        if self.head is None:
            actions, heads = self.module.switching_actions(
                obs_tensor, torch.from_numpy(budget.spent), step, self.threshold, self.critics,
            )
        else:
            actions = self.module.head_means(obs_tensor, step)[:, self.head]
            heads = torch.full((obs_batch.shape[0],), self.head)
        self._acted[:] = True
        self.last_heads = heads.numpy()
        self.last_actions = actions.numpy()
        self.last_outputs = {HEAD: self.last_heads, PREDICTED_COST: self._first_step_cost(obs_tensor, actions, step)}
        return self.env_actions(self.last_actions, single=np.ndim(obs) == 1)

    def _first_step_cost(self, obs: torch.Tensor, actions: torch.Tensor, step: torch.Tensor) -> np.ndarray:
        """Q^c(s, a) of the actions taken, where an episode takes its first step (evaluation compares it with the
        cost the episode then incurs); NaN elsewhere, which spares the critic call on every later step."""
        first = step == 0
        if not first.any():
            return np.full(len(step), np.nan)
        predicted = self.module.cost_q(self.module.critic_input(obs, step), actions, step)
        return np.where(first.numpy(), predicted.numpy(), np.nan)
