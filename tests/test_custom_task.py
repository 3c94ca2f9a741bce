"""A task that is not in DSRL, declared in a YAML file with an env of its own (``tests/custom_env.py``, the cost in
``info["cost"]``): its plain HDF5 with DSRL's keys converts with ``dsrl_to_parquet --task-file``, ``train`` trains on
it (its evaluation on a remote EnvRunner that has not read the file) and ``evaluate`` rolls the checkpoint out, all
through the CLIs; a score is called normalised only with a range, and the range's source is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from data_conversion.dsrl_to_parquet import main as convert_main
from rllib_caps.envs import make_env, tasks
from rllib_caps.evaluate import main as evaluate_main
from rllib_caps.train import main as train_main

TASK_FILE = """
tasks:
  - name: LineWorld
    entry_point: tests.custom_env:LineWorld
    max_episode_steps: 25
    thresholds: [2, 6]
  - name: LineWorldWide            # the same env, its wall further out, and no ranges of its own
    entry_point: tests.custom_env:LineWorld
    env_kwargs: {wall: 2.0}
    max_episode_steps: 25
    thresholds: [2]
"""


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLIs declare into a copy of the registry, so no declared task outlives the test."""
    monkeypatch.setattr(tasks, "CUSTOM_TASKS", {})
    monkeypatch.setattr(tasks, "_BY_KEY", dict(tasks._BY_KEY))
    monkeypatch.setattr(tasks, "_TASK_FILES", {})


def write_dsrl_h5(path: Path, task_file: Path, episodes: int) -> None:
    """Random-action episodes of LineWorld as a user would write them: one HDF5 file with DSRL's keys."""
    tasks.load_task_file(task_file)
    env, rng = make_env("LineWorld"), np.random.default_rng(0)
    rows: dict[str, list] = {key: [] for key in ("observations", "next_observations", "actions", "rewards", "costs",
                                                 "terminals", "timeouts")}
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            action = rng.uniform(-1.0, 1.0, 1).astype(np.float32) * (episode % 3) / 2  # three behaviours, three costs
            next_obs, reward, terminated, truncated, info = env.step(action)
            for key, value in zip(rows, (obs, next_obs, action, reward, info["cost"], terminated, truncated),
                                  strict=True):
                rows[key].append(value)
            obs, done = next_obs, terminated or truncated
    with h5py.File(path, "w") as f:
        for key, values in rows.items():
            f.create_dataset(key, data=np.asarray(values, dtype=bool if key in ("terminals", "timeouts")
                                                  else np.float32))


def test_a_declared_task_converts_trains_and_evaluates_through_the_clis(ray_session, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    task_file, h5, data, ckpt = (tmp_path / "tasks.yaml", tmp_path / "line.hdf5", tmp_path / "LineWorld",
                                 tmp_path / "ckpt")
    task_file.write_text(TASK_FILE)
    write_dsrl_h5(h5, task_file, episodes=12)
    tasks.CUSTOM_TASKS.clear()  # as in a new process: only the CLIs' --task-file declares the tasks from here on
    tasks._BY_KEY = {key: spec for key, spec in tasks._BY_KEY.items() if spec.suite != tasks.CUSTOM_SUITE}

    assert convert_main(["--task-file", str(task_file), "--task", "LineWorld", "--h5", str(h5),
                         "--out", str(data)]) == 0
    metadata = json.loads((data / "metadata.json").read_text())
    returns = metadata["episode_reward_return"]
    assert metadata["task"] == "LineWorld" and metadata["task_spec"]["range_source"] == "dataset"
    assert [metadata["task_spec"]["min_reward"], metadata["task_spec"]["max_reward"]] == [returns["min"],
                                                                                          returns["max"]]

    capsys.readouterr()
    assert train_main(["--task", "Absent", "--task-file", str(task_file), "--data", str(data),
                       "--out", str(ckpt)]) == 2  # a task asked for that the file does not declare
    assert "unknown task 'Absent'" in (err := capsys.readouterr().err) and f"{task_file} declares LineWorld" in err
    assert not ckpt.exists()

    assert train_main(["--task", "LineWorld", "--task-file", str(task_file), "--data", str(data), "--out",
                       str(ckpt), "--steps", "200", "--updates-per-iteration", "100", "--hidden", "16", "16",
                       "--batch-size", "64", "--eval-episodes", "2", "--eval-runners", "1"]) == 0
    trained = json.loads((ckpt / "evaluation.json").read_text())
    assert trained["scale"] == {"reward": "normalised", "range_source": "dataset",
                                "reward_range": [returns["min"], returns["max"]],
                                "cost_range": [metadata["episode_cost_return"]["min"],
                                               metadata["episode_cost_return"]["max"]]}
    assert set(trained["thresholds"]) == {"2", "6"} and "normalized_reward" in trained["mean"]
    assert "(reward normalised by the dataset range)" in capsys.readouterr().out

    tasks.CUSTOM_TASKS.clear()  # evaluate needs no --task-file: the checkpoint carries the spec, ranges included
    tasks._BY_KEY = {key: spec for key, spec in tasks._BY_KEY.items() if spec.suite != tasks.CUSTOM_SUITE}
    assert evaluate_main(["--checkpoint", str(ckpt), "--episodes", "2", "--out", str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert evaluated["scale"] == trained["scale"] and "normalized_reward" in evaluated["thresholds"]["6"]

    assert evaluate_main(["--checkpoint", str(ckpt), "--task-file", str(task_file), "--task", "LineWorldWide",
                          "--allow-task-mismatch", "--episodes", "2", "--out", str(tmp_path / "wide.json")]) == 0
    wide = json.loads((tmp_path / "wide.json").read_text())
    assert wide["scale"] == {"reward": "raw", "range_source": None}  # no range declared, none derived: raw
    assert "normalized_reward" not in wide["thresholds"]["2"] and "normalized_reward" not in wide["mean"]
    assert "reward raw: the task has no reward range" in capsys.readouterr().out
