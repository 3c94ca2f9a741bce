"""The env of a task declared by a user: ``entry_point`` (``"module:callable"``) or ``gymnasium.make(env_id)``, with
``env_kwargs``, before the time limit. Imports nothing of the package (``tasks`` reads an env's spaces with it,
``make`` wraps it)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import gymnasium


def load_entry_point(entry_point: str) -> Any:
    """The callable that ``"module:callable"`` names (``module.sub:Class`` or ``module:factory``)."""
    module_name, sep, attribute = entry_point.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"entry_point {entry_point!r} is not of the form 'module:callable'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"entry_point {entry_point!r}: cannot import {module_name!r} ({err})") from err
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"entry_point {entry_point!r}: {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"entry_point {entry_point!r} is not callable")
    return target


def construct_env(entry_point: str | None, env_id: str, env_kwargs: Mapping[str, Any], **kwargs: Any
                  ) -> gymnasium.Env:
    """``entry_point(**env_kwargs, **kwargs)``, or without one ``gymnasium.make(env_id, ...)`` unwrapped of any
    time limit of the gymnasium registration (the task's ``max_episode_steps`` is the one applied)."""
    settings = {**dict(env_kwargs), **kwargs}
    if entry_point is not None:
        try:
            env = load_entry_point(entry_point)(**settings)
        except TypeError as err:  # env_kwargs that the callable does not take
            raise ValueError(f"entry_point {entry_point!r} with env_kwargs {settings}: {err}") from err
        if not isinstance(env, gymnasium.Env):
            raise ValueError(f"entry_point {entry_point!r} returned a {type(env).__name__}, not a gymnasium.Env")
        return env
    try:
        return gymnasium.make(env_id, max_episode_steps=-1, disable_env_checker=True, **settings)
    except gymnasium.error.Error as err:
        raise ValueError(f"env_id {env_id!r}: {err}") from err
