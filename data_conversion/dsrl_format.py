"""The DSRL HDF5 dataset format in one place: keys, dtypes, an atomic writer and a chunked reader.

A DSRL file holds flat, row-aligned datasets at its root (see dsrl's ``OfflineEnv.get_dataset``):
``observations, next_observations, actions, rewards, costs`` (float32) and the episode-end flags
``terminals, timeouts`` (bool), gzip-compressed. An episode ends at either flag.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType

import h5py
import numpy as np

from rllib_caps.data.errors import DatasetError
from rllib_caps.data.values import column_problem
from rllib_caps.utils.atomic import temporary_sibling

OBS_KEYS = ("observations", "next_observations")
FLOAT_KEYS = (*OBS_KEYS, "actions", "rewards", "costs")
FLAG_KEYS = ("terminals", "timeouts")
KEYS = (*FLOAT_KEYS, *FLAG_KEYS)
DTYPES: dict[str, type[np.generic]] = {
    **dict.fromkeys(FLOAT_KEYS, np.float32),
    **dict.fromkeys(FLAG_KEYS, np.bool_),
}
VECTOR_KEYS = (*OBS_KEYS, "actions")
COMPRESSION = "gzip"
H5_CHUNK_ROWS = 4096  # rows per HDF5 chunk (about 0.5 MB for a 34-dim observation)
READ_CHUNK_ROWS = 131072  # rows per read of `DsrlReader.chunks`, a multiple of H5_CHUNK_ROWS


class DsrlFormatError(DatasetError):
    """A DSRL HDF5 file is unreadable or breaks the format; the message names the file and key."""

    def __init__(self, path: str | os.PathLike[str], key: str | None, problem: str) -> None:
        self.path, self.key, self.problem = str(path), key, problem
        where = f"{self.path}: key '{key}'" if key else self.path
        super().__init__(f"{where}: {problem}")


def _row_shape(key: str, dims: Mapping[str, int]) -> tuple[int, ...]:
    """Per-row shape of `key`: ``(dim,)`` for observations/actions, ``()`` for scalars."""
    if key in OBS_KEYS:
        return (dims["obs_dim"],)
    if key == "actions":
        return (dims["act_dim"],)
    return ()


class DsrlWriter:
    """Append row chunks to a new DSRL HDF5 file, written atomically (temp file + rename on close).

    Use as a context manager; on an exception the temp file is removed and `path` is untouched.
    """

    def __init__(self, path: str | os.PathLike[str], obs_dim: int, act_dim: int) -> None:
        self.path = Path(path)
        self.rows = 0
        self._dims = {"obs_dim": obs_dim, "act_dim": act_dim}
        self._tmp = temporary_sibling(self.path)
        self._file = h5py.File(self._tmp, "x")
        try:
            for key in KEYS:
                shape = _row_shape(key, self._dims)
                self._file.create_dataset(
                    key,
                    shape=(0, *shape),
                    maxshape=(None, *shape),
                    dtype=DTYPES[key],
                    chunks=(H5_CHUNK_ROWS, *shape),
                    compression=COMPRESSION,
                )
        except BaseException:
            self.abort()
            raise

    def append(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Append rows given as one array per key (all keys, same length, shapes as declared)."""
        missing = [k for k in KEYS if k not in arrays]
        if missing:
            raise DsrlFormatError(self.path, missing[0], "missing from the arrays to write")
        n = len(arrays[KEYS[0]])
        for key in KEYS:
            value = np.asarray(arrays[key])
            if value.shape != (n, *_row_shape(key, self._dims)):
                raise DsrlFormatError(
                    self.path, key, f"shape {value.shape}, expected {(n, *_row_shape(key, self._dims))}"
                )
            dset = self._file[key]
            dset.resize(self.rows + n, axis=0)
            dset[self.rows :] = value.astype(DTYPES[key], copy=False)
        self.rows += n

    def close(self) -> None:
        """Finish the file and move it into place."""
        self._file.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Discard the partial file."""
        self._file.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> DsrlWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_dsrl_hdf5(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` (one per key in `KEYS`) as a DSRL HDF5 file, atomically."""
    dims = {}
    for key in ("observations", "actions"):
        shape = np.shape(arrays[key]) if key in arrays else ()
        if len(shape) != 2:
            raise DsrlFormatError(path, key, f"must be a 2-D (rows, dim) array, got shape {shape or 'none'}")
        dims[key] = shape[1]
    with DsrlWriter(path, dims["observations"], dims["actions"]) as writer:
        writer.append(arrays)


