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

from pathlib import Path

import numpy as np
import torch
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.spaces.space_utils import unsquash_action

from rllib_caps.algorithms.cdt.context import ContextWindow
from rllib_caps.core.checkpoint import load_module
from rllib_caps.core.manifest import CheckpointError


class CDTPolicy:
    """The CDT policy on CPU; one ``ContextWindow`` per env keeps the last L steps and the running targets."""

    num_heads = 1  # one policy; ``last_heads`` is always 0

    def __init__(self, module: RLModule) -> None:
        if not hasattr(module, "transformer"):
            raise CheckpointError(f"CDTPolicy needs a CDT module, got {type(module).__name__}")
        self.module = module.eval()
        self.contexts: list[ContextWindow] | None = None  # set by reset()
        self.last_heads = np.zeros(1, dtype=np.int64)

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> CDTPolicy:
        """Loads the module from an ``Algorithm`` checkpoint directory (or its RLModule subdirectory)."""
        return cls(load_module(path))

    @property
    def task(self) -> str | None:
        """The registry name of the task the model was trained on (None for a custom env)."""
        return self.module.model_config.get("task")

    @property
    def training_seed(self) -> int | None:
        return self.module.model_config.get("seed")

    def reset(self, threshold: float, batch_size: int = 1, fixed_head: int | None = None) -> None:
        """Starts new episode(s) with cost target κ = ``threshold`` (undiscounted, the env's cost units)."""
        if fixed_head not in (None, 0):
            raise ValueError(f"CDT has one policy: fixed_head must be None or 0, got {fixed_head}")
        if not threshold >= 0:  # also rejects NaN
            raise ValueError(f"threshold (the cost limit κ) must be >= 0, got {threshold}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.module.set_cost_threshold(threshold)
        targets = self.module.initial_targets()
        self.contexts = [ContextWindow(self.module.seq_len, self.module.act_dim, *targets) for _ in range(batch_size)]
        self._actions = np.zeros((batch_size, self.module.act_dim), np.float32)
        self.last_heads = np.zeros(batch_size, dtype=np.int64)

    @torch.no_grad()
    def act(self, obs: np.ndarray, cost: float | np.ndarray = 0.0, reward: float | np.ndarray = 0.0) -> np.ndarray:
        """The CDT action(s) in the env's action bounds. ``cost`` and ``reward`` are what the previous step
        received (``info["cost"]`` and the env's reward); both are ignored on an episode's first call. ``obs`` is
        one observation or a batch ``(N, D)``."""
        if self.contexts is None:
            raise RuntimeError("call reset(threshold) before act(): the policy needs the cost limit κ")
        single = np.ndim(obs) == 1
        obs_batch = np.atleast_2d(np.asarray(obs, dtype=np.float32))
        expected = (len(self.contexts), *self.module.observation_space.shape)
        if obs_batch.shape != expected:
            raise ValueError(f"obs has shape {np.shape(obs)}; expected {expected[1:]} per env for "
                             f"{len(self.contexts)} env(s) (reset(threshold, batch_size=N) sets the number of envs)")
        if not np.isfinite(obs_batch).all():
            raise ValueError("obs contains NaN or inf")
        costs = np.broadcast_to(np.asarray(cost, np.float64), (len(self.contexts),))
        rewards = np.broadcast_to(np.asarray(reward, np.float64), (len(self.contexts),))
        for i, context in enumerate(self.contexts):
            if context.started:
                context.record(self._actions[i], rewards[i], costs[i], obs_batch[i])
            else:
                context.start(obs_batch[i])
        windows = [context.window() for context in self.contexts]
        batch = {key: torch.from_numpy(np.stack([w[key] for w in windows])) for key in windows[0]}
        self._actions = self.module.transformer.act(batch).numpy()
        # The same mapping RLlib's EnvRunners apply with `normalize_actions=True`.
        env_actions = unsquash_action(self._actions, self.module.action_space).astype(np.float32)
        return env_actions[0] if single else env_actions
