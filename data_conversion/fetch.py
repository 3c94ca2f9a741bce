"""Fetch DSRL's datasets and convert them, in parallel on Ray: one command for any selection of the 38 tasks.

    python -m data_conversion.fetch --tasks bullet --out datasets                     # DSRL's Hub repo
    python -m data_conversion.fetch --tasks all --source /mnt/dsrl --out datasets     # a directory of DSRL files
    python -m data_conversion.fetch --tasks CarRun --source https://mirror.example/dsrl --out datasets

Each task gets its DSRL file from the source (``data_conversion.sources``: size and sha256 checked wherever the
source gives them), then ``dsrl_to_parquet.convert`` writes ``OUT/<Task>/`` atomically; ``metadata.json``
records the source file's name and sha256. A task whose dataset is complete and comes from the same source
file (same sha256) is skipped. Getting the file is one Ray task; converting it is a second one on the same node
that reserves Ray ``memory`` for the file's rows (`conversion_memory`), so large conversions wait for memory
instead of running the machine out of it. A failing task never stops the others.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_conversion.dsrl_format import READ_CHUNK_ROWS, DsrlReader
from data_conversion.dsrl_to_parquet import TOOL_VERSION, convert
from data_conversion.sources import FetchError, Source, one_line, parse_source, verified_sha256
from rllib_caps.core.ray_session import init_ray
from rllib_caps.data.errors import DatasetError
from rllib_caps.data.schema import METADATA_FILE
from rllib_caps.envs.compat.dsrl import dataset_file_name
from rllib_caps.envs.tasks import SUITES, TaskSpec, get_task, select_tasks
from rllib_caps.interrupts import interruptible
from rllib_caps.utils.console import aligned_table

READY = ("converted", "up to date")
# The driver's download settings, handed to the Ray tasks (on a joined cluster their workers have their own env).
FORWARDED_ENV = ("HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_HUB_DOWNLOAD_TIMEOUT",
                 "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DISABLE_XET", "RLLIB_CAPS_CACHE")
FETCH_CPUS = 0.25  # getting a file is I/O and hashing
# Peak resident memory of one conversion: a fixed part (Python, NumPy, Arrow, HDF5 and the Ray worker), the
# whole-file scalar columns and episode index per row, and the buffers of one read chunk, scaled by the row's
# width. Measured outside Ray (benchmarks/bench_fetch.py, AntCircle-sized rows): 466 MiB at 131 k rows, 531 MiB
# at 1 M, 606 MiB at 2.9 M, i.e. about 53 bytes per row; the figures below leave a margin for the Ray worker.
MEMORY_BASE = 450 * 2**20
MEMORY_PER_ROW = 64
MEMORY_CHUNK_COPIES = 4


@dataclass
class Outcome:
    """One task's result: ``status`` is ``converted``, ``up to date`` or ``failed`` (with ``message``)."""

    task: str
    status: str = "failed"
    rows: int | None = None
    episodes: int | None = None
    source: str = ""
    seconds: float = 0.0
    message: str = ""
    bytes: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.status in READY


@dataclass(frozen=True)
class Fetched:
    """A verified DSRL file on the node that fetched it (``path`` is None when the dataset is up to date)."""

    path: str | None
    sha256: str
    bytes: int
    rows: int
    obs_dim: int
    act_dim: int
    node_id: str
    dataset: dict | None = None  # the up-to-date dataset's metadata


def conversion_memory(rows: int, obs_dim: int, act_dim: int) -> int:
    """Bytes of memory to reserve for converting a file of ``rows`` rows (see ``MEMORY_*``)."""
    row_bytes = (2 * obs_dim + act_dim + 4) * 4
    return int(MEMORY_BASE + rows * MEMORY_PER_ROW + min(rows, READ_CHUNK_ROWS) * row_bytes * MEMORY_CHUNK_COPIES)


def current_dataset(out_dir: Path, task: TaskSpec) -> dict | None:
    """The metadata of ``out_dir`` when it holds a complete, intact, unfiltered dataset of ``task`` written by
    this converter version; None otherwise."""
    from rllib_caps.data.validation import check_dataset  # imports torch: not at the top, for --help

    try:
        check_dataset(out_dir, task=task.name, obs_dim=task.obs_dim, act_dim=task.act_dim)
        metadata = json.loads((out_dir / METADATA_FILE).read_text())
    except (DatasetError, OSError, ValueError):
        return None
    complete = (metadata.get("files") and metadata.get("tool_version") == TOOL_VERSION
                and metadata.get("dsrl_filter") is None and metadata.get("source", {}).get("sha256"))
    return metadata if complete else None


