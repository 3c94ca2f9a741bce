"""Scripted MetaDrive behaviour policies: MetaDrive's IDM lane follower driving the ego car at a target speed.

DSRL collected its MetaDrive data with the ego car driven by ``IDMPolicy_CustomSpeed`` of its MetaDrive fork (the
``idm_target_speed``, ``idm_acc_factor`` and ``idm_deacc_factor`` keys of dsrl's ``SafeMetaDriveEnv_FSRL`` config,
`rllib_caps.envs.metadrive`): the IDM car-following model at a chosen cruising speed, lane changes off, the gap it
keeps shrinking with the speed (``10 - v / 6`` m), and uniform noise added to every action (steering
``+ U(-0.1, 0.1)``, throttle ``+ U(0, 0.2)``). `IDMDriver` is that policy on MetaDrive 0.4.3's ``IDMPolicy``, one
per target speed, so a collection can span the reward-cost frontier the way DSRL's did: on easysparse the
velocity cost is ``0.01`` per km/h over 10 km/h per step, so a driver at 10 km/h drives 1,000 steps almost free
(reward ≈ 288), one at 15 km/h finishes the route at a cost of ≈ 48, and one at 30 km/h at ≈ 90.

A driver at one speed never slows down from a costly one, so its data cannot teach a cost critic or a cost head that
braking saves cost. A slow-down driver (``--idm-slowdowns FAST:SLOW``) drives at ``FAST`` km/h and switches to
``SLOW`` km/h at a step drawn once per episode, uniform over the first half of the task's step limit (a 30 km/h car
finishes easysparse's route in about 520 of its 1,000 steps); its episodes brake from every speed it reaches, at
every point of the route.

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
    """A behaviour policy of a collection: MetaDrive's IDM driving at `speed_kmh`, or, with `slow_to_kmh`, slowing
    to that speed once per episode (see the module docstring)."""

    speed_kmh: float
    slow_to_kmh: float | None = None
    env_steps: int = 0  # no training: the collector logs a snapshot's env steps, and a script has none

    @property
    def label(self) -> str:
        """Its behaviour's name on dataset cards and in logs: ``IDM → 12 km/h`` or ``IDM 30 → 10 km/h``."""
        if self.slow_to_kmh is None:
            return f"IDM → {self.speed_kmh:g} km/h"
        return f"IDM {self.speed_kmh:g} → {self.slow_to_kmh:g} km/h"

    def actor(self, task: TaskSpec) -> IDMActor:
        """The object that picks this driver's actions during rollouts (`task` must be a MetaDrive one)."""
        return IDMActor(self.speed_kmh, self.slow_to_kmh, slow_down_within=task.max_episode_steps // 2)


def idm_drivers(
    task: TaskSpec, speeds_kmh: Sequence[float], slowdowns_kmh: Sequence[tuple[float, float]] = ()
) -> list[IDMDriver]:
    """``--idm-speeds`` and ``--idm-slowdowns``: one driver per target speed, then one per ``(fast, slow)`` pair.
    ValueError, naming the flag, off MetaDrive, at a speed that is not positive, or at a slow-down that is not one."""
    for flag, given in (("--idm-speeds", speeds_kmh), ("--idm-slowdowns", slowdowns_kmh)):
        if given and task.suite != "metadrive":
            raise ValueError(f"{flag} drives MetaDrive's ego car; {task.name!r} is not a MetaDrive task")
    if any(speed <= 0 for speed in speeds_kmh):
        raise ValueError(f"--idm-speeds: every speed must be positive, got {', '.join(map(str, speeds_kmh))}")
    if any(not fast > slow > 0 for fast, slow in slowdowns_kmh):
        pairs = ", ".join(f"{fast:g}:{slow:g}" for fast, slow in slowdowns_kmh)
        raise ValueError(f"--idm-slowdowns: every FAST:SLOW needs FAST > SLOW > 0, got {pairs}")
    return [IDMDriver(float(speed)) for speed in speeds_kmh] + [
        IDMDriver(float(fast), float(slow)) for fast, slow in slowdowns_kmh
    ]


class IDMActor:
    """Acts for a batch of MetaDrive envs, each with an IDM policy bound to that env's current ego car.

    A new episode builds a new ego car (the env rebuilds every object on reset), so the IDM policy is rebuilt with
    it; a slow-down driver then draws the step of its switch from ``rngs[i]``, uniform on ``[0, slow_down_within)``.
    Row ``i`` adds the fork's uniform noise and then ``N(0, noise_stds[i]^2)`` noise to both action values,
    drawing only from ``rngs[i]``, and is clipped to [-1, 1] (MetaDrive's action box)."""

    def __init__(self, speed_kmh: float, slow_to_kmh: float | None = None, slow_down_within: int = 1) -> None:
        self.speed_kmh = speed_kmh
        self.slow_to_kmh = slow_to_kmh
        self.slow_down_within = slow_down_within
        self._episodes: dict[int, _Episode] = {}  # id(env) -> its current ego car's IDM policy and step count

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
            episode = self._episode(env, rng)
            if episode.step == episode.slow_down_at:
                _set_speed(episode.policy, self.slow_to_kmh)
            episode.step += 1
            steering, throttle = episode.policy.act()
            steering += STEERING_NOISE * (rng.random() - 0.5)
            throttle += THROTTLE_NOISE * rng.random()
            action = np.array([steering, throttle], dtype=np.float64) + noise_std * rng.standard_normal(2)
            actions.append(np.clip(action, -1.0, 1.0))
        return np.stack(actions)

    def _episode(self, env: gymnasium.Env, rng: np.random.Generator) -> _Episode:
        from metadrive.policy.idm_policy import IDMPolicy

        vehicle = env.unwrapped.agent
        episode = self._episodes.get(id(env))
        if episode is None or episode.policy.control_object is not vehicle:
            policy = IDMPolicy(vehicle, random_seed=0)  # its generator only times lane changes, which are off
            policy.enable_lane_change = False
            _set_speed(policy, self.speed_kmh)
            slow_down_at = None if self.slow_to_kmh is None else int(rng.integers(self.slow_down_within))
            episode = self._episodes[id(env)] = _Episode(policy, slow_down_at)
        return episode


@dataclass
class _Episode:
    """An IDM actor's state in one env: the IDM policy of the current ego car, the steps it has acted, and the step
    at which a slow-down driver switches to its slower speed (None for a driver at one speed)."""

    policy: Any
    slow_down_at: int | None
    step: int = 0


def _set_speed(policy: Any, speed_kmh: float) -> None:
    """Make an IDM policy cruise at `speed_kmh`, keeping the fork's speed-dependent gap (module docstring)."""
    policy.NORMAL_SPEED = policy.target_speed = speed_kmh
    policy.DISTANCE_WANTED = max(0.0, 10.0 - speed_kmh / 6.0)
