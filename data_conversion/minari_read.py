"""Minari → the project's Parquet rows: each episode's checks and columns, and the conversion behind
``python -m data_conversion.minari_to_parquet`` (see there for the rules)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import minari
import numpy as np
import pyarrow as pa

from data_conversion.dsrl_to_parquet import (
    PART_ROWS,
    ConversionError,
    ConversionSummary,
    action_bounds,
    normalize_actions,
    rows_metadata,
    write_metadata,
)
from data_conversion.minari_format import COST_KEY, check_spaces, data_sha256, declared_fields, open_dataset
from rllib_caps.data.schema import COLUMNS, DATA_DIR, arrow_table, write_parquet_parts
from rllib_caps.data.values import column_problem, size_problem
from rllib_caps.envs.tasks import TaskSpec
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_directory
from rllib_caps.utils.checks import check_output

COMMAND = "data_conversion.minari_to_parquet"  # names its outputs in their output marker
TOOL_VERSION = "1"  # bump when the output of the same input changes
TABLE_ROWS = 131072  # rows per Arrow table handed to the Parquet writer


@dataclass
class _Written:
    """The scalar columns of the rows written so far, in order, and what was changed on the way."""

    rewards: list[np.ndarray] = field(default_factory=list)
    costs: list[np.ndarray] = field(default_factory=list)
    terminateds: list[np.ndarray] = field(default_factory=list)
    truncateds: list[np.ndarray] = field(default_factory=list)
    actions_clipped: int = 0
    unflagged_ends: int = 0  # episodes with neither flag at their last step, kept as truncated


def _flags(episode: minari.EpisodeData, where: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(terminateds, truncateds, unflagged)`` of `episode`: a termination wins over a truncation, and an episode
    with neither flag at its last step is truncated there (``unflagged``); a flag before the last step is an error."""
    n = len(episode)
    flags = []
    for key in ("terminations", "truncations"):
        values = np.asarray(getattr(episode, key))
        if values.shape != (n,) or not np.isin(values, (0, 1)).all():
            raise ConversionError(f"{where}: {key} must be {n} flags of 0/1, got shape {values.shape}")
        flags.append(values.astype(np.bool_))
    terminated, truncated = flags
    ends = np.flatnonzero(terminated | truncated)
    if len(ends) and ends[0] < n - 1:
        raise ConversionError(f"{where}: ends at step {ends[0]} (terminations/truncations) before its last step "
                              f"{n - 1}")
    truncated &= ~terminated
    unflagged = not (terminated[-1] or truncated[-1])
    truncated[-1] |= unflagged
    return terminated, truncated, unflagged


def _episode_columns(episode: minari.EpisodeData, eps_id: int, task: TaskSpec, cost_key: str,
                     bounds: tuple[np.ndarray, np.ndarray], source: str, written: _Written) -> dict[str, np.ndarray]:
    """`episode` as Parquet columns (``rllib_caps.data.schema``), after its checks; adds its scalars to `written`."""
    where = f"{source}: episode {episode.id}"
    n = len(episode)
    if n == 0:
        raise ConversionError(f"{where}: has no steps")
    infos = episode.infos or {}  # None when the dataset recorded no infos
    if cost_key not in infos:
        raise ConversionError(f"{where}: no infos[{cost_key!r}] (its infos: {sorted(infos)}); name the cost's key "
                              "with --cost-key")
    cost = np.asarray(infos[cost_key])
    if cost.shape not in ((n + 1,), (n + 1, 1)):
        raise ConversionError(f"{where}: infos[{cost_key!r}] has shape {cost.shape}, expected ({n + 1},): the "
                              "reset's entry, then one per step")
    values = {"observations": np.asarray(episode.observations), "actions": np.asarray(episode.actions),
              "rewards": np.asarray(episode.rewards), f"infos[{cost_key!r}]": cost.reshape(n + 1)[1:]}
    for (key, array), shape in zip(values.items(), ((n + 1, task.obs_dim), (n, task.act_dim), (n,), (n,)),
                                   strict=True):
        if array.shape != shape:
            raise ConversionError(f"{where}: {key} has shape {array.shape}, expected {shape}")
        problem = column_problem(array, cost=key.startswith("infos"))
        if problem:
            raise ConversionError(f"{where}: {key}: {problem}")
    observations, actions, rewards, costs = (array.astype(np.float32) for array in values.values())
    terminated, truncated, unflagged = _flags(episode, where)
    low, high = bounds
    written.actions_clipped += int(((actions < low) | (actions > high)).sum())
    written.unflagged_ends += unflagged
    for name, column in (("rewards", rewards), ("costs", costs), ("terminateds", terminated),
                         ("truncateds", truncated)):
        getattr(written, name).append(column)
    return {"obs": observations[:-1], "actions": normalize_actions(actions, low, high), "rewards": rewards,
            "costs": costs, "new_obs": observations[1:], "terminateds": terminated, "truncateds": truncated,
            "eps_id": np.full(n, eps_id, np.int64), "t": np.arange(n, dtype=np.int64)}


