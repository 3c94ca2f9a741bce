"""Minari, Farama's offline-RL dataset format, as this project reads and writes it (Minari's public API only).

A safe-RL Minari dataset is a plain Minari dataset with two conventions:

- the step cost is in ``infos["cost"]`` (where Safety-Gymnasium puts it), one entry per observation: entry 0 is the
  reset's (0.0), entry ``i + 1`` the cost of step ``i``, as ``DataCollector`` records infos;
- its metadata holds, under ``safe_rl``, the task spec (``TaskSpec.to_dict``), the cost key, the cost thresholds and
  the reward and cost ranges with their source; Minari's own ``ref_min_score``/``ref_max_score`` are the reward
  range, so ``minari.get_normalized_score`` gives DSRL's normalised reward.

Observations are float32 boxes of the task's size, actions the env's action box (the Parquet's actions are mapped to
[-1, 1]). Minari writes under ``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``); `minari_output` has it
write into a scratch root and moves the finished dataset into place, so that nothing is left half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium
import minari
import minari.namespace
import numpy as np
from minari.dataset.minari_dataset import parse_dataset_id

from data_conversion.dsrl_to_parquet import ConversionError
from rllib_caps.envs.tasks import TaskSpec, get_task, load_task_file
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_directory
from rllib_caps.utils.checksum import file_sha256

COST_KEY = "cost"  # infos key of the step cost, unless a dataset's metadata or --cost-key names another
METADATA_KEY = "safe_rl"  # the Minari metadata key of this project's fields
ROOT_VARIABLE = "MINARI_DATASETS_PATH"  # Minari's root for local datasets
DEFAULT_ROOT = Path("~/.minari/datasets")  # Minari's root when the variable is unset
SCRATCH = ".minari-scratch"  # inside an output's temporary directory: the root Minari writes into


def datasets_root() -> Path:
    """Where Minari keeps local datasets: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT).expanduser()


def check_dataset_id(dataset_id: str, flag: str) -> None:
    """Raises ``ConversionError`` naming `flag` unless `dataset_id` is a valid Minari id (``namespace/name-vN``)."""
    try:
        parse_dataset_id(dataset_id)
    except ValueError as err:
        raise ConversionError(f"{flag} {dataset_id!r}: {err}") from err


def observation_space(task: TaskSpec) -> gymnasium.spaces.Box:
    """The float32 observation box of `task`'s size (unbounded: a task declares no observation bounds)."""
    return gymnasium.spaces.Box(-np.inf, np.inf, (task.obs_dim,), np.float32)


def action_space(task: TaskSpec) -> gymnasium.spaces.Box:
    """`task`'s env action box, float32."""
    return gymnasium.spaces.Box(np.asarray(task.action_low, np.float32), np.asarray(task.action_high, np.float32),
                                (task.act_dim,), np.float32)


def check_spaces(dataset: minari.MinariDataset, task: TaskSpec, source: str) -> None:
    """Raises ``ConversionError`` unless `dataset`'s observation and action spaces are boxes of `task`'s sizes and its
    action bounds are the task's."""
    obs, act = dataset.observation_space, dataset.action_space
    if not isinstance(obs, gymnasium.spaces.Box) or obs.shape != (task.obs_dim,):
        raise ConversionError(f"{source}: observation_space {obs} does not match task {task.name}'s "
                              f"{task.obs_dim}-dim observations")
    want = action_space(task)
    if not isinstance(act, gymnasium.spaces.Box) or act.shape != want.shape or not (
            np.array_equal(act.low.astype(np.float32), want.low) and np.array_equal(act.high.astype(np.float32),
                                                                                      want.high)):
        raise ConversionError(f"{source}: action_space {act} does not match task {task.name}'s {want}")


def safe_rl_metadata(task: TaskSpec, cost_key: str = COST_KEY, **extra: Any) -> dict[str, Any]:
    """The Minari metadata this project adds: ``safe_rl`` (task spec, cost key, thresholds, ranges and `extra`) and,
    where the reward range is known, Minari's reference scores."""
    def known(low: float | None, high: float | None) -> list[float] | None:
        return [low, high] if task.range_source is not None and low is not None and high is not None else None

    fields = {
        "cost_key": cost_key,
        "cost_thresholds": list(task.thresholds),
        "reward_range": known(task.min_reward, task.max_reward),
        "cost_range": known(task.min_cost, task.max_cost),
        "range_source": task.range_source,
        "task": task.to_dict(),
        **extra,
    }
    metadata: dict[str, Any] = {METADATA_KEY: fields}
    if fields["reward_range"] is not None:
        metadata["ref_min_score"], metadata["ref_max_score"] = fields["reward_range"]
    return metadata


def description(task: TaskSpec, origin: str) -> str:
    """A Minari description of a dataset of `task` that `origin` tells the making of."""
    return (f"{task.id}: {origin}; the step cost is in infos['{COST_KEY}'], the task, its cost thresholds and "
            f"normalisation ranges in the metadata's '{METADATA_KEY}'")


def declared_fields(dataset: minari.MinariDataset) -> Mapping[str, Any]:
    """The ``safe_rl`` fields of `dataset`'s metadata (empty for a dataset that another tool wrote)."""
    return dataset.storage.metadata.get(METADATA_KEY) or {}


