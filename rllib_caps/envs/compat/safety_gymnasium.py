"""Run Safety-Gymnasium 0.4.0 (written for gymnasium 0.28, NumPy 1, Python 3.10) under gymnasium 1.x,
NumPy 2 and Python 3.11.

Each fix below is a small function named after what it repairs; one more (``_light_skybox``) only makes
navigation resets ~50x cheaper. With them, the DSRL tasks give bit-identical MuJoCo states, rewards and
costs to the original pins, and observations equal up to a few ulps from NumPy's CPU-dispatched
``exp``/``arctan2`` in the lidar (``tests/test_safety_gym_fidelity.py``). Two fixes act process-wide:
``mujoco.MjModel.jnt`` also accepts one-element arrays, and ``gymnasium.wrappers.{compatibility,
autoreset,env_checker,time_limit}`` exist again as aliases.
Safety-Gymnasium 1.x is not supported: it renamed ``tasks.safety_velocity`` (which dsrl imports) and
needs ``gymnasium_robotics``; stay on 0.4.0, dsrl's pin.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np


class _RemovedEnvCompatibility:
    """Stands in for gymnasium 0.x's old-gym-API wrapper, which gymnasium 1.x dropped (shimmy has it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the old gym step API (EnvCompatibility) is not available in gymnasium 1.x")


def _alias_moved_gymnasium_wrappers() -> None:
    """gymnasium 1.x removed the ``gymnasium.wrappers.<module>`` files that Safety-Gymnasium imports from."""
    from gymnasium import wrappers

    moved = {
        "compatibility": {"EnvCompatibility": _RemovedEnvCompatibility},
        "autoreset": {"AutoResetWrapper": wrappers.Autoreset},  # renamed in 1.x
        "env_checker": {"PassiveEnvChecker": wrappers.PassiveEnvChecker},
        "time_limit": {"TimeLimit": wrappers.TimeLimit},
    }
    for name, attributes in moved.items():
        module_name = f"gymnasium.wrappers.{name}"
        if module_name not in sys.modules:
            module = types.ModuleType(module_name)
            module.__dict__.update(attributes)
            sys.modules[module_name] = module


@contextlib.contextmanager
def _array_defaults_as_factories() -> Iterator[None]:
    """Python 3.11 rejects NumPy arrays as dataclass defaults; turn them into ``default_factory``."""
    original = dataclasses.dataclass

    def patched(cls: type | None = None, /, **kwargs: Any) -> Any:
        def wrap(klass: type) -> type:
            for key, value in list(vars(klass).items()):
                if isinstance(value, np.ndarray):
                    setattr(klass, key, dataclasses.field(default_factory=value.copy))
            return original(klass, **kwargs)

        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = patched
    try:
        yield
    finally:
        dataclasses.dataclass = original


def _accept_array_joint_ids() -> None:
    """NumPy 2 no longer converts a one-element id array to an int, so ``MjModel.jnt(array([3]))`` fails."""
    import mujoco

    jnt = mujoco.MjModel.jnt

    def jnt_accepting_arrays(self: mujoco.MjModel, key: Any) -> Any:
        return jnt(self, int(key.item()) if isinstance(key, np.ndarray) else key)

    mujoco.MjModel.jnt = jnt_accepting_arrays


_VELOCITY_ENVS = {
    "safety_ant_velocity_v0": "SafetyAntVelocityEnv",
    "safety_half_cheetah_velocity_v0": "SafetyHalfCheetahVelocityEnv",
    "safety_hopper_velocity_v0": "SafetyHopperVelocityEnv",
    "safety_swimmer_velocity_v0": "SafetySwimmerVelocityEnv",
    "safety_walker2d_velocity_v0": "SafetyWalker2dVelocityEnv",
}


def _control_cost_in_float64() -> None:
    """NumPy 2 (NEP 50) keeps a float32 action's control cost in float32; NumPy 1 promoted it to float64."""

    def control_cost(self: Any, action: np.ndarray) -> np.float64:
        return self._ctrl_cost_weight * np.float64(np.sum(np.square(action)))

    for module_name, class_name in _VELOCITY_ENVS.items():  # the v1 DSRL envs subclass these
        module = importlib.import_module(f"safety_gymnasium.tasks.safety_velocity.{module_name}")
        getattr(module, class_name).control_cost = control_cost


# A 32x32 built-in sky: compiling it takes microseconds.
_LIGHT_SKYBOX = {"@type": "skybox", "@builtin": "gradient", "@rgb1": "0.4 0.6 0.8", "@rgb2": "0 0 0",
                 "@width": "32", "@height": "32"}


def _light_skybox() -> None:
    """Every navigation reset recompiles the model twice, decoding 24 MB of skybox PNGs (~98% of reset
    time); the sky shows only in rendered frames, so ``World.build`` gets a built-in gradient sky instead."""
    import yaml
    from safety_gymnasium import world

    def load(stream: Any, Loader: Any) -> Any:  # called as yaml.load(file, Loader=yaml.FullLoader)
        config = yaml.load(stream, Loader=Loader)
        config["textures"]["skybox"] = dict(_LIGHT_SKYBOX)
        return config

    world.yaml = types.SimpleNamespace(load=load, FullLoader=yaml.FullLoader)


@functools.cache
def import_safety_gymnasium() -> types.ModuleType:
    """Import Safety-Gymnasium with the fixes applied (once per process)."""
    _alias_moved_gymnasium_wrappers()
    _accept_array_joint_ids()
    with _array_defaults_as_factories():
        module = importlib.import_module("safety_gymnasium")
        importlib.import_module("safety_gymnasium.builder")  # imports every task, agent and asset dataclass
    _control_cost_in_float64()
    _light_skybox()
    return module


def make_safety_gymnasium_env(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """Create a Safety-Gymnasium env (e.g. ``SafetyPointGoal1-v0``) with the gymnasium 1.x 5-tuple step API
    and the step cost in ``info["cost"]``. No time limit is applied.

    ``safety_gymnasium.make`` reads ``EnvSpec`` fields that gymnasium 1.x removed (``autoreset``,
    ``apply_api_compatibility``), so the registered entry point is instantiated directly.
    """
    import_safety_gymnasium()
    from safety_gymnasium.utils.registration import safe_registry
    from safety_gymnasium.wrappers.gymnasium_conversion import SafetyGymnasium2Gymnasium

    if env_id not in safe_registry:
        raise ValueError(f"{env_id!r} is not a Safety-Gymnasium env id (e.g. 'SafetyPointGoal1-v0')")
    spec = gymnasium.spec(env_id)
    creator = gymnasium.envs.registration.load_env_creator(spec.entry_point)
    return SafetyGymnasium2Gymnasium(creator(**{**spec.kwargs, **kwargs}))
