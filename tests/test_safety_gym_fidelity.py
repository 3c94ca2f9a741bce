"""Safety-Gymnasium under the project's stack (gymnasium 1.x, NumPy 2, Python 3.11, the compat fixes)
against rollouts recorded under the original pins (gymnasium 0.28.1, mujoco 2.3.0, NumPy 1.26,
Python 3.10; see tests/fixtures/record_safety_gym_fidelity.py).

MuJoCo states, rewards, costs and episode ends must be bit-identical. Observations may differ in the
last bits: the lidar uses ``np.exp`` and ``np.arctan2``, whose SIMD code (chosen by CPU) differs between
NumPy 1.26 (SVML on AVX-512) and NumPy 2 by a few ulps; measured at most 2e-15 here.
"""

from pathlib import Path

import numpy as np
import pytest

from rllib_caps.envs import make_env

FIXTURE = np.load(Path(__file__).parent / "fixtures" / "safety_gym_fidelity.npz")
SEED = int(FIXTURE["seed"])
EXACT = ("rewards", "costs", "terminated", "truncated", "qpos", "qvel")


def _mujoco_data(env):
    env = env.unwrapped
    return env.task.data if hasattr(env, "task") else env.data


def _replay(name: str, actions: np.ndarray) -> dict[str, np.ndarray]:
    env = make_env(name)
    obs, _ = env.reset(seed=SEED)
    run = {key: [] for key in ("obs", *EXACT)}
    run["obs"].append(obs)
    run["qpos"].append(_mujoco_data(env).qpos.copy())
    run["qvel"].append(_mujoco_data(env).qvel.copy())
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        for key, value in zip(("obs", "rewards", "costs", "terminated", "truncated"),
                              (obs, reward, info["cost"], terminated, truncated), strict=True):
            run[key].append(value)
        run["qpos"].append(_mujoco_data(env).qpos.copy())
        run["qvel"].append(_mujoco_data(env).qvel.copy())
    env.close()
    return {key: np.asarray(values) for key, values in run.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", [str(t) for t in FIXTURE["tasks"]])
def test_rollout_matches_original_pins(name: str) -> None:
    run = _replay(name, FIXTURE[f"{name}.actions"])
    for key in EXACT:
        np.testing.assert_array_equal(run[key], FIXTURE[f"{name}.{key}"], err_msg=f"{name} {key}")
    np.testing.assert_allclose(run["obs"], FIXTURE[f"{name}.obs"], rtol=1e-12, atol=1e-12, err_msg=f"{name} obs")