def fetch_file(task_name: str, source: Source, out_root: str) -> Fetched:
    """Get and verify ``task_name``'s DSRL file, unless ``OUT/<Task>`` already holds a complete dataset of a file
    with the sha256 the source advertises (or, when it advertises none, of the file just fetched)."""
    import ray

    task = get_task(task_name)
    name = dataset_file_name(task.name)
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    existing = current_dataset(Path(out_root) / task.name, task)
    recorded = existing["source"]["sha256"] if existing else None
    advertised = source.advertised(name)
    if recorded is not None and advertised.sha256 == recorded:
        return Fetched(None, recorded, advertised.size or 0, existing["source"]["rows"], task.obs_dim, task.act_dim,
                       node, existing)
    path = source.fetch(name)
    try:
        sha = verified_sha256(path, name, advertised, source.label)
    except FetchError:
        source.discard(path)
        raise
    size = path.stat().st_size
    if sha == recorded:
        return Fetched(None, sha, size, existing["source"]["rows"], task.obs_dim, task.act_dim, node, existing)
    with DsrlReader(path) as reader:
        reader.check_dims(task.obs_dim, task.act_dim)
        return Fetched(str(path), sha, size, reader.rows, reader.obs_dim, reader.act_dim, node)


def convert_file(task_name: str, path: str, out_root: str) -> dict:
    """Convert a fetched file into ``OUT/<Task>`` (replacing an outdated dataset atomically); its counts."""
    summary = convert(task_name, path, Path(out_root) / get_task(task_name).name, force=True)
    return {"rows": summary.rows, "episodes": summary.episodes, "warnings": list(summary.warnings)}


def _error_line(err: BaseException) -> str:
    """The one-line message of a task's failure (the cause of a Ray task error)."""
    cause = getattr(err, "cause", None) or err
    return one_line(cause) if isinstance(cause, DatasetError) else f"{type(cause).__name__}: {one_line(cause)}"


