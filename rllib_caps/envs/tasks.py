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

# Tasks declared in this process (``register_task``, ``load_task_file``), by name; and each task file read, with the
# names it declares (for the error of a task asked for but not declared).
CUSTOM_TASKS: dict[str, TaskSpec] = {}
_TASK_FILES: dict[str, tuple[str, ...]] = {}


def _unknown(word: str, what: str) -> ValueError:
    """A ValueError naming the closest valid spellings of ``word``, and the task files read and what they declare."""
    valid = ["all", *SUITES, *TASKS, *(spec.id for spec in TASKS.values()), *CUSTOM_TASKS]
    by_lower = {v.lower(): v for v in valid}
    close = [by_lower[c] for c in difflib.get_close_matches(word.lower(), list(by_lower), n=5, cutoff=0.5)]
    hint = f"closest valid names: {', '.join(close)}" if close else f"suites: {', '.join(SUITES)}"
    files = "; ".join(f"{path} declares {', '.join(names) or 'no task'}" for path, names in _TASK_FILES.items())
    declared = f"; not declared in a task file either ({files})" if files else \
        " (declare your own tasks with --task-file, docs/custom_tasks.md)"
    return ValueError(
        f"unknown {what} {word!r}; {hint} (run `python -m rllib_caps.tasks` to list all 38 tasks){declared}"
    )


def is_task_name(name_or_id: str) -> bool:
    """Whether ``name_or_id`` names a DSRL task or a declared one (short name or id, case-insensitive)."""
    return name_or_id.strip().lower() in _BY_KEY


def get_task(name_or_id: str) -> TaskSpec:
    """The DSRL or declared task with this short name or id (case-insensitive)."""
    spec = _BY_KEY.get(name_or_id.strip().lower())
    if spec is None:
        raise _unknown(name_or_id, "task")
    return spec


