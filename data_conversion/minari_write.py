"""The project's rows → Minari: the checks that make a converted dataset's rows one Minari episode sequence, the
conversion behind ``python -m data_conversion.parquet_to_minari``, and the recording of collected episodes with
Minari's ``DataCollector`` behind ``python -m data_conversion.collect --format minari``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import minari
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from minari.data_collector import EpisodeBuffer

from data_conversion.dsrl_to_parquet import ConversionError, action_bounds, normalize_actions
from data_conversion.minari_format import (
    COST_KEY,
    action_space,
    check_dataset_id,
    cost_collector,
    datasets_root,
    description,
    minari_output,
    observation_space,
    quiet_create,
    safe_rl_metadata,
)
from rllib_caps.data.dataset import column_to_numpy, parquet_files
from rllib_caps.data.schema import (
    ACTIONS,
    COLUMNS,
    COSTS,
    EPS_ID,
    METADATA_FILE,
    NEXT_OBS,
    OBS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
    T,
)
from rllib_caps.data.validation import check_dataset
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import TaskSpec, get_task

COMMAND = "data_conversion.parquet_to_minari"  # names its outputs in their output marker


@dataclass(frozen=True)
class MinariSummary:
    """What `export_minari` wrote."""

    dataset_id: str
    path: Path
    episodes: int
    steps: int
    warnings: tuple[str, ...] = ()


def episode_starts(columns: Mapping[str, np.ndarray], source: str | Path) -> np.ndarray:
    """The first row of each episode of a converted dataset's `columns`, after checking that they are one Minari
    episode sequence: ``eps_id`` never decreases, ``t`` counts 0, 1, ... within each episode, each episode's last row
    and only that one has ``terminateds`` or ``truncateds``, and each ``new_obs`` within an episode is the next row's
    ``obs`` (bit for bit). Raises ``ConversionError`` naming the column and row."""
    eps_id, n = columns[EPS_ID], len(columns[EPS_ID])
    down = np.flatnonzero(np.diff(eps_id) < 0)
    if len(down):
        row = int(down[0]) + 1
        raise ConversionError(f"{source}: column 'eps_id' decreases at row {row} ({eps_id[row - 1]} then "
                              f"{eps_id[row]}): each episode's rows must be contiguous, episodes in increasing id")
    starts = np.flatnonzero(np.r_[True, eps_id[1:] != eps_id[:-1]])
    lengths = np.diff(np.r_[starts, n])
    expected_t = np.arange(n) - np.repeat(starts, lengths)
    bad = np.flatnonzero(columns[T] != expected_t)
    if len(bad):
        row = int(bad[0])
        raise ConversionError(f"{source}: column 't' is {columns[T][row]} at row {row}, expected {expected_t[row]} "
                              "(steps count 0, 1, ... within each episode)")
    last = np.zeros(n, np.bool_)
    last[starts + lengths - 1] = True
    bad = np.flatnonzero((columns[TERMINATEDS] | columns[TRUNCATEDS]) != last)
    if len(bad):
        row = int(bad[0])
        problem = ("is its last and has neither 'terminateds' nor 'truncateds'" if last[row] else
                   "has 'terminateds' or 'truncateds' before its last row")
        raise ConversionError(f"{source}: row {row} of episode {eps_id[row]} {problem}")
    bits = {name: np.ascontiguousarray(columns[name], np.float32).view(np.uint32) for name in (OBS, NEXT_OBS)}
    bad = np.flatnonzero(~last[:-1] & (bits[NEXT_OBS][:-1] != bits[OBS][1:]).any(axis=1))
    if len(bad):
        row = int(bad[0])
        raise ConversionError(f"{source}: column 'new_obs' at row {row} is not 'obs' of row {row + 1} within episode "
                              f"{eps_id[row]}: a Minari episode holds one sequence of observations")
    return starts


def env_actions(actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map actions in [-1, 1] to the env's [low, high] as float32: the inverse of ``normalize_actions``, the formula
    of RLlib's ``unsquash_action``."""
    return (low + (actions.astype(np.float64) + 1.0) * (high - low) / 2.0).astype(np.float32)


def _recorded(data: str | Path) -> tuple[Path, dict]:
    """The ``metadata.json`` path of the converted dataset `data` and its content (empty when there is none)."""
    data_dir = parquet_files(data)
    path = (data_dir.parent if data_dir.is_dir() else data_dir.parent.parent) / METADATA_FILE
    try:
        return path, json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as err:
        raise ConversionError(f"{path}: unreadable ({err})") from err


def _recorded_task(path: Path, recorded: Mapping) -> TaskSpec:
    """The task that a converted dataset's ``metadata.json`` records: its spec, else the registered task it names."""
    if "task_spec" in recorded:
        return TaskSpec.from_dict(recorded["task_spec"])
    if "task" not in recorded:
        raise ConversionError(f"{path}: missing, or names no task; name the task with --task (and --task-file for a "
                              "task that is not DSRL's)")
    try:
        return get_task(recorded["task"])
    except ValueError as err:
        raise ConversionError(f"{path}: names task {recorded['task']!r}, which is not registered; declare it with "
                              f"--task-file ({err})") from err


