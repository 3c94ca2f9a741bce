"""Checks a converted dataset before any expensive work: it exists, has Parquet files in the schema, fits the
task's observation and action sizes, was made for that task, its files match the checksums the converter
recorded in ``metadata.json`` (a flipped byte is caught here, not trained on), and its values pass
``rllib_caps.data.values`` (one NaN, a negative cost or an action outside [-1, 1] is refused, checksums or not).
A dataset without ``metadata.json`` or without checksums is refused unless the caller opts out with
``verify=False`` (``--no-verify``), which is logged. The warnings the converter recorded (e.g. episodes longer
than the task's: another task's file?) are repeated on every check, so training on such a dataset never goes
unnoticed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rllib_caps.data.dataset import column_to_numpy, parquet_files
from rllib_caps.data.errors import DatasetError
from rllib_caps.data.schema import ACTIONS, COLUMNS, CONVERSION_WARNINGS, METADATA_FILE, NEXT_OBS, OBS
from rllib_caps.data.values import FLOAT_COLUMNS, dataset_problem, size_problem
from rllib_caps.utils.checksum import file_sha256

logger = logging.getLogger("rllib_caps.data")


def _width(files: list[Path], schema: pa.Schema, name: str) -> int | None:
    """The width of a vector column: fixed by its type, or the length of its first value for a plain list."""
    field_type = schema.field(name).type
    if pa.types.is_fixed_size_list(field_type):
        return field_type.list_size
    if pa.types.is_list(field_type) or pa.types.is_large_list(field_type):
        for path in files:  # the first file with rows: an empty part has no first value
            column = pq.read_table(path, columns=[name]).column(name)
            if len(column):
                return len(column[0])
    return None


def _check_values(data_dir: Path, files: list[Path]) -> None:
    """Every row of every file by ``rllib_caps.data.values`` (finite, costs >= 0, actions in [-1, 1]), one record
    batch at a time, and the dataset's size; a ``DatasetError`` naming the file, column and row otherwise."""
    rows = 0
    for path in files:
        try:
            batches = pq.ParquetFile(path).iter_batches(columns=list(FLOAT_COLUMNS))
            first_row = 0
            for batch in batches:
                table = pa.Table.from_batches([batch])
                problem = dataset_problem({name: column_to_numpy(table, name, path) for name in FLOAT_COLUMNS},
                                          first_row)
                if problem:
                    raise DatasetError(f"{path}: {problem}; fix or re-convert the dataset")
                first_row += batch.num_rows
        except (OSError, pa.ArrowException) as err:
            raise DatasetError(f"{path}: not a readable Parquet file ({err})") from err
        rows += first_row
    problem = size_problem(rows)
    if problem:
        raise DatasetError(f"{data_dir}: {problem}")


def check_dataset(path: str | Path, *, task: str, obs_dim: int, act_dim: int,
                  allow_task_mismatch: bool = False, verify: bool = True) -> Path:
    """Validates the dataset at ``path`` for ``task``; returns its Parquet directory. Raises ``DatasetError``
    naming the file and what is wrong. ``verify=False`` skips the checksums (and their absence), with a warning."""
    data_dir = parquet_files(path)
    files = sorted(data_dir.glob("*.parquet")) if data_dir.is_dir() else [data_dir]
    if not files:
        raise DatasetError(f"{data_dir}: no Parquet files (*.parquet); convert a dataset with "
                           "`python -m data_conversion.dsrl_to_parquet`")
    try:
        schema = pq.read_schema(files[0])
    except (OSError, pa.ArrowException) as err:
        raise DatasetError(f"{files[0]}: not a readable Parquet file ({err})") from err
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise DatasetError(f"{files[0]}: missing columns {missing}; re-convert it with "
                           "`python -m data_conversion.dsrl_to_parquet`")
    for column, expected in ((OBS, obs_dim), (NEXT_OBS, obs_dim), (ACTIONS, act_dim)):
        width = _width(files, schema, column)
        if width != expected:
            raise DatasetError(f"{files[0]}: column {column!r} has width {width}, but task {task} has {expected} "
                               "(is this another task's dataset?)")
    _check_metadata(data_dir, files, task=task, allow_task_mismatch=allow_task_mismatch, verify=verify)
    _check_values(data_dir, files)
    return data_dir


def _check_metadata(data_dir: Path, files: list[Path], *, task: str, allow_task_mismatch: bool,
                    verify: bool) -> None:
    """The dataset's ``metadata.json``: made for ``task``, its conversion warnings repeated, and (``verify``) its
    files' checksums; a missing one is refused only with ``verify``."""
    metadata_file = _metadata_file(data_dir)
    if not verify:
        logger.warning("%s: dataset integrity NOT checked (verify=False, --no-verify)", data_dir)
    metadata = dataset_metadata(data_dir)
    if metadata is None:
        if verify:
            raise DatasetError(f"{data_dir}: no {METADATA_FILE}, so its task and file checksums cannot be checked; "
                               "re-convert it with `python -m data_conversion.dsrl_to_parquet`, or pass --no-verify "
                               "(verify=False) to use it anyway")
        return
    recorded = metadata.get("task")
    if recorded is not None and recorded != task and not allow_task_mismatch:
        raise DatasetError(f"{metadata_file}: this dataset is for task {recorded!r}, not {task!r}; pass "
                           "--allow-task-mismatch to train on it anyway")
    for warning in metadata.get(CONVERSION_WARNINGS, []):
        logger.warning("%s: converted with a warning: %s", metadata_file, warning)
    if verify:
        _verify_checksums(data_dir, files, metadata_file, metadata.get("files"))


def _metadata_file(data_dir: Path) -> Path:
    """Where the ``metadata.json`` of a Parquet directory (or of one Parquet file in it) is."""
    return (data_dir.parent if data_dir.is_dir() else data_dir.parent.parent) / METADATA_FILE


def dataset_metadata(path: str | Path) -> dict | None:
    """The ``metadata.json`` of the dataset at ``path`` (its directory, Parquet directory or a Parquet file), None
    where it has none; ``DatasetError`` naming the file where it is unreadable."""
    metadata_file = _metadata_file(parquet_files(path))
    if not metadata_file.is_file():
        return None
    try:
        return json.loads(metadata_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DatasetError(f"{metadata_file}: unreadable ({err})") from err


def _verify_checksums(data_dir: Path, files: list[Path], metadata_file: Path,
                      checksums: dict[str, str] | None) -> None:
    """Every Parquet file listed in ``checksums`` with its sha256, and no other; a ``DatasetError`` otherwise."""
    if not checksums:
        raise DatasetError(f"{metadata_file}: no file checksums (sha256 per Parquet file), so the data cannot be "
                           "checked; re-convert the dataset to add them, or pass --no-verify (verify=False) to use "
                           "it anyway")
    names = {f.name for f in files}
    if data_dir.is_dir() and names != set(checksums) or not names <= set(checksums):
        raise DatasetError(f"{data_dir}: Parquet files {sorted(names)} differ from those in {metadata_file} "
                           f"({sorted(checksums)})")
    for f in files:
        try:
            digest = file_sha256(f)
        except OSError as err:
            raise DatasetError(f"{f}: cannot read it ({err.strerror})") from err
        if digest != checksums[f.name]:
            raise DatasetError(f"{f}: its sha256 differs from {metadata_file} (corrupt or modified); re-convert "
                               "the dataset")
