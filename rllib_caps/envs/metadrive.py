"""DSRL's nine MetaDrive tasks (``easysparse`` ... ``harddense``) re-created on metadrive-simulator 0.4.3.

``make_metadrive_env(task, seed=...)`` returns a gymnasium 1.x env: a 259-dim lidar/state observation
(19 ego-state and navigation values, then 240 lidar distances, all in [0, 1]), a 2-dim action
(steering, throttle/brake) in [-1, 1], the step cost in ``info["cost"]``, truncation at the task's
episode length, and ``reset(seed=s)`` reproducible. It never touches the network and needs no MetaDrive
assets (``rllib_caps.envs.compat.metadrive``).

Fidelity to DSRL
----------------
DSRL collected its MetaDrive data with ``SafeMetaDriveEnv_FSRL`` from a GitHub-only MetaDrive 0.2.6 fork
(HenryLHH/metadrive_clean; dsrl 0.1.0 ``offline_metadrive/gym_envs.py``), which cannot be installed here.
What is carried over, value for value:

- Road difficulty -> PG block sequence and map seed: easy ``"SCS"`` (straight, curve, straight), seed 0;
  medium ``"XST"`` (intersection, straight, T-junction), seed 100; hard ``"TRO"`` (T-junction,
  out-ramp, roundabout), seed 200; ``map=3``, one scenario (fork ``environment_num=1`` is 0.4.3's
  ``num_scenarios=1``), ``accident_prob=0``.
- Traffic density: sparse 0.1, mean 0.15, dense 0.2; ``traffic_mode=Hybrid``, ``random_traffic=True``.
- Reward: MetaDrive's driving reward with ``crash_vehicle_penalty=0`` (other penalties at their defaults).
- Horizon 1000 (the task's ``max_episode_steps``).
- Cost: MetaDrive's base cost (1 on out-of-road, else 1 on crashing a vehicle, else 1 on crashing an
  object) plus DSRL's two dense terms, velocity ``max(0, 0.01 * (v_kmh - 10))`` and proximity
  ``0.01 * max(0, 0.1 - min(lidar))**2``. ``info`` also carries ``velocity_cost``, ``proximity_cost``,
  ``out_of_road_cost`` and ``crash_cost`` (report-only, as in DSRL).
- Termination: arrived, crashed (vehicle, object or building) or out of road; truncation at the horizon.
- Out of road uses the fork's rule: on a continuous yellow/white line or crashing the sidewalk. (0.4.3
  also counts "not on any lane surface"; the fork's code overwrote that term.)

Places where the port differs or fidelity is not verified:

- Velocity units: 0.4.3 reports ``info["velocity"]`` in m/s (left so; ``info["velocity_km_h"]`` is
  added); MetaDrive before 0.3 reported km/h (its ``vehicle.speed`` was km/h), so the velocity cost uses
  km/h. Inferred from the old source, not checked against DSRL's recorded ``velocity_costs``.
- ``idm_target_speed``, ``idm_acc_factor`` and ``idm_deacc_factor`` in DSRL's config are read only by the
  fork's ``IDMPolicy_CustomSpeed``, which drove the *ego* car while collecting data; traffic used the
  stock IDM policy. They are inert in an evaluation env and are dropped (0.4.3 rejects unknown keys).
- Maps, checked against DSRL's maximum episode rewards with 0.4.3's IDM policy driving the ego car:
  easy (route 408 m) returns 425.7 against DSRL's 425.8, a match; medium (route 252 m) returns 259
  against 270, close; hard (route 319 m) is not DSRL's map: the IDM car leaves the road at the out-ramp
  (route completion about 0.6) and DSRL's maximum of 487 implies a route of about 470 m. Hard-task
  scores are not comparable with DSRL's.
- The fork's out-of-road rule has a hole that 0.4.3's does not: a car that drives straight on past the
  end of an exit road (medium and hard, e.g. straight through the first junction) never touches a
  line, so it is never out of road and drives on across empty ground until the horizon. Kept for
  fidelity; the fork presumably had the same hole.
- Vehicle dynamics, lidar, lane-line contact tests, IDM traffic behaviour and spawn positions follow
  0.4.3's code; none was compared with the fork (no fork build, no DSRL MetaDrive data here).
- Seeding: the map is fixed per task (as in DSRL). ``reset(seed=s)`` seeds the traffic; in the fork the
  traffic generator was never re-seeded (``random_traffic``), so DSRL episodes have no seed to match.
  An unseeded ``reset()`` continues the env's random stream. Every object is rebuilt on reset
  (``force_destroy``): recycled vehicles keep tiny physics state (1e-9 differences after one step),
  which would break reproducibility; this adds about 0.1-0.2 s to each reset.

MetaDrive runs one engine per process. Creating an env closes any engine already running in the
process; an env that was superseded that way raises ``RuntimeError`` on ``reset``/``step`` (its
``close`` is a no-op). Closing an env and creating or resetting one again works.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Protocol

import gymnasium
import numpy as np

from rllib_caps.envs.compat.metadrive import import_metadrive

FIDELITY_NOTE = (
    "MetaDrive: DSRL's task configuration re-created on metadrive-simulator 0.4.3; DSRL's data came from a "
    "MetaDrive 0.2.6 fork; equivalence is not verified, and the hard map differs from DSRL's. "
    "See rllib_caps.envs.metadrive."
)

# Road difficulty -> (PG block sequence, map seed); traffic level -> traffic density. From dsrl 0.1.0.
ROADS: dict[str, tuple[str, int]] = {"easy": ("SCS", 0), "medium": ("XST", 100), "hard": ("TRO", 200)}
TRAFFIC: dict[str, float] = {"sparse": 0.1, "mean": 0.15, "dense": 0.2}
TASK_NAMES: tuple[str, ...] = tuple(road + traffic for road in ROADS for traffic in TRAFFIC)

OBS_DIM = 259
ACT_DIM = 2
LIDAR_DIM = 240  # the last 240 observation values; DSRL's proximity cost reads them
KMH_PER_MS = 3.6


class MetaDriveTask(Protocol):
    """What the factory reads from a task (``rllib_caps.envs.tasks.TaskSpec`` fits)."""

    name: str
    max_episode_steps: int


def dsrl_config(name: str, horizon: int) -> dict[str, Any]:
    """The MetaDrive 0.4.3 config of DSRL task ``name`` (e.g. ``"easysparse"``), headless and quiet."""
    road = next((r for r in ROADS if name.lower().startswith(r)), None)
    traffic = name.lower()[len(road) :] if road else None
    if road is None or traffic not in TRAFFIC:
        raise ValueError(f"unknown MetaDrive task {name!r}; expected one of {', '.join(TASK_NAMES)}")
    blocks, map_seed = ROADS[road]
    return {
        # DSRL's per-task config
        "start_seed": map_seed,
        "num_scenarios": 1,
        "map": 3,
        "map_config": {"type": "block_sequence", "config": blocks},
        "traffic_density": TRAFFIC[traffic],
        "accident_prob": 0.0,
        "horizon": horizon,
        # SafeMetaDriveEnv_FSRL.default_config
        "crash_vehicle_penalty": 0.0,
        "random_traffic": True,
        "traffic_mode": "hybrid",  # TrafficMode.Hybrid
        # rebuild every object on reset: recycled ones carry physics state, so seeded episodes would differ
        "force_destroy": True,
        # headless lidar/state observations only; MetaDrive logs INFO lines on every env creation
        "use_render": False,
        "image_observation": False,
        "log_level": logging.WARNING,
    }


def make_metadrive_env(task: MetaDriveTask, *, seed: int | None = None, **kwargs: Any) -> gymnasium.Env:
    """Create DSRL MetaDrive task ``task`` (see the module docstring).

    ``seed`` seeds the first ``reset()`` that is given no seed. ``kwargs`` override MetaDrive config keys.
    Closes any MetaDrive engine already running in this process (one engine per process).
    """
    config = dsrl_config(task.name, task.max_episode_steps) | kwargs
    env_class = _env_class()
    _close_running_engine()
    return env_class(config, seed=seed)


def _close_running_engine() -> None:
    """Close the process's MetaDrive engine, if any, so a new env can be configured and started."""
    from metadrive.engine.engine_utils import close_engine

    close_engine()