def prepare_datasets(tasks: Sequence[TaskSpec], out_root: str | Path, source: Source, *, jobs: int | None = None,
                     progress: bool = True) -> list[Outcome]:
    """Fetch and convert ``tasks`` into ``out_root/<Task>/`` as Ray tasks on the running Ray cluster (at most
    ``jobs`` tasks at once; by default as many as CPUs and memory allow), with the driver's ``FORWARDED_ENV``
    settings. Returns one `Outcome` per task, in
    order; a task's failure is in its outcome, never raised, and printed as one line on stderr."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    out_root = str(Path(out_root).resolve())
    env = {key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}
    runtime_env = {"env_vars": env} if env else None
    fetch_remote = ray.remote(fetch_file).options(num_cpus=FETCH_CPUS, max_retries=0, runtime_env=runtime_env)
    convert_remote = ray.remote(convert_file)
    node_memory = {n["NodeID"]: n["Resources"].get("memory", 0) for n in ray.nodes() if n["Alive"]}
    outcomes = {t.name: Outcome(t.name, source=source.label) for t in tasks}
    started: dict[str, float] = {}
    waiting = [t.name for t in tasks]
    running: dict[Any, tuple[str, str]] = {}  # ref -> (stage, task)
    limit = jobs or len(tasks)
    # None: no bar where stderr is no terminal (a log file, CI), whose lines the bar's carriage returns would run into
    with tqdm(total=0, unit="B", unit_scale=True, desc=f"0/{len(tasks)} tasks", disable=None if progress else True,
              file=sys.stderr) as bar:
        while waiting or running:
            while waiting and len(running) < limit:
                name = waiting.pop(0)
                started[name] = time.perf_counter()
                running[fetch_remote.remote(name, source, out_root)] = ("fetch", name)
            (ref,), _ = ray.wait(list(running), num_returns=1)
            stage, name = running.pop(ref)
            outcome = outcomes[name]
            try:
                value = ray.get(ref)
            except Exception as err:  # a task's failure stays in its outcome
                outcome.message = _error_line(err)
                value = None
            if stage == "fetch" and value is not None:
                bar.total += value.bytes
                outcome.bytes = value.bytes
                if value.path is None:
                    outcome.status, outcome.rows, outcome.episodes = "up to date", value.dataset["rows"], \
                        value.dataset["episodes"]
                else:
                    # never more than the node has, or the task could never be scheduled
                    memory = int(min(conversion_memory(value.rows, value.obs_dim, value.act_dim),
                                 node_memory.get(value.node_id, math.inf)))
                    placement = NodeAffinitySchedulingStrategy(value.node_id, soft=False) if value.node_id else None
                    running[convert_remote.options(num_cpus=1, memory=memory, scheduling_strategy=placement,
                                                   runtime_env=runtime_env).remote(name, value.path, out_root)] = \
                        ("convert", name)
                    continue
            elif stage == "convert" and value is not None:
                outcome.status, outcome.rows, outcome.episodes = "converted", value["rows"], value["episodes"]
                outcome.warnings = value["warnings"]
            outcome.seconds = time.perf_counter() - started[name]
            bar.update(outcome.bytes)
            done = sum(o.ready or bool(o.message) for o in outcomes.values())
            bar.set_description_str(f"{done}/{len(tasks)} tasks")  # not set_description: its ": " doubles tqdm's
            if outcome.message:
                tqdm.write(f"error: {name}: {outcome.message}", file=sys.stderr)
    return [outcomes[t.name] for t in tasks]


def format_outcomes(outcomes: Sequence[Outcome]) -> str:
    """The final table: task, rows, episodes, source, seconds, status."""
    rows = [(o.task, "" if o.rows is None else str(o.rows), "" if o.episodes is None else str(o.episodes), o.source,
             f"{o.seconds:.1f}", o.status) for o in outcomes]
    return aligned_table(("task", "rows", "episodes", "source", "seconds", "status"), rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m data_conversion.fetch",
        description="Get DSRL's datasets (from DSRL's Hugging Face Hub repo, a directory or an HTTP mirror) and "
                    "convert them to Parquet, in parallel on Ray. Tasks whose dataset is complete and comes from "
                    "the same source file are skipped.",
        epilog="Exit status: 0 when every selected task is ready, 1 when any failed (each named on one line), 2 "
               "for bad arguments. Hub downloads honour HF_ENDPOINT, HF_HUB_OFFLINE, HF_HOME and "
               "HF_HUB_DOWNLOAD_TIMEOUT; mirror downloads are cached in $RLLIB_CAPS_CACHE (~/.cache/rllib_caps).",
    )
    parser.add_argument("--tasks", required=True,
                        help=f"'all', a suite ({', '.join(SUITES)}) or a comma list of task names/ids")
    parser.add_argument("--out", required=True, type=Path, metavar="ROOT",
                        help="data root: one converted dataset per task in ROOT/<Task>/ (rllib_caps.tune --data-root)")
    parser.add_argument("--source", default="hf", metavar="hf|DIR|URL_PREFIX",
                        help="'hf': DSRL's Hub repo (default); DIR: a directory of DSRL files under DSRL's names; "
                             "URL_PREFIX: an http(s) mirror serving PREFIX/<DSRL file name>")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="at most N tasks at once [as many as Ray's CPUs and memory allow]")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS") or None,
                        help="join this Ray cluster (e.g. auto) instead of starting a local one [$RAY_ADDRESS, as "
                             "ray.init reads it; unset: a new local Ray]")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        tasks = select_tasks(args.tasks)
        source = parse_source(args.source)
    except (ValueError, FetchError) as err:
        parser.error(str(err))
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    import ray

    kept = (f"every task finished so far is complete in {Path(args.out).resolve()} (datasets are written "
            "atomically); run the same command again to get the rest (complete tasks are skipped)")
    with interruptible(kept):
        try:
            init_ray(address=args.address or "local", include_dashboard=False, log_to_driver=False)
        except Exception as err:  # ray.init raises a bare Exception when it cannot start or join
            print(f"error: {'--address ' + args.address + ': cannot join' if args.address else 'cannot start'} "
                  f"Ray: {err}", file=sys.stderr)
            return 2
        try:
            outcomes = prepare_datasets(tasks, args.out, source, jobs=args.jobs)
        finally:
            ray.shutdown()
    print(format_outcomes(outcomes))
    for o in outcomes:
        for warning in o.warnings:
            print(f"warning: {o.task}: {warning}")
    failed = [o.task for o in outcomes if not o.ready]
    if failed:
        print(f"{len(failed)} of {len(outcomes)} tasks not ready: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"all {len(outcomes)} tasks ready in {Path(args.out).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
