"""Registry of the 38 DSRL tasks: ids, simulator ids, sizes, episode lengths, cost thresholds and the
reward/cost ranges used for normalised scores.

Episode lengths and reward/cost ranges are read from ``dsrl.infos``; sizes and action bounds are a
literal table that ``tests/test_envs.py`` checks against the real simulators.

``python -m rllib_caps.tasks`` prints the registry.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllib_caps.envs.compat.dsrl import load_infos

SUITES: tuple[str, ...] = ("bullet", "safetygym", "velocity", "metadrive")

# Cost thresholds (kappa) used by the paper: {10, 20, 40} for Bullet and MetaDrive, {20, 40, 80} otherwise.
SUITE_THRESHOLDS: dict[str, tuple[int, int, int]] = {
    "bullet": (10, 20, 40),
    "safetygym": (20, 40, 80),
    "velocity": (20, 40, 80),
    "metadrive": (10, 20, 40),
}


# The suite of a task declared by a user (``register_task``, ``--task-file``) rather than taken from DSRL.
CUSTOM_SUITE = "custom"

# Where a task's reward and cost ranges come from: DSRL's table, the user's declaration, or the dataset's episode
# returns (as DSRL derives its own); None: not known yet, so no score may be called normalised.
RANGE_SOURCES: tuple[str, ...] = ("dsrl", "declared", "dataset")


@dataclass(frozen=True)
class TaskSpec:
    """One task: its environment, episode length, cost thresholds and normalisation ranges.

    The 38 DSRL tasks are 38 specs (``TASKS``); a user declares more with ``register_task`` or a YAML task file
    (``load_task_file``). A DSRL task's env is its suite's simulator; a custom task's env is ``entry_point``
    (``"module:callable"``) or, without one, the gymnasium id ``env_id``, created with ``env_kwargs``.
    """

    id: str  # DSRL id, e.g. "OfflineBallCircle-v0"; a custom task's own id (its name by default)
    name: str  # short name, e.g. "BallCircle", "PointGoal1", "easysparse"
    suite: str  # one of SUITES, or CUSTOM_SUITE
    env_id: str  # simulator or gymnasium id, e.g. "SafetyBallCircle-v0"
    obs_dim: int
    act_dim: int
    action_low: tuple[float, ...]  # simulator action bounds
    action_high: tuple[float, ...]
    max_episode_steps: int
    thresholds: tuple[float, ...]
    max_reward: float | None
    min_reward: float | None
    max_cost: float | None
    min_cost: float | None
    range_source: str | None = "dsrl"  # one of RANGE_SOURCES; None while the ranges are unknown
    entry_point: str | None = None  # "module:callable" making a custom task's env; None: gymnasium.make(env_id)
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def has_reward_range(self) -> bool:
        """Whether scores of this task may be called normalised: its reward range is known and recorded."""
        return self.range_source is not None and self.min_reward is not None and self.max_reward is not None

    def to_dict(self) -> dict:
        """All fields as JSON-friendly values (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> TaskSpec:
        """The spec that ``to_dict`` wrote (lists become tuples again)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) and k != "env_kwargs" else v
                      for k, v in fields.items() if k in names})


# (suite, short name) -> (obs_dim, act_dim); every simulator action space here is the box [-1, 1]^act_dim.
_SIZES: dict[tuple[str, str], tuple[int, int]] = {
    **{
        ("bullet", f"{agent}{task}"): (obs + (task == "Circle"), act)
        for agent, obs, act in (("Ball", 7, 2), ("Car", 7, 2), ("Drone", 17, 4), ("Ant", 33, 8))
        for task in ("Run", "Circle")
    },
    **{
        ("safetygym", f"{agent}{task}{level}"): (obs + extra, 2)
        for agent, extra in (("Point", 0), ("Car", 12))
        for task, obs in (("Button", 76), ("Goal", 60), ("Push", 76), ("Circle", 28))
        for level in (1, 2)
    },
    **{
        ("velocity", f"{agent}Velocity"): (obs, act)
        for agent, obs, act in (
            ("Ant", 27, 8),
            ("HalfCheetah", 17, 6),
            ("Hopper", 11, 3),
            ("Swimmer", 8, 2),
            ("Walker2d", 17, 6),
        )
    },
    **{
        ("metadrive", f"{road}{traffic}"): (259, 2)
        for road in ("easy", "medium", "hard")
        for traffic in ("sparse", "mean", "dense")
    },
}


def _ids(suite: str, name: str) -> tuple[str, str]:
    """(DSRL id, simulator id) of a task."""
    if suite == "bullet":
        return f"Offline{name}-v0", f"Safety{name}-v0"
    if suite == "safetygym":
        return f"Offline{name}Gymnasium-v0", f"Safety{name}-v0"
    if suite == "velocity":
        return f"Offline{name}Gymnasium-v1", f"Safety{name}-v1"
    return f"OfflineMetadrive-{name}-v0", f"SafeMetaDrive-{name}-v0"


def _build_registry() -> dict[str, TaskSpec]:
    infos = load_infos()
    tasks = {}
    for (suite, name), (obs_dim, act_dim) in _SIZES.items():
        dsrl_id, env_id = _ids(suite, name)
        tasks[name] = TaskSpec(
            id=dsrl_id,
            name=name,
            suite=suite,
            env_id=env_id,
            obs_dim=obs_dim,
            act_dim=act_dim,
            action_low=(-1.0,) * act_dim,
            action_high=(1.0,) * act_dim,
            max_episode_steps=int(infos.DEFAULT_MAX_EPISODE_STEPS[name]),
            thresholds=SUITE_THRESHOLDS[suite],
            max_reward=float(infos.MAX_EPISODE_REWARD[name]),
            min_reward=float(infos.MIN_EPISODE_REWARD[name]),
            max_cost=float(infos.MAX_EPISODE_COST[name]),
            min_cost=float(infos.MIN_EPISODE_COST[name]),
        )
    return tasks


TASKS: dict[str, TaskSpec] = _build_registry()

_BY_KEY: dict[str, TaskSpec] = {
    key.lower(): spec for spec in TASKS.values() for key in (spec.name, spec.id)
}


def _unknown(word: str, what: str) -> ValueError:
    """A ValueError naming the closest valid spellings of ``word``."""
    valid = ["all", *SUITES, *TASKS, *(spec.id for spec in TASKS.values())]
    by_lower = {v.lower(): v for v in valid}
    close = [by_lower[c] for c in difflib.get_close_matches(word.lower(), list(by_lower), n=5, cutoff=0.5)]
    hint = f"closest valid names: {', '.join(close)}" if close else f"suites: {', '.join(SUITES)}"
    return ValueError(
        f"unknown {what} {word!r}; {hint} (run `python -m rllib_caps.tasks` to list all 38 tasks)"
    )


def is_task_name(name_or_id: str) -> bool:
    """Whether ``name_or_id`` names a DSRL task (short name or id, case-insensitive)."""
    return name_or_id.strip().lower() in _BY_KEY


def get_task(name_or_id: str) -> TaskSpec:
    """The task with this short name or DSRL id (case-insensitive)."""
    spec = _BY_KEY.get(name_or_id.strip().lower())
    if spec is None:
        raise _unknown(name_or_id, "task")
    return spec


def select_tasks(selection: str) -> list[TaskSpec]:
    """Tasks named by ``selection``: ``all``, a suite name, or a comma list of those and task names/ids.

    Matching is case-insensitive; duplicates are dropped and the first-seen order is kept.
    """
    words = [w.strip() for w in selection.split(",") if w.strip()]
    if not words:
        raise ValueError(f"empty task selection {selection!r}; use 'all', a suite ({', '.join(SUITES)}) "
                         "or a comma list of task names")
    chosen: dict[str, TaskSpec] = {}
    for word in words:
        key = word.lower()
        if key == "all":
            matches = list(TASKS.values())
        elif key in SUITES:
            matches = [spec for spec in TASKS.values() if spec.suite == key]
        elif key in _BY_KEY:
            matches = [_BY_KEY[key]]
        else:
            raise _unknown(word, "task or suite")
        for spec in matches:
            chosen.setdefault(spec.name, spec)
    return list(chosen.values())


def register_task(spec: TaskSpec) -> TaskSpec:
    """Adds a custom task to the registry, so that every CLI and ``get_task`` finds it by name or id.

    Refuses a spec whose name or id is a DSRL task's, or another registered task's with other fields.
    """
    raise NotImplementedError  # contract: implemented in the TaskSpec branch


def load_task_file(path: str | Path) -> list[TaskSpec]:
    """Reads a YAML task file (``--task-file``; format in README "Bring your own data") and registers its tasks.

    Errors name the file and the key at fault.
    """
    raise NotImplementedError  # contract: implemented in the TaskSpec branch
