"""Scripted MetaDrive behaviour policies: MetaDrive's IDM lane follower driving the ego car at a target speed.

DSRL collected its MetaDrive data with the ego car driven by ``IDMPolicy_CustomSpeed`` of its MetaDrive fork (the
``idm_target_speed``, ``idm_acc_factor`` and ``idm_deacc_factor`` keys of dsrl's ``SafeMetaDriveEnv_FSRL`` config,
`rllib_caps.envs.metadrive`): the IDM car-following model at a chosen cruising speed, lane changes off, the gap it
keeps shrinking with the speed (``10 - v / 6`` m), and uniform noise added to every action (steering
``+ U(-0.1, 0.1)``, throttle ``+ U(0, 0.2)``). `IDMDriver` is that policy on MetaDrive 0.4.3's ``IDMPolicy``, one
per target speed, so a collection can span the reward-cost frontier the way DSRL's did: on easysparse the
velocity cost is ``0.01`` per km/h over 10 km/h per step, so a driver at 10 km/h drives 1,000 steps almost free
(reward ≈ 288), one at 15 km/h finishes the route at a cost of ≈ 48, and one at 30 km/h at ≈ 90.

The fork's noise is drawn from NumPy's global generator; here every random number comes from the episode's own
generator, as for the PPO snapshots (`data_conversion.collect`), so rollouts are reproducible. The fork's
``DEACC_FACTOR = 5`` is not carried over: 0.4.3's gap formula takes the square root of ``-ACC_FACTOR *
DEACC_FACTOR`` and needs its own sign (``-5``), which is the same braking strength.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from rllib_caps.envs.tasks import TaskSpec

STEERING_NOISE = 0.2  # width of the fork's uniform steering noise, centred on 0
THROTTLE_NOISE = 0.2  # width of the fork's uniform throttle noise, on [0, width): it pushes the car a little faster


@dataclass(frozen=True)
class IDMDriver:
    """A behaviour policy of a collection: MetaDrive's IDM driving at `speed_kmh` (see the module docstring)."""

    speed_kmh: float
    env_steps: int = 0  # no training: the collector logs a snapshot's env steps, and a script has none

    @property
    def label(self) -> str:
        """Its behaviour's name on dataset cards and in logs: ``IDM → 12 km/h``."""
        return f"IDM → {self.speed_kmh:g} km/h"

    def actor(self, task: TaskSpec) -> IDMActor:
        """The object that picks this driver's actions during rollouts (`task` must be a MetaDrive one)."""
        return IDMActor(self.speed_kmh)


def idm_drivers(task: TaskSpec, speeds_kmh: Sequence[float]) -> list[IDMDriver]:
    """``--idm-speeds``: one driver per target speed. ValueError, naming the flag, off MetaDrive or at a speed
    that is not positive."""
    if speeds_kmh and task.suite != "metadrive":
        raise ValueError(f"--idm-speeds drives MetaDrive's ego car; {task.name!r} is not a MetaDrive task")
    if any(speed <= 0 for speed in speeds_kmh):
        raise ValueError(f"--idm-speeds: every speed must be positive, got {', '.join(map(str, speeds_kmh))}")
    return [IDMDriver(float(speed)) for speed in speeds_kmh]


class IDMActor:
    """Acts for a batch of MetaDrive envs, each with an IDM policy bound to that env's current ego car.

    A new episode builds a new ego car (the env rebuilds every object on reset), so the IDM policy is rebuilt with
    it. Row ``i`` adds the fork's uniform noise and then ``N(0, noise_stds[i]^2)`` noise to both action values,
    drawing only from ``rngs[i]``, and is clipped to [-1, 1] (MetaDrive's action box)."""

    def __init__(self, speed_kmh: float) -> None:
        self.speed_kmh = speed_kmh
        self._policies: dict[int, Any] = {}  # id(env) -> IDM policy of its current ego car

    def act(
        self,
        obs: np.ndarray,
        rngs: Sequence[np.random.Generator],
        noise_stds: Sequence[float],
        envs: Sequence[gymnasium.Env],
    ) -> np.ndarray:
        """One action per env of `envs` (the observations are not read: the IDM reads the simulator's state)."""
        actions = []
        for env, rng, noise_std in zip(envs, rngs, noise_stds, strict=True):
            steering, throttle = self._policy(env).act()
            steering += STEERING_NOISE * (rng.random() - 0.5)
            throttle += THROTTLE_NOISE * rng.random()
            action = np.array([steering, throttle], dtype=np.float64) + noise_std * rng.standard_normal(2)
            actions.append(np.clip(action, -1.0, 1.0))
        return np.stack(actions)

    def _policy(self, env: gymnasium.Env) -> Any:
        from metadrive.policy.idm_policy import IDMPolicy

        vehicle = env.unwrapped.agent
        policy = self._policies.get(id(env))
        if policy is None or policy.control_object is not vehicle:
            policy = IDMPolicy(vehicle, random_seed=0)  # its generator only times lane changes, which are off
            policy.NORMAL_SPEED = policy.target_speed = self.speed_kmh
            policy.DISTANCE_WANTED = max(0.0, 10.0 - self.speed_kmh / 6.0)
            policy.enable_lane_change = False
            self._policies[id(env)] = policy
        return policy