def select_tasks(selection: str) -> list[TaskSpec]:
    """Tasks named by ``selection``: ``all`` (the DSRL tasks and those declared), a suite name (``custom``: those
    declared), or a comma list of those and task names/ids.

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
            matches = [*TASKS.values(), *CUSTOM_TASKS.values()]
        elif key == CUSTOM_SUITE:
            matches = list(CUSTOM_TASKS.values())
        elif key in SUITES:
            matches = [spec for spec in TASKS.values() if spec.suite == key]
        elif key in _BY_KEY:
            matches = [_BY_KEY[key]]
        else:
            raise _unknown(word, "task or suite")
        for spec in matches:
            chosen.setdefault(spec.name, spec)
    return list(chosen.values())


def with_dataset_ranges(spec: TaskSpec, episode_reward_return: Mapping[str, float],
                        episode_cost_return: Mapping[str, float]) -> TaskSpec:
    """``spec`` itself where its reward range is known; else with the ranges DSRL would derive from this dataset: the
    min and max of its episode returns and episode costs (a converted dataset's ``metadata.json`` holds both),
    recorded as ``range_source="dataset"``."""
    if spec.has_reward_range:
        return spec
    return dataclasses.replace(
        spec, min_reward=float(episode_reward_return["min"]), max_reward=float(episode_reward_return["max"]),
        min_cost=float(episode_cost_return["min"]), max_cost=float(episode_cost_return["max"]),
        range_source="dataset")


def register_task(spec: TaskSpec) -> TaskSpec:
    """Adds a custom task to the registry, so that every CLI and ``get_task`` finds it by name or id.

    Refuses a spec whose name or id is a DSRL task's, or another registered task's with other fields.
    """
    problems = _spec_problems(spec)
    if problems:
        raise ValueError(f"task {spec.name!r}: {problems[0]}")
    for key in {spec.name.lower(), spec.id.lower()}:
        known = _BY_KEY.get(key)
        if known is not None and known.suite != CUSTOM_SUITE:
            raise ValueError(f"task {spec.name!r}: {key!r} is the DSRL task {known.name} ({known.id}); "
                             "give the declared task another name and id")
        if known is not None and known != spec:
            raise ValueError(f"task {spec.name!r}: {key!r} is already declared, with other fields")
    CUSTOM_TASKS[spec.name] = spec
    _BY_KEY.update({spec.name.lower(): spec, spec.id.lower(): spec})
    return spec


def _spec_problems(spec: TaskSpec) -> list[str]:
    """What makes ``spec`` unusable, one phrase each (empty when it is fine)."""
    problems = []
    if spec.suite != CUSTOM_SUITE:
        problems.append(f"a declared task's suite is {CUSTOM_SUITE!r}, not {spec.suite!r}")
    if spec.range_source is not None and spec.range_source not in RANGE_SOURCES:
        problems.append(f"range_source must be one of {RANGE_SOURCES} or None, got {spec.range_source!r}")
    if spec.obs_dim < 1 or spec.act_dim < 1 or spec.max_episode_steps < 1:
        problems.append("obs_dim, act_dim and max_episode_steps must be >= 1")
    if not (len(spec.action_low) == len(spec.action_high) == spec.act_dim):
        problems.append(f"action_low and action_high must have act_dim = {spec.act_dim} entries")
    elif not all(lo < hi for lo, hi in zip(spec.action_low, spec.action_high, strict=True)):
        problems.append("every action_low entry must be below its action_high entry")
    if not spec.thresholds:
        problems.append("thresholds must name at least one cost threshold")
    for kind in ("reward", "cost"):
        low, high = getattr(spec, f"min_{kind}"), getattr(spec, f"max_{kind}")
        if (low is None) != (high is None) or (low is not None and not low < high):
            problems.append(f"the {kind} range must be [min, max] with min < max, got [{low}, {high}]")
    return problems


# A task file's keys: required, and optional with what an absent one means (README: docs/custom_tasks.md).
TASK_FILE_REQUIRED = ("name", "max_episode_steps", "thresholds")
TASK_FILE_OPTIONAL = ("id", "env_id", "entry_point", "env_kwargs", "obs_dim", "act_dim", "action_low", "action_high",
                      "reward_range", "cost_range")


def load_task_file(path: str | Path) -> list[TaskSpec]:
    """Reads a YAML task file (``--task-file``; format in docs/custom_tasks.md) and registers its tasks.

    Errors name the file and the key at fault.
    """
    from rllib_caps.utils.checks import read_yaml

    path = Path(path)
    try:
        data = read_yaml(path)
    except ValueError as err:
        raise ValueError(f"task file {path}: {err}") from err
    if not isinstance(data, dict) or set(data) != {"tasks"} or not isinstance(data["tasks"], list) \
            or not data["tasks"]:
        raise ValueError(f"task file {path}: expected one key, tasks, holding a non-empty list of tasks")
    specs = []
    for index, entry in enumerate(data["tasks"]):
        where = f"{path}: tasks[{index}]"
        try:
            spec = task_from_entry(entry)
        except _EntryKeyError as err:
            raise ValueError(f"{where}.{err.key}: {err.problem}") from err
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from err
        specs.append(spec)
    names = [spec.name for spec in specs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{path}: task {twice[0]!r} is declared twice")
    for spec in specs:
        try:
            register_task(spec)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err
    _TASK_FILES[str(path)] = tuple(names)
    return specs


class _EntryKeyError(ValueError):
    """A task file entry's key at fault, and what is wrong with it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


def task_from_entry(entry: Any) -> TaskSpec:
    """The spec of one task file entry; sizes and action bounds left out are read from the env's spaces."""
    if not isinstance(entry, dict):
        raise ValueError(f"a task is a mapping of keys ({', '.join(TASK_FILE_REQUIRED)}, ...), got {entry!r}")
    unknown = sorted(set(entry) - {*TASK_FILE_REQUIRED, *TASK_FILE_OPTIONAL})
    if unknown:
        raise _EntryKeyError(unknown[0], f"unknown key; a task's keys are {', '.join(TASK_FILE_REQUIRED)} (required) "
                                    f"and {', '.join(TASK_FILE_OPTIONAL)}")
    for key in TASK_FILE_REQUIRED:
        if key not in entry:
            raise _EntryKeyError(key, "missing (required)")
    if "env_id" not in entry and "entry_point" not in entry:
        raise _EntryKeyError("env_id", "missing: give env_id (a gymnasium id) or entry_point ('module:callable')")
    name = _typed(entry, "name", str)
    fields: dict[str, Any] = {
        "name": name, "id": _typed(entry, "id", str, name), "suite": CUSTOM_SUITE,
        "env_id": _typed(entry, "env_id", str, name), "entry_point": _typed(entry, "entry_point", str, None),
        "env_kwargs": _typed(entry, "env_kwargs", dict, {}),
        "max_episode_steps": _positive_int(entry, "max_episode_steps"),
        "thresholds": _numbers(entry, "thresholds"),
    }
    for kind in ("reward", "cost"):
        low, high = _numbers(entry, f"{kind}_range", 2) if f"{kind}_range" in entry else (None, None)
        fields |= {f"min_{kind}": low, f"max_{kind}": high}
    fields["range_source"] = "declared" if "reward_range" in entry or "cost_range" in entry else None
    sizes = {key: entry[key] for key in ("obs_dim", "act_dim", "action_low", "action_high") if key in entry}
    if len(sizes) < 4:
        sizes = {**_env_sizes(fields), **sizes}
    fields["obs_dim"], fields["act_dim"] = _positive_int(sizes, "obs_dim"), _positive_int(sizes, "act_dim")
    for key in ("action_low", "action_high"):
        bound = sizes[key]
        fields[key] = (float(bound),) * fields["act_dim"] if _is_number(bound) else _numbers(sizes, key,
                                                                                             fields["act_dim"])
    return TaskSpec(**fields)


def _env_sizes(fields: Mapping[str, Any]) -> dict[str, Any]:
    """obs_dim, act_dim and the action bounds of the declared env, read off its spaces (1-D boxes)."""
    import gymnasium

    from rllib_caps.envs.custom import construct_env

    env = construct_env(fields["entry_point"], fields["env_id"], fields["env_kwargs"])
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    for key, space in (("obs_dim", obs_space), ("act_dim", act_space)):
        if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
            raise _EntryKeyError(key, f"left out, and the env's space is {space}, not a 1-D Box: declare "
                                 "obs_dim, act_dim, action_low and action_high")
    return {"obs_dim": obs_space.shape[0], "act_dim": act_space.shape[0],
            "action_low": [float(v) for v in act_space.low], "action_high": [float(v) for v in act_space.high]}


def _typed(entry: Mapping[str, Any], key: str, kind: type, *default: Any) -> Any:
    """``entry[key]``, which must be a ``kind``; ``default`` where it is absent (required without one)."""
    if key not in entry and default:
        return default[0]
    value = entry[key]
    if not isinstance(value, kind) or (kind is str and not value.strip()):
        raise _EntryKeyError(key, f"expected a {'non-empty string' if kind is str else kind.__name__}, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive_int(entry: Mapping[str, Any], key: str) -> int:
    value = entry[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _EntryKeyError(key, f"expected a whole number >= 1, got {value!r}")
    return value


def _numbers(entry: Mapping[str, Any], key: str, length: int | None = None) -> tuple[float, ...]:
    """``entry[key]`` as a non-empty list of numbers (of ``length`` entries where given)."""
    value = entry[key]
    if not isinstance(value, list) or not value or not all(_is_number(v) for v in value) \
            or (length is not None and len(value) != length):
        size = f"{length} numbers" if length is not None else "a non-empty list of numbers"
        raise _EntryKeyError(key, f"expected {size}, got {value!r}")
    return tuple(float(v) for v in value)

