"""Deploy a trained CDT without Ray: load the RLModule from a checkpoint and act, with κ chosen at deployment.

    policy = CDTPolicy.from_checkpoint("checkpoints/BallCircle-cdt")
    policy.reset(threshold=20.0)                      # Ĉ₀ = κ, R̂₀ = the task's return target for κ
    obs, info = env.reset(seed=0)
    cost = reward = 0.0
    while True:
        action = policy.act(obs, cost, reward=reward)  # the previous step's info["cost"] and reward
        obs, reward, terminated, truncated, info = env.step(action)
        cost = info["cost"]
        ...

The same protocol as ``CAPSPolicy`` (``core.rollout``), so ``python -m rllib_caps.evaluate`` and the report's
cost-limit ablation deploy either.
"""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.core.rl_module.rl_module import RLModule

from rllib_caps.algorithms.cdt.context import ContextWindow
from rllib_caps.algorithms.cdt.torch.default_cdt_torch_rl_module import DefaultCDTTorchRLModule
from rllib_caps.core.budget import check_budget_input
from rllib_caps.core.deployment import DeployedPolicy
from rllib_caps.utils.manifest import CheckpointError


class CDTPolicy(DeployedPolicy):
    """The CDT policy on CPU; one ``ContextWindow`` per env keeps the last L steps and the running targets."""

    module_class = DefaultCDTTorchRLModule

    def __init__(self, module: RLModule) -> None:
        if not hasattr(module, "transformer"):
            raise CheckpointError(f"CDTPolicy needs a CDT module, got {type(module).__name__}")
        super().__init__(module)
        self.contexts: list[ContextWindow] | None = None  # set by reset()

    def reset(self, threshold: float, batch_size: int = 1) -> None:
        """Starts new episode(s) with cost target κ = ``threshold`` (undiscounted, the env's cost units)."""
        threshold = float(check_budget_input(threshold, "threshold (the cost limit κ)"))
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.module.set_cost_threshold(threshold)
        targets = self.module.initial_targets()
        self.contexts = [ContextWindow(self.module.seq_len, self.module.act_dim, *targets) for _ in range(batch_size)]
        self._actions = np.zeros((batch_size, self.module.act_dim), np.float32)

    @torch.no_grad()
    def act(self, obs: np.ndarray, cost: float | np.ndarray = 0.0, reward: float | np.ndarray = 0.0) -> np.ndarray:
        """The CDT action(s) in the env's action bounds. ``cost`` and ``reward`` are what the previous step
        received (``info["cost"]`` and the env's reward); both are ignored on an episode's first call. ``obs`` is
        one observation or a batch ``(N, D)``."""
        if self.contexts is None:
            raise RuntimeError("call reset(threshold) before act(): the policy needs the cost limit κ")
        obs_batch = self.observation_batch(obs, len(self.contexts))
        costs = check_budget_input(cost, "cost", len(self.contexts))
        rewards = np.broadcast_to(np.asarray(reward, np.float64), (len(self.contexts),))
        for i, context in enumerate(self.contexts):
            if context.started:
                context.record(self._actions[i], rewards[i], costs[i], obs_batch[i])
            else:
                context.start(obs_batch[i])
        windows = [context.window() for context in self.contexts]
        batch = {key: torch.from_numpy(np.stack([w[key] for w in windows])) for key in windows[0]}
        self._actions = self.module.transformer.act(batch).numpy()
        return self.env_actions(self._actions, single=np.ndim(obs) == 1)
