"""Convert a DSRL HDF5 dataset into Parquet rows that RLlib's offline data path reads.

Output directory::

    OUT/data/part-00000.parquet ...   columns obs, actions, rewards, costs, new_obs, terminateds,
                                      truncateds, eps_id, t (actions mapped to [-1, 1])
    OUT/metadata.json                 task, source sha256, each Parquet file's sha256, row/episode counts,
                                      return statistics

A DSRL time-out is a truncation (``truncateds``), not a termination, and the true next observation
is kept. The conversion streams the file in chunks, writes into a temporary directory beside OUT and
renames it at the end; the same input gives byte-identical output.

Examples::

    python -m data_conversion.dsrl_to_parquet --task BallCircle --h5 BallCircle.hdf5 --out data/BallCircle
    python -m data_conversion.dsrl_to_parquet --task BallCircle --out data/BallCircle   # dsrl download
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import random
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from data_conversion.dsrl_format import READ_CHUNK_ROWS, DsrlReader, episode_totals
from rllib_caps.data.errors import DatasetError
from rllib_caps.data.schema import (
    COLUMNS,
    CONVERSION_WARNINGS,
    DATA_DIR,
    METADATA_FILE,
    arrow_table,
    write_parquet_parts,
)
from rllib_caps.data.values import size_problem
from rllib_caps.envs.compat.dsrl import load_infos
from rllib_caps.envs.tasks import CUSTOM_SUITE, TaskSpec, get_task, with_dataset_ranges
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_directory
from rllib_caps.utils.checks import check_apart, check_output
from rllib_caps.utils.checksum import file_sha256

COMMAND = "data_conversion.dsrl_to_parquet"  # names converted datasets in their output marker
TOOL_VERSION = "2"  # bump when the output of the same input changes
PART_ROWS = 4 * READ_CHUNK_ROWS  # rows per Parquet part file
DOWNLOAD_TIMEOUT_S = 60.0
FILTER_SEED = 0  # seeds the `random.sample` inside dsrl's density filter


class ConversionError(DatasetError):
    """A conversion cannot proceed (output exists, download failed, bad task or filter)."""


@dataclass(frozen=True)
class DsrlFilter:
    """Arguments of dsrl's ``OfflineEnv.pre_process_data`` that select or alter whole episodes.

    ``density < 1`` thins episodes on a (cost return, reward return) grid with the task's
    ``DENSITY_CFG`` bins; ``outliers_percent`` turns that share of high-cost, high-reward episodes
    into synthetic low-cost outliers and needs ``target_cost``.
    """

    density: float = 1.0
    outliers_percent: float | None = None
    target_cost: float | None = None


@dataclass(frozen=True)
class ConversionSummary:
    """What `convert` wrote."""

    out_dir: Path
    rows: int
    episodes: int
    files: tuple[str, ...]
    metadata: dict
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Selection:
    """Rows to write (in source order) with their rewards, costs and episode structure."""

    keep: np.ndarray  # bool per source row
    rewards: np.ndarray  # float32 per kept row
    costs: np.ndarray
    terminateds: np.ndarray  # bool per kept row
    truncateds: np.ndarray
    eps_id: np.ndarray  # int64 per kept row, 0, 1, ... consecutive
    t: np.ndarray  # int64 step index within the episode
    trailing_partial: bool  # the last episode had no end flag and was kept as truncated


def normalize_actions(actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map env actions in [low, high] to [-1, 1], the inverse of RLlib's ``unsquash_action``.

    Same formula as ``ray.rllib.utils.spaces.space_utils.normalize_action``; values outside the
    bounds are clipped, as ``unsquash_action`` clips what it sends to the env.
    """
    scaled = (actions.astype(np.float64) - low) * 2.0 / (high - low) - 1.0
    return np.clip(scaled, -1.0, 1.0).astype(np.float32)


