"""The running context of one CDT episode at deployment (numpy, no Ray): the last L steps' observations,
actions, return-to-go and cost-to-go targets and timesteps, as a right-padded window. The evaluation connector
and ``CDTPolicy`` both keep one per episode.

The targets start at (R̂₀, Ĉ₀) = (the return target for κ, κ) and after every step decrease by the reward and
the cost actually received: R̂_{t+1} = R̂_t − r_t, Ĉ_{t+1} = Ĉ_t − c_t (raw units; the model scales R̂ itself).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from rllib_caps.data.sequences import COSTS_TO_GO, MASK, RETURNS_TO_GO, TIMESTEPS, WINDOW_ACTIONS, WINDOW_OBS


class ContextWindow:
    """``start(obs)`` opens the episode; ``record(action, reward, cost, next_obs)`` adds each step; ``window()``
    is the model's input whose last valid step is the current one (its action slot is zero: the model reads
    the action off the state token, which cannot attend to it)."""

    def __init__(self, seq_len: int, act_dim: int, return_target: float, cost_target: float) -> None:
        self.seq_len, self.act_dim = seq_len, act_dim
        self.return_to_go, self.cost_to_go = float(return_target), float(cost_target)
        self.steps = 0  # steps recorded so far (the current step's index t)
        self._rows: deque = deque(maxlen=seq_len)  # [obs, action, R̂, Ĉ, t] of the last L steps

    @property
    def started(self) -> bool:
        return bool(self._rows)

    def start(self, obs: np.ndarray) -> None:
        self._rows.append([np.asarray(obs, np.float32), np.zeros(self.act_dim, np.float32), self.return_to_go,
                           self.cost_to_go, 0])

    def record(self, action: np.ndarray, reward: float, cost: float, next_obs: np.ndarray) -> None:
        """The current step took ``action`` and received ``reward`` and ``cost``; ``next_obs`` opens the next."""
        if not self.started:
            raise RuntimeError("ContextWindow.record before start(obs)")
        self._rows[-1][1] = np.asarray(action, np.float32).reshape(self.act_dim)
        self.return_to_go -= float(reward)
        self.cost_to_go -= float(cost)
        self.steps += 1
        self.start(next_obs)
        self._rows[-1][4] = self.steps

    def window(self) -> dict[str, np.ndarray]:
        """The last ``seq_len`` steps, oldest first, zero-padded on the right, with ``MASK``."""
        count, pad = len(self._rows), self.seq_len - len(self._rows)
        obs = np.stack([row[0] for row in self._rows])
        actions = np.stack([row[1] for row in self._rows])
        first = self._rows[0][4]
        return {
            WINDOW_OBS: np.concatenate([obs, np.zeros((pad, obs.shape[1]), np.float32)]),
            WINDOW_ACTIONS: np.concatenate([actions, np.zeros((pad, self.act_dim), np.float32)]),
            RETURNS_TO_GO: np.array([row[2] for row in self._rows] + [0.0] * pad, np.float32),
            COSTS_TO_GO: np.array([row[3] for row in self._rows] + [0.0] * pad, np.float32),
            TIMESTEPS: np.arange(first, first + self.seq_len, dtype=np.int64),
            MASK: np.array([1.0] * count + [0.0] * pad, np.float32),
        }