def _read_columns(data_dir: Path) -> dict[str, np.ndarray]:
    files = sorted(data_dir.glob("*.parquet")) if data_dir.is_dir() else [data_dir]
    table = pa.concat_tables([pq.read_table(f, columns=list(COLUMNS)) for f in files])
    return {name: column_to_numpy(table, name, data_dir) for name in COLUMNS}


def export_minari(data: str | Path, dataset_id: str, *, task: TaskSpec | None = None, force: bool = False,
                  verify: bool = True, data_format: str | None = None,
                  **minari_metadata: str | None) -> MinariSummary:
    """Write the converted dataset `data` as the Minari dataset `dataset_id` under Minari's root (see
    ``data_conversion.minari_format``), for `task` (default: the task its ``metadata.json`` records), after
    ``check_dataset`` (checksums skipped without `verify`) and `episode_starts`. `minari_metadata` (``author``,
    ``author_email``, ``code_permalink``, ``algorithm_name``, ``description``) go to Minari's creator. Raises
    ``DatasetError`` with a one-line message; on any error nothing is written."""
    check_dataset_id(dataset_id, "--dataset-id")
    metadata_path, recorded = _recorded(data)
    task = task or _recorded_task(metadata_path, recorded)
    data_dir = check_dataset(data, task=task.name, obs_dim=task.obs_dim, act_dim=task.act_dim, verify=verify)
    columns = _read_columns(data_dir)
    starts = episode_starts(columns, data_dir)
    low, high = action_bounds(task)
    actions = env_actions(columns[ACTIONS], low, high)
    inexact = int((normalize_actions(actions, low, high).view(np.uint32) != columns[ACTIONS].view(np.uint32)).sum())
    warnings = (f"{inexact} action entries do not map back to the same float32 from the task's bounds "
                f"{task.action_low}..{task.action_high}: a round trip changes them by a rounding",) if inexact else ()
    ends = np.r_[starts[1:], len(actions)]
    buffers = [EpisodeBuffer(observations=np.concatenate([columns[OBS][start:end], columns[NEXT_OBS][end - 1:end]]),
                             actions=actions[start:end], rewards=columns[REWARDS][start:end],
                             terminations=columns[TERMINATEDS][start:end], truncations=columns[TRUNCATEDS][start:end],
                             infos={COST_KEY: [0.0, *columns[COSTS][start:end].tolist()]})
               for start, end in zip(starts, ends, strict=True)]
    source = recorded.get("source", {}).get("file", data)
    minari_metadata["description"] = minari_metadata.get("description") or description(
        task, f"{len(starts)} episodes converted by rllib-caps from {source}")
    with minari_output(dataset_id, command=COMMAND, force=force):
        dataset = quiet_create(minari.create_dataset_from_buffers, dataset_id, buffers,
                               observation_space=observation_space(task), action_space=action_space(task),
                               data_format=data_format, **minari_metadata)
        dataset.storage.update_metadata(safe_rl_metadata(task, converted_from={
            "tool": recorded.get("tool"), "source": recorded.get("source"), "files": recorded.get("files")}))
    return MinariSummary(dataset_id, datasets_root() / dataset_id, len(starts), len(actions), warnings)


def record_replays(task: TaskSpec, episodes: Sequence[tuple[int, Mapping[str, np.ndarray]]], dataset_id: str,
                   **minari_metadata: str | None) -> minari.MinariDataset:
    """Record `episodes` (each its reset seed and DSRL arrays, as ``collect`` rolled it out) with Minari's
    ``DataCollector``, as `dataset_id` under the current Minari root: each is replayed, its seed and actions, in a
    fresh env of `task`, and every replayed step must give the rollout's next observation, reward, cost and flags
    bit for bit (a ``ConversionError`` otherwise: the simulator is not deterministic under ``reset(seed)``)."""
    env = cost_collector(make_env(task))
    try:
        for k, (seed, arrays) in enumerate(episodes):
            env.reset(seed=seed)
            for step, action in enumerate(arrays["actions"]):
                next_obs, reward, terminated, truncated, info = env.step(action)
                replayed = {"next_observations": next_obs, "rewards": reward, "costs": info[COST_KEY],
                            "terminals": terminated, "timeouts": truncated and not terminated}
                differ = [key for key, value in replayed.items() if not np.array_equal(value, arrays[key][step])]
                if differ:
                    raise ConversionError(f"{task.name}: the replay of collected episode {k} (reset seed {seed}) "
                                          f"differs in {', '.join(differ)} at step {step}: the simulator is not "
                                          "deterministic under reset(seed); collect with --format hdf5 instead")
        minari_metadata["description"] = minari_metadata.get("description") or description(
            task, f"{len(episodes)} episodes recorded with Minari's DataCollector by rllib-caps' collector")
        dataset = quiet_create(env.create_dataset, dataset_id, **minari_metadata)
        dataset.storage.update_metadata(safe_rl_metadata(task))
        return dataset
    finally:
        env.close()