def _tables(dataset: minari.MinariDataset, task: TaskSpec, cost_key: str, bounds: tuple[np.ndarray, np.ndarray],
            source: str, written: _Written) -> Iterator[pa.Table]:
    """The dataset's episodes, in order and numbered from 0, as Arrow tables of about `TABLE_ROWS` rows."""
    pending: list[dict[str, np.ndarray]] = []
    rows = 0
    for eps_id, episode in enumerate(dataset.iterate_episodes()):
        pending.append(_episode_columns(episode, eps_id, task, cost_key, bounds, source, written))
        rows += len(pending[-1]["t"])
        if rows >= TABLE_ROWS:
            yield arrow_table({name: np.concatenate([c[name] for c in pending]) for name in COLUMNS})
            pending, rows = [], 0
    if pending:
        yield arrow_table({name: np.concatenate([c[name] for c in pending]) for name in COLUMNS})


def convert_minari(source: str, out_dir: str | Path, *, task: TaskSpec | None = None, cost_key: str | None = None,
                   force: bool = False, strict: bool = False, download: bool = False,
                   part_rows: int | None = None) -> ConversionSummary:
    """Convert the Minari dataset `source` (a path, or an id under Minari's root; fetched first with `download`) into
    `out_dir`, for `task` (default: the task its metadata declares). Raises ``DatasetError`` with a one-line message;
    on any error nothing is left under `out_dir`'s parent."""
    dataset = open_dataset(source, download=download)
    declared = declared_fields(dataset)
    if task is None:
        if "task" not in declared:
            raise ConversionError(f"{source}: its metadata declares no task; name one with --task (and --task-file "
                                  "for a task that is not DSRL's)")
        task = TaskSpec.from_dict(declared["task"])
    cost_key = cost_key or declared.get("cost_key") or COST_KEY
    check_spaces(dataset, task, source)
    bounds = action_bounds(task)
    out_dir = Path(out_dir)
    try:
        check_output(out_dir, "--out", {"--dataset": dataset.storage.data_path})
        with atomic_directory(out_dir, force=force, command=COMMAND) as tmp:
            written = _Written()
            files = write_parquet_parts(_tables(dataset, task, cost_key, bounds, source, written), tmp / DATA_DIR,
                                        part_rows or PART_ROWS)
            rewards, costs, terminateds, truncateds = (np.concatenate(getattr(written, name)) for name in
                                                       ("rewards", "costs", "terminateds", "truncateds"))
            problem = size_problem(len(rewards))
            if problem:
                raise ConversionError(f"{source}: {problem}")
            metadata = {
                "tool": COMMAND,
                "tool_version": TOOL_VERSION,
                "task_spec": task.to_dict(),  # a declared task's, with the dataset's ranges, comes from rows_metadata
                "source": {"file": dataset.id, "sha256": data_sha256(dataset), "rows": int(dataset.total_steps),
                           "episodes": int(dataset.total_episodes), "cost_key": cost_key},
                **rows_metadata(task, rewards, costs, terminateds, truncateds, written.actions_clipped),
                "trailing_partial_episode_kept_as_truncated": False,
                "episodes_ended_without_flag_kept_as_truncated": written.unflagged_ends,
                "dsrl_filter": None,
            }
            warnings = write_metadata(tmp, task, metadata, files, strict=strict, source=source)
    except (OutputExistsError, OutputNotWritableError) as err:
        raise ConversionError(str(err)) from err
    return ConversionSummary(out_dir, metadata["rows"], metadata["episodes"], files, metadata, tuple(warnings))
