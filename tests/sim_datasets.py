"""Tiny real datasets for tests: roll out noisy actions in a task's real simulator, write a DSRL HDF5
file and convert it with the project's converter into ``ROOT/<ShortName>/`` (``metadata.json`` +
``data/*.parquet``), the layout ``--data-root`` expects.

    root = make_data_root(tmp_path, ["BallCircle", "BallRun"], episodes=6)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from data_conversion.dsrl_format import write_dsrl_hdf5
from data_conversion.dsrl_to_parquet import convert
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import get_task

ACTION_SCALES = (0.2, 0.6, 1.0)  # uniform-noise amplitude, cycled per episode: cautious to reckless


def rollouts(task: str, episodes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``episodes`` full episodes of uniform random actions in [-a, a] (a cycles through ACTION_SCALES)
    as DSRL HDF5 arrays; episode ``i`` resets with seed ``seed + i``."""
    spec = get_task(task)
    env = make_env(spec)
    rng = np.random.default_rng(seed)
    columns: dict[str, list] = {k: [] for k in ("observations", "next_observations", "actions", "rewards",
                                                "costs", "terminals", "timeouts")}
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        scale = ACTION_SCALES[i % len(ACTION_SCALES)]
        done = False
        while not done:
            action = rng.uniform(-scale, scale, spec.act_dim).astype(np.float32)
            next_obs, reward, terminated, truncated, info = env.step(action)
            for key, value in (("observations", obs), ("next_observations", next_obs), ("actions", action),
                               ("rewards", reward), ("costs", info["cost"]), ("terminals", terminated),
                               ("timeouts", truncated and not terminated)):
                columns[key].append(value)
            obs, done = next_obs, terminated or truncated
    env.close()
    floats = {k: np.asarray(v, np.float32) for k, v in columns.items() if k not in ("terminals", "timeouts")}
    return floats | {k: np.asarray(columns[k], np.bool_) for k in ("terminals", "timeouts")}


def make_dataset(task: str, out_dir: Path, episodes: int = 6, seed: int = 0) -> Path:
    """A converted dataset directory for ``task`` at ``out_dir`` (through a DSRL HDF5 file beside it)."""
    out_dir = Path(out_dir)
    h5 = out_dir.with_name(f"{out_dir.name}.hdf5")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    write_dsrl_hdf5(h5, rollouts(task, episodes, seed))
    convert(task, h5, out_dir)
    h5.unlink()
    return out_dir


def make_data_root(root: Path, tasks: Sequence[str], episodes: int = 6, seed: int = 0) -> Path:
    """A data root ``root/<ShortName>/`` with one tiny dataset per task."""
    for task in tasks:
        make_dataset(task, Path(root) / get_task(task).name, episodes, seed)
    return Path(root)
