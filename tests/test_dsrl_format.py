"""The DSRL HDF5 format: writer dtypes and atomicity, dsrl's own loader, reader validation."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest

from data_conversion.dsrl_format import (
    DTYPES,
    KEYS,
    DsrlFormatError,
    DsrlReader,
    DsrlWriter,
    read_dsrl_hdf5,
    write_dsrl_hdf5,
)

ROWS, OBS_DIM, ACT_DIM = 300, 5, 2


def dsrl_arrays(
    rows: int = ROWS, obs_dim: int = OBS_DIM, act_dim: int = ACT_DIM, seed: int = 0
) -> dict[str, np.ndarray]:
    """Valid DSRL arrays in float64/int (the writer must cast them): 100-step episodes."""
    rng = np.random.default_rng(seed)
    return {
        "observations": rng.normal(size=(rows, obs_dim)),
        "next_observations": rng.normal(size=(rows, obs_dim)),
        "actions": rng.uniform(-1, 1, size=(rows, act_dim)),
        "rewards": rng.normal(size=rows),
        "costs": rng.integers(0, 2, size=rows).astype(np.float64),
        "terminals": (np.arange(rows) == 42).astype(np.int64),
        "timeouts": (np.arange(rows) % 100 == 99).astype(np.int64),
    }


def write_raw(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write arrays with plain h5py, bypassing the writer's checks (to build broken files)."""
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
    return path


def test_writer_casts_to_dsrl_dtypes_gzip_and_round_trips(tmp_path: Path) -> None:
    arrays = dsrl_arrays()
    path = tmp_path / "d.hdf5"
    write_dsrl_hdf5(path, arrays)
    with h5py.File(path, "r") as f:
        assert set(f) == set(KEYS)
        for key in KEYS:
            assert f[key].dtype == DTYPES[key]
            assert f[key].compression == "gzip"
    back = read_dsrl_hdf5(path)
    for key in KEYS:
        np.testing.assert_array_equal(back[key], arrays[key].astype(DTYPES[key]))
    assert list(tmp_path.iterdir()) == [path]  # no temp file left


def test_dsrl_get_dataset_loads_written_file(tmp_path: Path) -> None:
    """dsrl's own ``OfflineEnv.get_dataset(h5path=...)`` accepts the file and sees the same data."""
    with contextlib.redirect_stderr(io.StringIO()):  # dsrl warns that its simulators fail to import
        from dsrl.offline_env import OfflineEnv

    class Env(OfflineEnv):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32)

    path = tmp_path / "d.hdf5"
    write_dsrl_hdf5(path, dsrl_arrays())
    loaded = Env().get_dataset(h5path=str(path))
    ours = read_dsrl_hdf5(path)
    for key in KEYS:
        assert loaded[key].dtype == ours[key].dtype
        np.testing.assert_array_equal(loaded[key], ours[key])


