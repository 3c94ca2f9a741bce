"""Create any of the 38 DSRL tasks, or a declared one (``envs.tasks.register_task``), as a gymnasium 1.x env, and
register them with RLlib.

Every env returned by :func:`make_env` steps with the 5-tuple API, reports the step cost in
``info["cost"]``, is truncated at DSRL's max episode length, and is reproducible under
``reset(seed=s)``. Importing this module does not import Ray; only :func:`register_envs` does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from rllib_caps.envs.custom import construct_env
from rllib_caps.envs.tasks import CUSTOM_SUITE, TASKS, TaskSpec, get_task


class FirstResetSeed(gymnasium.Wrapper):
    """Applies ``make_env``'s seed to the first ``reset()`` that is given none."""

    def __init__(self, env: gymnasium.Env, seed: int) -> None:
        super().__init__(env)
        self._pending_seed: int | None = seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


class CostRequired(gymnasium.Wrapper):
    """Refuses a declared task's step whose info has no ``"cost"``: evaluation and collection sum ``info["cost"]``."""

    def __init__(self, env: gymnasium.Env, task: str) -> None:
        super().__init__(env)
        self._task = task

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if "cost" not in info:
            raise ValueError(f"task {self._task!r}: its env's step() returned an info without 'cost' (keys: "
                             f"{sorted(info)}); a safe-RL env reports each step's cost in info['cost']")
        return obs, reward, terminated, truncated, info


def _make_simulator_env(task: TaskSpec, **kwargs: Any) -> gymnasium.Env:
    """The task's simulator env with the 5-tuple API and ``info["cost"]``, before the time limit."""
    if task.suite == "bullet":
        from rllib_caps.envs.compat.bullet_safety_gym import make_bullet_safety_gym_env

        return make_bullet_safety_gym_env(task.env_id, **kwargs)
    if task.suite in ("safetygym", "velocity"):
        from rllib_caps.envs.compat.safety_gymnasium import make_safety_gymnasium_env

        return make_safety_gymnasium_env(task.env_id, **kwargs)
    if task.suite == "metadrive":
        from rllib_caps.envs.metadrive import make_metadrive_env

        return make_metadrive_env(task, **kwargs)
    if task.suite == CUSTOM_SUITE:
        return CostRequired(construct_env(task.entry_point, task.env_id, task.env_kwargs, **kwargs), task.name)
    raise ValueError(f"task {task.name!r} has unknown suite {task.suite!r}")


def make_env(task: str | TaskSpec, *, seed: int | None = None, max_episode_steps: int | None = None,
             **kwargs: Any) -> gymnasium.Env:
    """Create a task's env (gymnasium 1.x API, ``info["cost"]``, TimeLimit at the task's episode length, or at
    ``max_episode_steps`` where given: a smoke test's evaluation, ``utils.smoke``).

    ``task`` is a TaskSpec, short name or id. ``seed``, if given, seeds the action space and the first ``reset()``
    called without a seed. Other keyword arguments go to the simulator's constructor (a declared task's entry point
    or ``gymnasium.make``, after its ``env_kwargs``).
    """
    spec = task if isinstance(task, TaskSpec) else get_task(task)
    # gymnasium's Box bound check casts float64 limits to float32 and warns about a harmless overflow.
    with np.errstate(over="ignore"):
        env = _make_simulator_env(spec, **kwargs)
    env = gymnasium.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps or spec.max_episode_steps)
    if seed is not None:
        env = FirstResetSeed(env, seed)
        env.action_space.seed(seed)
    return env


def _make_from_config(task: TaskSpec, env_config: Mapping[str, Any]) -> gymnasium.Env:
    """RLlib env creator: the env_config dict becomes ``make_env``'s keyword arguments."""
    return make_env(task, **dict(env_config))


def register_envs(*specs: TaskSpec) -> None:
    """Register with RLlib (``ray.tune.registry.register_env``), under its id and short name, every DSRL task, or
    only ``specs`` where given (a declared task: its creator carries its spec, so Ray workers build its env without
    the task being declared in their process)."""
    from ray.tune.registry import register_env

    for spec in specs or TASKS.values():
        creator = functools.partial(_make_from_config, spec)
        register_env(spec.id, creator)
        register_env(spec.name, creator)