def episode_index(ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(eps_id, t)`` per row for rows whose episode-end flags are `ends` (the last row ends one)."""
    n = len(ends)
    eps_id = np.zeros(n, dtype=np.int64)
    np.cumsum(ends[:-1], out=eps_id[1:])
    starts = np.flatnonzero(np.r_[True, ends[:-1]])
    return eps_id, np.arange(n, dtype=np.int64) - starts[eps_id]


def _stats(values: np.ndarray) -> dict[str, float]:
    return {
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": float(values.mean()),
        "std": float(values.std()),
    }


def _import_dsrl_offline_env() -> ModuleType:
    """dsrl's ``offline_env`` module; dsrl's package import warns that its simulators fail here."""
    with contextlib.redirect_stderr(io.StringIO()):
        from dsrl import offline_env
    return offline_env


def download_dataset(task: TaskSpec) -> Path:
    """Download `task`'s DSRL file into ``$DSRL_DATASET_DIR`` with dsrl's URL table and helper."""
    url = load_infos().DATASET_URLS[task.name]
    offline_env = _import_dsrl_offline_env()
    target = Path(offline_env.filepath_from_url(url))
    existed = target.exists()
    previous_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        return Path(offline_env.download_dataset_from_url(url))
    except OSError as e:
        if not existed:
            target.unlink(missing_ok=True)
        raise ConversionError(
            f"cannot download {url} into {target.parent} ({getattr(e, 'reason', e)}); without network access "
            "pass a local DSRL file with --h5 PATH, or collect one with python -m data_conversion.collect"
        ) from e
    finally:
        socket.setdefaulttimeout(previous_timeout)


def _dsrl_filter_rows(
    task: TaskSpec, rewards: np.ndarray, costs: np.ndarray, ends: np.ndarray, spec: DsrlFilter
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run dsrl's ``pre_process_data`` on the per-row scalars; return kept rows, rewards, costs.

    Shim: dsrl only needs per-row arrays and ``observations`` for row counts, so the row index is
    passed as ``observations`` and comes back as the kept rows. Its plot is saved into a scratch
    directory (it writes a PNG into the working directory), and its ``random.sample`` is seeded.
    """
    offline_env = _import_dsrl_offline_env()
    env = offline_env.OfflineEnv(
        max_episode_reward=task.max_reward,
        min_episode_reward=task.min_reward,
        max_episode_cost=task.max_cost,
        min_episode_cost=task.min_cost,
    )
    if spec.target_cost is not None:
        env.set_target_cost(spec.target_cost)
    bins: dict[str, int] = {}
    if spec.density != 1.0:
        key = f"{task.id}_density{spec.density}"
        density_cfg = load_infos().DENSITY_CFG
        if key not in density_cfg:
            known = sorted(k.split("_density")[1] for k in density_cfg if k.startswith(f"{task.id}_density"))
            raise ConversionError(f"dsrl has no density filter {key!r}; densities for {task.name}: {known}")
        bins = density_cfg[key]
    data = {
        "observations": np.arange(len(rewards), dtype=np.int64),
        "rewards": rewards,
        "costs": costs,
        "terminals": ends,
        "timeouts": np.zeros_like(ends),
    }
    import matplotlib.pyplot as plt  # dsrl plots the kept episodes

    random_state = random.getstate()
    random.seed(FILTER_SEED)
    try:
        with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
            out = env.pre_process_data(data, outliers_percent=spec.outliers_percent, density=spec.density, **bins)
    except (AssertionError, ValueError) as e:
        raise ConversionError(f"dsrl's pre_process_data failed for {task.name} with {spec}: {e}") from e
    finally:
        random.setstate(random_state)
        plt.close("all")
    order = np.argsort(out["observations"], kind="stable")
    rows, rewards, costs = (out[key][order] for key in ("observations", "rewards", "costs"))
    return rows, rewards.astype(np.float32), costs.astype(np.float32)


def _select(task: TaskSpec, reader: DsrlReader, dsrl_filter: DsrlFilter | None) -> _Selection:
    """Episode structure of the whole file from its scalar columns (one pass, no observations)."""
    rewards, costs = reader.read("rewards"), reader.read("costs")
    terminals, timeouts = reader.read("terminals"), reader.read("timeouts")
    truncated = timeouts & ~terminals
    trailing_partial = not (terminals[-1] or truncated[-1])
    truncated[-1] |= trailing_partial
    keep = np.ones(len(rewards), dtype=bool)
    if dsrl_filter is not None:
        rows, rewards, costs = _dsrl_filter_rows(task, rewards, costs, terminals | truncated, dsrl_filter)
        if len(rows) == 0:
            raise ConversionError(f"dsrl's filter {dsrl_filter} kept no episodes of {reader.path}")
        keep[:] = False
        keep[rows] = True
        trailing_partial &= bool(keep[-1])
        terminals, truncated = terminals[rows], truncated[rows]
    problem = size_problem(len(rewards))
    if problem:
        after = f" after dsrl's filter {dsrl_filter}" if dsrl_filter else ""
        raise ConversionError(f"{reader.path}: {problem}{after}")
    eps_id, t = episode_index(terminals | truncated)
    return _Selection(keep, rewards, costs, terminals, truncated, eps_id, t, trailing_partial)


def _tables(
    reader: DsrlReader,
    selection: _Selection,
    low: np.ndarray,
    high: np.ndarray,
    counts: dict[str, int],
    chunk_rows: int,
) -> Iterator[pa.Table]:
    """Output rows as Arrow tables, one per read chunk; counts action entries outside the bounds."""
    done = 0
    for start, chunk in reader.chunks(chunk_rows):
        mask = selection.keep[start : start + len(chunk["rewards"])]
        n = int(mask.sum())
        keep = slice(None) if n == len(mask) else mask  # a slice avoids copying unfiltered chunks
        out = slice(done, done + n)
        done += n
        actions = chunk["actions"][keep]
        counts["actions_clipped"] += int(((actions < low) | (actions > high)).sum())
        columns = {
            "obs": chunk["observations"][keep],
            "actions": normalize_actions(actions, low, high),
            "rewards": selection.rewards[out],
            "costs": selection.costs[out],
            "new_obs": chunk["next_observations"][keep],
            "terminateds": selection.terminateds[out],
            "truncateds": selection.truncateds[out],
            "eps_id": selection.eps_id[out],
            "t": selection.t[out],
        }
        yield arrow_table(columns)


def _metadata(
    task: TaskSpec,
    h5_path: Path,
    reader: DsrlReader,
    selection: _Selection,
    dsrl_filter: DsrlFilter | None,
    actions_clipped: int,
) -> dict:
    return {
        "tool": "data_conversion.dsrl_to_parquet",
        "tool_version": TOOL_VERSION,
        "source": {"file": h5_path.name, "sha256": file_sha256(h5_path), "rows": reader.rows},
        **rows_metadata(task, selection.rewards, selection.costs, selection.terminateds, selection.truncateds,
                        actions_clipped),
        "trailing_partial_episode_kept_as_truncated": selection.trailing_partial,
        "dsrl_filter": dataclasses.asdict(dsrl_filter) if dsrl_filter else None,
    }


def rows_metadata(task: TaskSpec, rewards: np.ndarray, costs: np.ndarray, terminateds: np.ndarray,
                  truncateds: np.ndarray, actions_clipped: int) -> dict:
    """What every converter records in ``metadata.json`` about the rows it wrote for `task` (in order, each
    episode's last row flagged in `terminateds` or `truncateds`): the task, sizes, action bounds, the episode
    statistics that `conversion_warnings` and the checks read, and a declared task's spec (``declared_task_record``)."""
    ends = terminateds | truncateds
    starts = np.flatnonzero(np.r_[True, ends[:-1]])
    lengths = np.diff(np.r_[starts, len(ends)])
    metadata = {
        "task": task.name,
        "task_id": task.id,
        "rows": len(ends),
        "episodes": len(starts),
        "terminated_episodes": int(terminateds.sum()),
        "truncated_episodes": int(truncateds.sum()),
        "columns": list(COLUMNS),
        "obs_dim": task.obs_dim,
        "act_dim": task.act_dim,
        "actions": {
            "range": [-1.0, 1.0],
            "env_low": list(task.action_low),
            "env_high": list(task.action_high),
            "entries_clipped_to_bounds": actions_clipped,
        },
        "episode_reward_return": _stats(episode_totals(rewards, ends)),
        "episode_cost_return": _stats(episode_totals(costs, ends)),
        "episode_length": _stats(lengths),
        "episodes_longer_than_max_steps": int((lengths > task.max_episode_steps).sum()),
    }
    return metadata | declared_task_record(task, metadata)


def declared_task_record(task: TaskSpec, metadata: dict) -> dict:
    """For a declared task, its spec as the dataset records it (``task_spec``), with the reward and cost ranges of
    the dataset's episode returns where it declares none (``range_source: dataset``); nothing for a DSRL task."""
    if task.suite != CUSTOM_SUITE:
        return {}
    spec = with_dataset_ranges(task, metadata["episode_reward_return"], metadata["episode_cost_return"])
    return {"task_spec": spec.to_dict()}


def _task_spec(task: str | TaskSpec) -> TaskSpec:
    if isinstance(task, TaskSpec):
        return task
    try:
        return get_task(task)
    except ValueError as e:
        raise ConversionError(str(e)) from e


def convert(
    task: str | TaskSpec,
    h5_path: str | Path | None,
    out_dir: str | Path,
    *,
    force: bool = False,
    dsrl_filter: DsrlFilter | None = None,
    chunk_rows: int = READ_CHUNK_ROWS,
    part_rows: int = PART_ROWS,
    strict: bool = False,
) -> ConversionSummary:
    """Convert a DSRL HDF5 file (downloaded by dsrl when `h5_path` is None) into `out_dir`.

    Reads `chunk_rows` rows at a time (memory) and writes Parquet files of at most `part_rows` rows.

    Raises `DatasetError` (`DsrlFormatError` or `ConversionError`) with a one-line message; on any
    error nothing is left under `out_dir`'s parent. The summary lists `conversion_warnings`; with `strict`
    they are errors.
    """
    spec = _task_spec(task)
    if h5_path is None and spec.suite == CUSTOM_SUITE:
        raise ConversionError(f"--h5 is required for the declared task {spec.name}: DSRL has no file of it")
    out_dir = Path(out_dir)
    low, high = action_bounds(spec)
    try:
        if h5_path is not None:
            check_output(out_dir, "--out", {"--h5": h5_path})
        with atomic_directory(out_dir, force=force, command=COMMAND) as tmp:
            h5 = Path(h5_path) if h5_path is not None else download_dataset(spec)
            check_apart(out_dir, "--out", {"--h5": h5})
            metadata, files, warnings = _convert_into(tmp, spec, h5, dsrl_filter, (low, high), chunk_rows,
                                                      part_rows, strict)
    except (OutputExistsError, OutputNotWritableError) as err:
        raise ConversionError(str(err)) from err
    return ConversionSummary(out_dir, metadata["rows"], metadata["episodes"], files, metadata, tuple(warnings))


def action_bounds(task: TaskSpec) -> tuple[np.ndarray, np.ndarray]:
    """`task`'s env action bounds as float64 arrays; a `ConversionError` if they are unbounded or empty."""
    low, high = np.asarray(task.action_low, np.float64), np.asarray(task.action_high, np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise ConversionError(f"task {task.name} has unbounded or empty action bounds {low}..{high}")
    return low, high


def _convert_into(tmp: Path, spec: TaskSpec, h5: Path, dsrl_filter: DsrlFilter | None,
                  bounds: tuple[np.ndarray, np.ndarray], chunk_rows: int, part_rows: int,
                  strict: bool) -> tuple[dict, list[str], list[str]]:
    """Writes the Parquet parts and ``metadata.json`` of ``h5`` into ``tmp``; the metadata, files and warnings."""
    low, high = bounds
    with DsrlReader(h5) as reader:
        reader.check_dims(spec.obs_dim, spec.act_dim)
        selection = _select(spec, reader, dsrl_filter)
        counts = {"actions_clipped": 0}
        with tqdm(total=len(selection.t), unit="row", unit_scale=True, desc=spec.name, disable=None) as bar:
            tables = (bar.update(len(t)) or t for t in _tables(reader, selection, low, high, counts, chunk_rows))
            files = write_parquet_parts(tables, tmp / DATA_DIR, part_rows)
        metadata = _metadata(spec, h5, reader, selection, dsrl_filter, counts["actions_clipped"])
        warnings = write_metadata(tmp, spec, metadata, files, strict=strict, source=h5)
    return metadata, files, warnings


def write_metadata(tmp: Path, task: TaskSpec, metadata: dict, files: tuple[str, ...], *, strict: bool,
                   source: str | Path) -> list[str]:
    """Adds the Parquet `files`' checksums and the `conversion_warnings` to `metadata` and writes it into the
    converted dataset `tmp`; returns the warnings. Under `strict` a warning is a `ConversionError` naming `source`."""
    metadata["files"] = {name: file_sha256(tmp / DATA_DIR / name) for name in files}
    warnings = conversion_warnings(task, metadata)
    if strict and warnings:
        raise ConversionError(f"{source}: refused under --strict: " + "; ".join(warnings))
    metadata[CONVERSION_WARNINGS] = warnings  # check_dataset repeats them whenever the dataset is used
    (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return warnings


def conversion_warnings(task: TaskSpec, metadata: dict) -> list[str]:
    """What a converted dataset has that is probably wrong, each a one-line warning."""
    warnings = []
    clipped = metadata["actions"]["entries_clipped_to_bounds"]
    if clipped:
        share = clipped / (metadata["rows"] * task.act_dim)
        warnings.append(f"{clipped} action entries ({share:.2%}) lay outside the task's bounds and were clipped")
    longer = metadata["episodes_longer_than_max_steps"]
    if longer:
        warnings.append(f"{longer} episodes are longer than the task's {task.max_episode_steps} steps "
                        "(another task's data, or missing episode ends?)")
    unflagged = metadata.get("episodes_ended_without_flag_kept_as_truncated")  # episodes of a Minari dataset
    if unflagged:
        warnings.append(f"{unflagged} episodes end with neither a termination nor a truncation and were kept as "
                        "truncated")
    flagged = metadata["terminated_episodes"] + metadata["truncated_episodes"]
    if flagged == int(metadata["trailing_partial_episode_kept_as_truncated"]):  # only the end of the file
        warnings.append("the file has no terminal or time-out flags: the whole file is read as one episode")
    return warnings


def _parser() -> argparse.ArgumentParser:
    from rllib_caps.task_file_flag import add_task_file_argument

    parser = argparse.ArgumentParser(
        prog="python -m data_conversion.dsrl_to_parquet",
        description=__doc__.split("\n\n")[0],
        epilog="Errors (bad file, existing output, failed download) print one line and exit with code 2.",
    )
    parser.add_argument("--task", required=True, help="task short name or DSRL id, e.g. BallCircle, or a --task-file's")
    add_task_file_argument(parser)
    parser.add_argument(
        "--h5", type=Path, metavar="PATH", help="local DSRL HDF5 file; without it dsrl downloads into $DSRL_DATASET_DIR"
    )
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="output directory (data/*.parquet, metadata.json)"
    )
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")
    parser.add_argument("--strict", action="store_true",
                        help="refuse (exit 2, nothing written) instead of warning about clipped actions, episodes "
                             "longer than the task's, or a file without episode ends")
    group = parser.add_argument_group("dsrl filters", "apply dsrl's OfflineEnv.pre_process_data before converting")
    group.add_argument(
        "--density",
        type=float,
        default=None,
        help="keep about this share of episodes: 0.5 or 0.75 (dsrl's DENSITY_CFG)",
    )
    group.add_argument("--outliers-percent", type=float, help="share of episodes turned into low-cost outliers")
    group.add_argument("--target-cost", type=float, help="cost limit the outliers respect (needed with them)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    args = _parser().parse_args(argv)
    wants_filter = any(v is not None for v in (args.density, args.outliers_percent, args.target_cost))
    dsrl_filter = (
        DsrlFilter(args.density if args.density is not None else 1.0, args.outliers_percent, args.target_cost)
        if wants_filter
        else None
    )
    try:
        summary = convert(args.task, args.h5, args.out, force=args.force, dsrl_filter=dsrl_filter, strict=args.strict)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {summary.rows} rows, {summary.episodes} episodes to {summary.out_dir}")
    for warning in summary.warnings:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
