"""One NaN must not switch the cost limit off: the dataset's values are checked by one rule
(``rllib_caps.data.values``) in the converter, ``check_dataset`` (train, tune, evaluate) and the Python API's
loader; the calibration refuses a non-finite shift; both deployable runtimes refuse non-finite observations."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_caps_module import OBS, make_module

from data_conversion.dsrl_format import DsrlFormatError, read_dsrl_hdf5, write_dsrl_hdf5
from rllib_caps.algorithms.caps.calibration import finite_shift
from rllib_caps.algorithms.caps.export import export_onnx
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.data import DatasetError, TransitionDataset
from rllib_caps.data.schema import ACTIONS, COSTS, REWARDS, arrow_table
from rllib_caps.data.schema import OBS as OBS_COLUMN
from rllib_caps.data.validation import check_dataset
from rllib_caps.data.values import MIN_ROWS, column_problem, size_problem
from rllib_caps.envs import get_task
from rllib_caps.onnx_runtime import ONNXCAPSPolicy
from rllib_caps.utils.checksum import file_sha256

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_column_problem_names_the_first_bad_row_and_value() -> None:
    good = np.zeros((4, 3), np.float32)
    assert column_problem(good) is None and column_problem(good, cost=True, normalised_action=True) is None
    bad = good.copy()
    bad[2, 1] = np.nan
    assert column_problem(bad, first_row=10) == "NaN or inf at row 12 (value nan)"
    bad[2, 1] = -np.inf
    assert column_problem(bad) == "NaN or inf at row 2 (value -inf)"
    costs = np.array([0.0, 1.0, -0.5], np.float32)
    assert column_problem(costs) is None
    assert column_problem(costs, cost=True) == "negative cost at row 2 (value -0.5)"
    actions = np.array([[0.5, -1.0], [1.0, 1.5]], np.float32)
    assert column_problem(actions) is None
    outside = column_problem(actions, normalised_action=True)
    assert outside == "action outside the normalised [-1, 1] at row 1 (value 1.5)"
    assert size_problem(MIN_ROWS) is None and "only 5 transitions" in size_problem(5)


def planted(tmp_path: Path, column: str, value: float, row: int = 7) -> Path:
    """A copy of the bundled dataset with ``value`` written at ``row`` of ``column``, its checksums recomputed: a
    dataset whose integrity checks pass, so only the value check can catch it."""
    dataset = tmp_path / "BallCircle"
    shutil.copytree(BUNDLED, dataset)
    part = sorted((dataset / "data").glob("*.parquet"))[0]
    table = pq.read_table(part)
    columns = {name: np.stack(table.column(name).to_numpy(zero_copy_only=False)) if name in (OBS_COLUMN, ACTIONS,
               "new_obs") else table.column(name).to_numpy() for name in table.column_names}
    columns[column] = columns[column].copy()
    columns[column][row] = value
    pq.write_table(arrow_table(columns), part)
    metadata = json.loads((dataset / "metadata.json").read_text())
    metadata["files"][part.name] = file_sha256(part)
    (dataset / "metadata.json").write_text(json.dumps(metadata))
    return dataset


def check(dataset: Path) -> Path:
    spec = get_task("BallCircle")
    return check_dataset(dataset, task=spec.name, obs_dim=spec.obs_dim, act_dim=spec.act_dim)


@pytest.mark.parametrize(("column", "value", "message"), [
    (OBS_COLUMN, math.nan, "column 'obs': NaN or inf at row 7"),
    (REWARDS, math.inf, "column 'rewards': NaN or inf at row 7"),
    (COSTS, math.inf, "column 'costs': NaN or inf at row 7"),
    (COSTS, -1.0, "column 'costs': negative cost at row 7"),
    (ACTIONS, 3.0, "column 'actions': action outside the normalised [-1, 1] at row 7"),
])
def test_checksummed_datasets_with_bad_values_are_refused_naming_file_column_and_row(
        tmp_path: Path, column: str, value: float, message: str) -> None:
    dataset = planted(tmp_path, column, value)
    with pytest.raises(DatasetError) as refused:
        check(dataset)
    assert f"part-00000.parquet: {message}" in str(refused.value)
    with pytest.raises(DatasetError) as refused:  # the Python API's loader too
        TransitionDataset.from_parquet(dataset)
    assert message in str(refused.value)


def test_too_small_and_empty_part_datasets(tmp_path: Path) -> None:
    dataset = tmp_path / "BallCircle"
    shutil.copytree(BUNDLED, dataset)
    part = sorted((dataset / "data").glob("*.parquet"))[0]
    table = pq.read_table(part)
    pq.write_table(table.slice(0, 5), part)
    with pytest.raises(DatasetError, match="only 5 transitions"):
        TransitionDataset.from_parquet(dataset)
    pq.write_table(table.slice(0, 0), dataset / "data" / "part-empty.parquet")  # an empty part: not a traceback
    spec = get_task("BallCircle")
    with pytest.raises(DatasetError, match="only 5 transitions"):
        check_dataset(dataset, task=spec.name, obs_dim=spec.obs_dim, act_dim=spec.act_dim, verify=False)


def test_train_on_a_dataset_with_one_nan_is_refused_before_ray_starts(tmp_path: Path) -> None:
    """In a process of its own, so that "before Ray starts" is not hidden by a Ray this test process holds."""
    dataset = planted(tmp_path, OBS_COLUMN, math.nan, row=123)
    out = tmp_path / "ckpt"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, "-m", "rllib_caps.train", "--task", "BallCircle", "--data", str(dataset),
                          "--out", str(out), "--steps", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: {dataset / 'data' / 'part-00000.parquet'}: column 'obs': NaN or inf at row 123 (value nan); fix or "
        "re-convert the dataset")
    assert "Ray" not in run.stderr and not out.exists()


def test_the_converter_applies_the_same_rule(tmp_path: Path) -> None:
    arrays = {
        "observations": np.zeros((8, 3), np.float32), "next_observations": np.zeros((8, 3), np.float32),
        "actions": np.zeros((8, 2), np.float32), "rewards": np.zeros(8, np.float32),
        "costs": np.zeros(8, np.float32), "terminals": np.zeros(8, bool), "timeouts": np.eye(8, dtype=bool)[7],
    }
    arrays["costs"][4] = -2.0
    write_dsrl_hdf5(tmp_path / "bad.hdf5", arrays)
    with pytest.raises(DsrlFormatError, match="key 'costs': negative cost at row 4 \\(value -2.0\\)"):
        read_dsrl_hdf5(tmp_path / "bad.hdf5")


def test_a_non_finite_calibration_shift_is_refused() -> None:
    assert finite_shift(0.25) == 0.25
    policy = CAPSPolicy(make_module())
    for shift in (math.nan, math.inf):
        with pytest.raises(ValueError, match="calibration shift is .*not finite"):
            policy.set_cost_shift(shift)
    assert policy.cost_shift == 0.0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_both_runtimes_refuse_non_finite_observations_alike(tmp_path: Path, value: float) -> None:
    module = make_module(num_heads=2)
    export_onnx(module, tmp_path / "policy.onnx")
    policies = [CAPSPolicy(module), ONNXCAPSPolicy(tmp_path / "policy.onnx")]
    obs = np.zeros((2, OBS), np.float32)
    obs[1, 0] = value
    messages = []
    for policy in policies:
        policy.reset(20.0, batch_size=2)
        with pytest.raises(ValueError) as err:
            policy.act(obs)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == "obs contains NaN or inf"
