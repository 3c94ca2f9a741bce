"""Run Bullet-Safety-Gym 1.4.0 reproducibly, and wherever ``sys.stdout``/``sys.stderr`` are replaced.

The simulator itself runs unchanged under gymnasium 1.x; two things around it need fixing.
"""

from __future__ import annotations

import ctypes
import importlib
import random
import sys
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import seeding


def _import_builder_with_real_stderr() -> None:
    """At import, bullet_safety_gym looks up a libc symbol named after ``sys.stderr.name`` to hide pybullet's
    banner; under pytest's capture or Jupyter that name is no libc symbol, so import with the real stderr."""
    if "bullet_safety_gym.envs.builder" in sys.modules:
        return
    replaced, sys.stderr = sys.stderr, sys.__stderr__
    try:
        importlib.import_module("bullet_safety_gym")  # registers the Safety*-v0 ids with gymnasium
        importlib.import_module("bullet_safety_gym.envs.builder")
    finally:
        sys.stderr = replaced


def _flush_c_streams_by_null() -> None:
    """Each env creation repeats that symbol lookup for ``sys.stdout``; ``fflush(NULL)`` flushes every C
    stream without naming one."""
    from bullet_safety_gym.envs.builder import RedirectStream

    libc = ctypes.CDLL(None)
    RedirectStream._flush_c_stream = staticmethod(lambda stream: libc.fflush(None))


class BulletSeeding(gymnasium.Wrapper):
    """Makes ``reset(seed=s)`` reproducible: Bullet-Safety-Gym ignores the seed and draws from the global
    ``random`` and ``numpy.random`` generators, so seed those and the env's own generator."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed)
            self.env.unwrapped.np_random = seeding.np_random(seed)[0]
        return self.env.reset(seed=seed, options=options)


def make_bullet_safety_gym_env(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """Create a Bullet-Safety-Gym env (e.g. ``SafetyBallCircle-v0``), seedable at reset, without a time
    limit or gymnasium.make's checker wrappers. The step cost is in ``info["cost"]``."""
    _import_builder_with_real_stderr()
    _flush_c_streams_by_null()
    spec = gymnasium.spec(env_id)
    creator = gymnasium.envs.registration.load_env_creator(spec.entry_point)
    return BulletSeeding(creator(**{**spec.kwargs, **kwargs}))
