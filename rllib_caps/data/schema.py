"""The converted-dataset schema: column names, dtypes, and the Parquet writer (no Ray import).

A converted dataset is ``DIR/metadata.json`` plus ``DIR/data/part-NNNNN.parquet``, one row per transition.
Column names equal RLlib's ``Columns`` values, so a sampled batch is keyed the way RLlib's learners expect
and the pure losses run on plain dicts. The converter, the in-memory dataset, the benchmark and the test
helpers all read this module; nothing else spells the schema out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

OBS, ACTIONS, REWARDS, COSTS, NEXT_OBS = "obs", "actions", "rewards", "costs", "new_obs"
TERMINATEDS, TRUNCATEDS = "terminateds", "truncateds"  # env termination; time-out (DSRL's `timeouts`)
EPS_ID, T = "eps_id", "t"  # episode index and 0-based step index within the episode

DTYPES: dict[str, type] = {
    OBS: np.float32, ACTIONS: np.float32, REWARDS: np.float32, COSTS: np.float32, NEXT_OBS: np.float32,
    TERMINATEDS: np.bool_, TRUNCATEDS: np.bool_, EPS_ID: np.int64, T: np.int64,
}
COLUMNS: tuple[str, ...] = tuple(DTYPES)  # the order of the columns in the files
VECTOR_COLUMNS = (OBS, ACTIONS, NEXT_OBS)  # fixed-size lists: (rows, dim)
DATA_DIR = "data"
METADATA_FILE = "metadata.json"
CONVERSION_WARNINGS = "conversion_warnings"  # metadata.json key: the converter's warnings, repeated on every load


def arrow_table(columns: Mapping[str, np.ndarray]) -> pa.Table:
    """One Arrow table in the schema's column order and dtypes; vector columns become fixed-size lists."""
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise KeyError(f"arrow_table: missing columns {missing}")
    arrays = {}
    for name in COLUMNS:
        value = np.asarray(columns[name], dtype=DTYPES[name])
        arrays[name] = (pa.FixedSizeListArray.from_arrays(value.ravel(), value.shape[1]) if name in VECTOR_COLUMNS
                        else pa.array(value))
    return pa.table(arrays)


def write_parquet_parts(tables: Iterable[pa.Table], data_dir: Path, part_rows: int) -> tuple[str, ...]:
    """Writes ``tables`` as ``data_dir/part-NNNNN.parquet`` files of at most ``part_rows`` rows each; returns
    their names. The caller makes the directory atomic (see ``rllib_caps.utils.atomic``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    writer: pq.ParquetWriter | None = None
    rows_in_part = 0
    try:
        for table in tables:
            while len(table):
                if writer is None or rows_in_part == part_rows:
                    if writer is not None:
                        writer.close()
                    files.append(f"part-{len(files):05d}.parquet")
                    # Dictionary encoding triples the write time and saves nothing on float vectors.
                    writer = pq.ParquetWriter(data_dir / files[-1], table.schema, use_dictionary=False)
                    rows_in_part = 0
                take = min(len(table), part_rows - rows_in_part)
                writer.write_table(table.slice(0, take))
                rows_in_part += take
                table = table.slice(take)
    finally:
        if writer is not None:
            writer.close()
    return tuple(files)