class CostInfo(minari.StepDataCallback):
    """Records only ``infos["cost"]`` (as a float), with 0.0 at a reset, whose info has no cost: Minari needs the
    same info keys at every step of an episode, and other info keys vary between simulators. Actions are recorded
    in the action space's dtype (a float64 policy output as float32, as the DSRL files hold them)."""

    def __call__(self, env: gymnasium.Env, **kwargs: Any) -> dict[str, Any]:
        step_data = super().__call__(env, **kwargs)
        if kwargs.get("action") is None:  # a reset
            step_data["info"] = {COST_KEY: 0.0}
        else:
            step_data["info"] = {COST_KEY: float(step_data["info"][COST_KEY])}
            step_data["action"] = np.asarray(step_data["action"], env.action_space.dtype)
        return step_data


def cost_collector(env: gymnasium.Env) -> minari.DataCollector:
    """Minari's ``DataCollector`` around `env`, recording the step cost in ``infos["cost"]``."""
    return minari.DataCollector(env, step_data_callback=CostInfo, record_infos=True)


@contextlib.contextmanager
def _datasets_path(root: Path) -> Iterator[None]:
    """Points Minari at `root` for the block (Minari reads the variable whenever it resolves a dataset's path)."""
    previous = os.environ.get(ROOT_VARIABLE)
    os.environ[ROOT_VARIABLE] = str(root)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ROOT_VARIABLE, None)
        else:
            os.environ[ROOT_VARIABLE] = previous


@contextlib.contextmanager
def minari_output(dataset_id: str, *, command: str, force: bool = False) -> Iterator[Path]:
    """Yields a scratch Minari root, set as ``$MINARI_DATASETS_PATH`` for the block, where the block creates
    `dataset_id` with Minari's API. On success the dataset becomes ``datasets_root() / dataset_id`` atomically
    (``atomic_directory``: an existing one is replaced only with `force` and only if `command` wrote it), and the
    namespaces Minari made for it are made in the real root. Raises ``ConversionError`` when the output is taken."""
    check_dataset_id(dataset_id, "--dataset-id")
    try:
        with atomic_directory(datasets_root() / dataset_id, command=command, force=force) as tmp:
            scratch = tmp / SCRATCH
            scratch.mkdir()
            with _datasets_path(scratch):
                yield scratch
                namespaces = minari.namespace.list_local_namespaces()
            (scratch / dataset_id / "data").rename(tmp / "data")
            shutil.rmtree(scratch)
    except (OutputExistsError, OutputNotWritableError) as err:
        raise ConversionError(str(err)) from err
    existing = minari.namespace.list_local_namespaces()
    for namespace in namespaces:
        if namespace not in existing:
            minari.namespace.create_namespace(namespace)


def quiet_create(create: Any, *args: Any, **kwargs: Any) -> minari.MinariDataset:
    """``create(*args, **kwargs)`` (a Minari dataset creator) without Minari's warnings about metadata left out:
    the converters fill in what they know, and the user adds the rest (``--author`` etc.) before sharing."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(is set to None|env_spec is None)", category=UserWarning)
        return create(*args, **kwargs)


def open_dataset(source: str, *, download: bool = False) -> minari.MinariDataset:
    """The Minari dataset at path `source` (its directory or its ``data/``), or with id `source` under
    `datasets_root` (fetched from Minari's remote first with `download`); ``ConversionError`` otherwise."""
    path = Path(source)
    if path.exists():
        data = path / "data" if (path / "data").is_dir() else path
        try:
            return minari.MinariDataset(data)
        except (ValueError, OSError, KeyError, AssertionError) as err:
            raise ConversionError(f"{path}: not a readable Minari dataset ({err})") from err
    try:
        return minari.load_dataset(source, download=download)
    except FileNotFoundError as err:
        raise ConversionError(f"{source}: no such path, nor a Minari dataset with this id under {datasets_root()} "
                              f"(${ROOT_VARIABLE}); pass --download to fetch it from Minari's remote") from err
    except Exception as err:  # the remote's client raises its own errors (network, authorisation, not found)
        raise ConversionError(f"{source}: cannot download it from Minari's remote ({err})") from err


def data_sha256(dataset: minari.MinariDataset) -> str:
    """One sha256 over the files of `dataset`'s ``data/`` directory: each one's name and sha256, in name order."""
    data = Path(dataset.storage.data_path)
    digest = hashlib.sha256()
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(data).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def task_from_flags(name: str | None, task_files: Sequence[Path]) -> TaskSpec | None:
    """The task that a Minari converter's ``--task``/``--task-file`` name, or None when neither is given.
    Without ``--task``, the one task that the ``--task-file`` files declare (registered as the flag was parsed)."""
    try:
        declared = [spec for path in task_files for spec in load_task_file(path)]
        if name is not None:
            return get_task(name)
    except (ValueError, OSError) as err:
        raise ConversionError(str(err)) from err
    if len(declared) > 1:
        raise ConversionError(f"--task-file declares {len(declared)} tasks ({', '.join(t.name for t in declared)}); "
                              "name one with --task")
    return declared[0] if declared else None
