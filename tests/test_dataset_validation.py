"""Datasets are checked before any expensive work: files, schema, sizes, task, and the converter's checksums;
the train CLI refuses bad input before Ray starts and leaves nothing behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rllib_caps.data import DatasetError
from rllib_caps.data.validation import check_dataset
from rllib_caps.envs import get_task
from rllib_caps.train import main as train_main

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    copy = tmp_path / "BallCircle"
    shutil.copytree(BUNDLED, copy)
    return copy


def check(path: Path, task: str = "BallCircle", **kwargs) -> Path:
    spec = get_task(task)
    return check_dataset(path, task=spec.name, obs_dim=spec.obs_dim, act_dim=spec.act_dim, **kwargs)


def test_the_bundled_dataset_passes(dataset: Path) -> None:
    assert check(dataset) == dataset / "data"


def test_a_flipped_byte_is_caught_naming_the_file(dataset: Path) -> None:
    part = next((dataset / "data").glob("*.parquet"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=f"{part.name}: its sha256 differs"):
        check(dataset)


def test_another_tasks_dataset_with_the_same_sizes_needs_an_explicit_flag(dataset: Path) -> None:
    assert get_task("CarCircle").obs_dim == get_task("BallCircle").obs_dim
    with pytest.raises(DatasetError, match="for task 'BallCircle', not 'CarCircle'.*--allow-task-mismatch"):
        check(dataset, "CarCircle")
    assert check(dataset, "CarCircle", allow_task_mismatch=True) == dataset / "data"


def test_sizes_that_do_not_fit_the_task_are_refused(dataset: Path) -> None:
    with pytest.raises(DatasetError, match="column 'obs' has width 8, but task DroneRun has 17"):
        check(dataset, "DroneRun")


def test_missing_empty_and_unlisted_files(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such dataset"):
        check(tmp_path / "nowhere")
    (tmp_path / "empty" / "data").mkdir(parents=True)
    with pytest.raises(DatasetError, match="no Parquet files"):
        check(tmp_path / "empty")
    part = next((dataset / "data").glob("*.parquet"))
    shutil.copy(part, dataset / "data" / "part-99999.parquet")
    with pytest.raises(DatasetError, match="differ from those in"):
        check(dataset)


def test_datasets_without_checksums_or_metadata_are_refused_unless_verify_is_off(dataset: Path, caplog) -> None:
    metadata = json.loads((dataset / "metadata.json").read_text())
    del metadata["files"]
    (dataset / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(DatasetError, match="no file checksums.*--no-verify"):
        check(dataset)
    assert check(dataset, verify=False) == dataset / "data"
    (dataset / "metadata.json").unlink()
    with pytest.raises(DatasetError, match="no metadata.json.*--no-verify"):
        check(dataset)
    assert check(dataset, verify=False) == dataset / "data"
    assert "integrity NOT checked" in caplog.text


def test_the_converters_warnings_are_repeated_on_every_check(dataset: Path, caplog) -> None:
    metadata = json.loads((dataset / "metadata.json").read_text())
    metadata["conversion_warnings"] = ["7 episodes are longer than the task's 200 steps (another task's data?)"]
    (dataset / "metadata.json").write_text(json.dumps(metadata))
    check(dataset)
    assert "converted with a warning: 7 episodes are longer" in caplog.text


def test_train_refuses_bad_input_before_starting_ray(dataset: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "ckpt"
    base = ["--task", "BallCircle", "--data", str(dataset), "--out", str(out)]
    cases = [
        (["--task", "CarCircle", "--data", str(dataset), "--out", str(out)], "--allow-task-mismatch"),
        ([*base, "--heads", "1"], "--heads (num_heads) must be >= 2"),
        ([*base, "--steps", "0"], "--steps (num_gradient_steps) must be >= 1"),
        ([*base, "--expectile-cost", "1.0"], "--expectile-cost (expectile_cost) must be in (0, 1)"),
        ([*base, "--cost-head-episode-limit", "-1"],
         "--cost-head-episode-limit (cost_head_episode_limit) must be a total episode cost >= 0"),
        ([*base, "--hidden", "0"], "--hidden (hidden) must be a non-empty list"),
        ([*base, "--eval-episodes", "-1"], "--eval-episodes must be >= 0"),
        ([*base, "--num-gpus", "1"], "CUDA GPUs"),
        (["--task", "BallCircle", "--data", str(tmp_path / "nowhere"), "--out", str(out)], "no such dataset"),
    ]
    for argv, message in cases:
        assert train_main(argv) == 2, argv
        assert message in capsys.readouterr().err
    assert not out.exists() and not any(p.name.startswith(".ckpt") for p in tmp_path.iterdir())


def test_train_refuses_an_unwritable_out_before_training(dataset: Path, tmp_path: Path, capsys) -> None:
    """--out under a regular file cannot be created (even as root): one line, exit 2, before any training."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert train_main(["--task", "BallCircle", "--data", str(dataset), "--out", str(blocker / "ckpt")]) == 2
    assert "cannot write there" in capsys.readouterr().err
