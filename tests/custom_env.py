"""A small safe-RL env that is not in DSRL, for the declared-task tests: a point on a line, rewarded for moving right
and charged a cost (in ``info["cost"]``) for each step beyond ``wall``."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np


class LineWorld(gymnasium.Env):
    """Observation: position and velocity; action: an acceleration in [-1, 1]; reward: the step's displacement; cost:
    1 for each step past ``wall``. ``with_cost=False`` leaves the cost out of info (the refused case)."""

    def __init__(self, wall: float = 1.0, with_cost: bool = True) -> None:
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.wall, self.with_cost = wall, with_cost
        self.state = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = np.array([self.np_random.uniform(-0.1, 0.1), 0.0])
        return self.state.astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        velocity = 0.9 * self.state[1] + 0.1 * float(np.clip(np.asarray(action).reshape(-1)[0], -1.0, 1.0))
        self.state = np.array([self.state[0] + velocity, velocity])
        info = {"cost": float(self.state[0] > self.wall)} if self.with_cost else {}
        return self.state.astype(np.float32), velocity, False, False, info
