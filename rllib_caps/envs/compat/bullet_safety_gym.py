"""Run Bullet-Safety-Gym 1.4.0 reproducibly, and wherever ``sys.stdout``/``sys.stderr`` are replaced.

The simulator itself runs unchanged under gymnasium 1.x; its output redirection and its seeding need help.
"""

from __future__ import annotations

import contextlib
import importlib
import random
import sys
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import seeding


@contextlib.contextmanager
def _real_std_streams() -> Iterator[None]:
    """Bullet-Safety-Gym hides pybullet's C-level output by redirecting the file descriptor behind
    ``sys.stdout``/``sys.stderr``, found via ``.fileno()`` and a libc symbol named after ``.name``; replaced
    streams (pytest's capture, Jupyter, StringIO) have neither, so it gets the process's real streams."""
    replaced = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        yield
    finally:
        sys.stdout, sys.stderr = replaced


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
    with _real_std_streams():
        importlib.import_module("bullet_safety_gym")  # registers the Safety*-v0 ids with gymnasium
        spec = gymnasium.spec(env_id)
        creator = gymnasium.envs.registration.load_env_creator(spec.entry_point)  # imports the builder
        return BulletSeeding(creator(**{**spec.kwargs, **kwargs}))