class DsrlReader:
    """Open and validate a DSRL HDF5 file, then read it in row chunks with bounded memory.

    Opening checks the file exists, is a non-empty HDF5 file, has every key, equal lengths and
    the expected ranks (a trailing size-1 axis on scalar keys is accepted, as dsrl does).
    `chunks` checks values as it reads (``rllib_caps.data.values``: finite floats, non-negative costs) and 0/1 flags.
    Every problem raises `DsrlFormatError`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise DsrlFormatError(self.path, None, "is a directory, not an HDF5 file")
        if not self.path.is_file():
            raise DsrlFormatError(self.path, None, "no such file")
        if self.path.stat().st_size == 0:
            raise DsrlFormatError(self.path, None, "empty file (0 bytes)")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as e:
            problem = f"not a readable HDF5 file (truncated or corrupt?): {e}"
            raise DsrlFormatError(self.path, None, problem) from e
        try:
            self._check_structure()
        except DsrlFormatError:
            self._file.close()
            raise

    def _check_structure(self) -> None:
        for key in KEYS:
            if key not in self._file or not isinstance(self._file[key], h5py.Dataset):
                raise DsrlFormatError(self.path, key, "missing")
        self.rows = self._file["observations"].shape[0] if self._file["observations"].ndim else 0
        if self.rows == 0:
            raise DsrlFormatError(self.path, "observations", "empty (0 rows)")
        for key in KEYS:
            shape = self._file[key].shape
            if not shape or shape[0] != self.rows:
                raise DsrlFormatError(
                    self.path, key, f"length {shape[0] if shape else 0} != {self.rows} rows of 'observations'"
                )
            expected_ndim = 2 if key in VECTOR_KEYS else 1
            if len(shape) != expected_ndim and not (expected_ndim == 1 and shape[1:] == (1,)):
                raise DsrlFormatError(self.path, key, f"shape {shape} has the wrong rank")
        self.obs_dim = self._file["observations"].shape[1]
        self.act_dim = self._file["actions"].shape[1]
        if self._file["next_observations"].shape[1] != self.obs_dim:
            raise DsrlFormatError(
                self.path,
                "next_observations",
                f"size {self._file['next_observations'].shape[1]} != observation size {self.obs_dim}",
            )

    def check_dims(self, obs_dim: int, act_dim: int) -> None:
        """Raise unless the observation and action sizes are `obs_dim` and `act_dim`."""
        for key, got, want in (("observations", self.obs_dim, obs_dim), ("actions", self.act_dim, act_dim)):
            if got != want:
                raise DsrlFormatError(self.path, key, f"size {got} does not match the task's {want}")

    def read(self, key: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` of `key`, validated and cast to the DSRL dtype."""
        try:
            raw = self._file[key][start:stop]
        except (OSError, RuntimeError) as e:
            raise DsrlFormatError(self.path, key, f"unreadable (truncated or corrupt file?): {e}") from e
        if key not in VECTOR_KEYS:
            raw = raw.reshape(len(raw))
        if key in FLAG_KEYS:
            if raw.dtype != np.bool_ and not np.isin(raw, (0, 1)).all():
                raise DsrlFormatError(self.path, key, "flags must be 0/1")
            return raw.astype(np.bool_, copy=False)
        problem = column_problem(raw, first_row=start, cost=key == "costs")
        if problem:
            raise DsrlFormatError(self.path, key, problem)
        return raw.astype(np.float32, copy=False)

    def chunks(self, chunk_rows: int = READ_CHUNK_ROWS) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield ``(start_row, {key: rows})`` for consecutive chunks of `chunk_rows` rows."""
        for start in range(0, self.rows, chunk_rows):
            stop = min(start + chunk_rows, self.rows)
            yield start, {key: self.read(key, start, stop) for key in KEYS}

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> DsrlReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def episode_totals(values: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per episode, the float64 sum of `values` over its rows; an episode ends where `ends` is set, and the last row
    ends one whatever its flag."""
    starts = np.flatnonzero(np.r_[True, np.asarray(ends)[:-1]])
    return np.add.reduceat(np.asarray(values, dtype=np.float64), starts)


def read_dsrl_hdf5(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read and validate a whole DSRL file into memory (small files and tests)."""
    with DsrlReader(path) as reader:
        return {key: reader.read(key) for key in KEYS}