@functools.cache
def _env_class() -> type[gymnasium.Env]:
    """Define the env class on first use, so importing this module does not import MetaDrive (~3 s)."""
    import_metadrive()
    from metadrive.base_class.randomizable import Randomizable
    from metadrive.engine.engine_utils import get_global_config
    from metadrive.envs.safe_metadrive_env import SafeMetaDriveEnv

    class DSRLMetaDriveEnv(SafeMetaDriveEnv):
        """``SafeMetaDriveEnv`` with DSRL's costs and termination, gymnasium seeding and a guard for the
        one-engine-per-process rule."""

        def __init__(self, config: dict[str, Any], seed: int | None = None) -> None:
            super().__init__(config)
            self._first_seed = seed
            self._traffic_seed = 0

        def _ensure_current(self) -> None:
            current = get_global_config()  # None once the engine is closed and no env was created since
            if current is not None and current is not self.config:
                raise RuntimeError(
                    "this MetaDrive env was superseded by a newer one: MetaDrive runs one engine per process "
                    "and creating an env closes the previous one. Create a new env instead."
                )

        def reset(
            self, *, seed: int | None = None, options: dict[str, Any] | None = None
        ) -> tuple[np.ndarray, dict[str, Any]]:
            """Reset the task's fixed map with traffic drawn from the env's random stream (seeded by ``seed``)."""
            self._ensure_current()
            if seed is None:
                seed, self._first_seed = self._first_seed, None
            gymnasium.Env.reset(self, seed=seed)
            self._traffic_seed = int(self.np_random.integers(2**31))
            return super().reset(seed=self.config["start_seed"])

        def _reset_global_seed(self, force_seed: int | None = None) -> None:
            super()._reset_global_seed(force_seed)
            # with random_traffic the traffic manager ignores the scenario seed; give it the episode's seed
            Randomizable.seed(self.engine.traffic_manager, self._traffic_seed)

        def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
            """One step with DSRL's cost terms and termination rule (``SafeMetaDriveEnv_FSRL.step``)."""
            self._ensure_current()
            obs, reward, _, _, info = super().step(action)
            info["velocity_km_h"] = info["velocity"] * KMH_PER_MS
            info["velocity_cost"] = max(0.0, 1e-2 * (info["velocity_km_h"] - 10.0))
            info["proximity_cost"] = 1e-2 * max(0.0, 0.1 - float(np.min(obs[-LIDAR_DIM:]))) ** 2
            extra_cost = info["velocity_cost"] + info["proximity_cost"]
            info["cost"] = float(info["cost"] + extra_cost)
            self.episode_cost += extra_cost
            info["total_cost"] = self.episode_cost
            info["crash"] = bool(info["crash_vehicle"] or info["crash_object"] or info["crash_building"])
            info["out_of_road_cost"] = self.config["out_of_road_cost"] if info["out_of_road"] else 0.0
            info["crash_cost"] = self.config["crash_vehicle_cost"] if info["crash"] else 0.0
            terminated = bool(info["arrive_dest"] or info["crash"] or info["out_of_road"])
            return obs, float(reward), terminated, bool(info["max_step"]), info

        def _is_out_of_road(self, vehicle: Any) -> bool:
            """The fork's rule: on a continuous line or against the sidewalk (no "off every lane" term)."""
            return bool(vehicle.on_yellow_continuous_line or vehicle.on_white_continuous_line or vehicle.crash_sidewalk)

        def close(self) -> None:
            """Close the engine unless a newer env owns it."""
            if get_global_config() is self.config:
                super().close()

    return DSRLMetaDriveEnv