def test_writer_appends_chunks_and_failure_leaves_nothing(tmp_path: Path) -> None:
    arrays = dsrl_arrays()
    path = tmp_path / "d.hdf5"
    with DsrlWriter(path, OBS_DIM, ACT_DIM) as writer:
        for start in range(0, ROWS, 128):
            writer.append({k: v[start : start + 128] for k, v in arrays.items()})
    np.testing.assert_array_equal(read_dsrl_hdf5(path)["actions"], arrays["actions"].astype(np.float32))

    bad = tmp_path / "bad.hdf5"
    with pytest.raises(DsrlFormatError, match="'actions'.*shape"), DsrlWriter(bad, OBS_DIM, ACT_DIM) as writer:
        writer.append(arrays)
        writer.append({**arrays, "actions": arrays["actions"][:, :1]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]


def test_chunks_cover_all_rows_in_order(tmp_path: Path) -> None:
    path = tmp_path / "d.hdf5"
    write_dsrl_hdf5(path, dsrl_arrays())
    with DsrlReader(path) as reader:
        assert (reader.rows, reader.obs_dim, reader.act_dim) == (ROWS, OBS_DIM, ACT_DIM)
        chunks = list(reader.chunks(chunk_rows=128))
    assert [start for start, _ in chunks] == [0, 128, 256]
    whole = read_dsrl_hdf5(path)
    for key in KEYS:
        np.testing.assert_array_equal(np.concatenate([c[key] for _, c in chunks]), whole[key])


def test_reader_accepts_trailing_unit_axis_on_scalars(tmp_path: Path) -> None:
    """dsrl accepts (N, 1) rewards/costs/flags; so does the reader, returning (N,)."""
    arrays = dsrl_arrays()
    arrays = {k: v[:, None] if v.ndim == 1 else v for k, v in arrays.items()}
    back = read_dsrl_hdf5(write_raw(tmp_path / "d.hdf5", arrays))
    assert back["rewards"].shape == back["terminals"].shape == (ROWS,)
    assert back["terminals"].dtype == np.bool_


def _broken(kind: str, obs_dim: int, act_dim: int) -> tuple[dict[str, np.ndarray] | bytes, str | None, str]:
    """(file content, key the message must name, problem text) for each kind of broken file."""
    arrays = dsrl_arrays(obs_dim=obs_dim, act_dim=act_dim)
    if kind == "missing key":
        return {k: v for k, v in arrays.items() if k != "costs"}, "costs", "missing"
    if kind == "length mismatch":
        return {**arrays, "rewards": arrays["rewards"][:-1]}, "rewards", "length"
    if kind == "nan":
        arrays["observations"][7, 1] = np.nan
        return arrays, "observations", "NaN or inf at row 7"
    if kind == "inf":
        arrays["next_observations"][9, 0] = np.inf
        return arrays, "next_observations", "NaN or inf at row 9"
    if kind == "negative cost":
        arrays["costs"][11] = -1.0
        return arrays, "costs", "negative cost at row 11"
    if kind == "bad flag":
        arrays["timeouts"][3] = 2
        return arrays, "timeouts", "0/1"
    if kind == "zero rows":
        return {k: v[:0] for k, v in arrays.items()}, "observations", "empty"
    if kind == "truncated":
        return dsrl_arrays(rows=20000, obs_dim=obs_dim, act_dim=act_dim), None, "truncated or corrupt"
    if kind == "not hdf5":
        return b"obs,actions\n1,2\n", None, "not a readable HDF5 file"
    if kind == "empty file":
        return b"", None, "empty file"
    raise AssertionError(kind)


BROKEN_KINDS = (
    "missing key",
    "length mismatch",
    "nan",
    "inf",
    "negative cost",
    "bad flag",
    "zero rows",
    "truncated",
    "not hdf5",
    "empty file",
)


def make_broken_file(
    path: Path, kind: str, obs_dim: int = OBS_DIM, act_dim: int = ACT_DIM
) -> tuple[str | None, str]:
    """Write a broken DSRL file of `kind`; return (key, problem) the error must name."""
    content, key, problem = _broken(kind, obs_dim, act_dim)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif kind == "truncated":
        write_dsrl_hdf5(path, content)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        write_raw(path, content)
    return key, problem


@pytest.mark.parametrize("kind", BROKEN_KINDS)
def test_reader_names_file_key_and_problem(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "broken.hdf5"
    key, problem = make_broken_file(path, kind)
    with pytest.raises(DsrlFormatError) as info:
        read_dsrl_hdf5(path)
    message = str(info.value)
    assert str(path) in message and problem in message and "\n" not in message
    if key:
        assert info.value.key == key and f"'{key}'" in message


def test_check_dims_names_the_mismatching_key(tmp_path: Path) -> None:
    path = tmp_path / "d.hdf5"
    write_dsrl_hdf5(path, dsrl_arrays())
    with DsrlReader(path) as reader:
        reader.check_dims(OBS_DIM, ACT_DIM)
        with pytest.raises(DsrlFormatError, match=r"'observations': size 5 does not match the task's 6"):
            reader.check_dims(OBS_DIM + 1, ACT_DIM)
        with pytest.raises(DsrlFormatError, match=r"'actions': size 2 does not match the task's 3"):
            reader.check_dims(OBS_DIM, ACT_DIM + 1)
