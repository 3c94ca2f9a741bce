"""DSRL's MetaDrive tasks on metadrive-simulator 0.4.3: configuration, gymnasium API, seeding, costs and the
one-engine-per-process rule. Real simulator throughout, with the network blocked."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import socket
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rllib_caps.envs.metadrive import (
    ACT_DIM,
    LIDAR_DIM,
    OBS_DIM,
    TASK_NAMES,
    dsrl_config,
    make_metadrive_env,
)
from rllib_caps.envs.tasks import get_task

FULL_THROTTLE = np.array([0.0, 1.0])
HARD_LEFT = np.array([1.0, 1.0])


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt (e.g. MetaDrive's asset download) fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _rollout(env: Any, seed: int, actions: np.ndarray) -> tuple[np.ndarray, list[float], list[dict]]:
    obs, _ = env.reset(seed=seed)
    observations, rewards, infos = [obs], [], []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        infos.append(info)
        if terminated or truncated:
            break
    return np.array(observations), rewards, infos


def _traffic_positions(env: Any) -> list[tuple[float, float]]:
    vehicles = env.unwrapped.engine.traffic_manager.vehicles
    return sorted((round(v.position[0], 2), round(v.position[1], 2)) for v in vehicles if v is not env.agent)


def _dsrl_source_configs() -> tuple[dict[str, dict], dict[str, Any]]:
    """Per-task configs and the shared default-config update, read from dsrl 0.1.0's source (not imported:
    it targets the uninstallable MetaDrive fork)."""
    package_dir = importlib.util.find_spec("dsrl").submodule_search_locations[0]
    tree = ast.parse(Path(package_dir, "offline_metadrive", "gym_envs.py").read_text())

    def value(node: ast.expr) -> Any:
        return node.attr.lower() if isinstance(node, ast.Attribute) else ast.literal_eval(node)

    tasks, shared = {}, {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("Offline")):
        # each class holds one config literal; ast.walk is breadth-first, so the outermost dict comes first
        node = next(n for n in ast.walk(cls) if isinstance(n, ast.Dict) and n.keys)
        entries = {ast.literal_eval(k): value(v) for k, v in zip(node.keys, node.values, strict=True)}
        if cls.name == "SafeMetaDriveEnv_FSRL":
            shared = entries
        else:
            tasks[cls.name.removesuffix("Env").lower()] = entries
    return tasks, shared


def test_config_matches_dsrl_source() -> None:
    tasks, shared = _dsrl_source_configs()
    assert sorted(tasks) == sorted(TASK_NAMES)
    for name, dsrl in tasks.items():
        ours = dsrl_config(name, horizon=dsrl["horizon"])
        renamed = {"num_scenarios" if k == "environment_num" else k: v for k, v in dsrl.items()}
        assert {k: ours[k] for k in renamed} == renamed, name
    # the idm_* keys configure the fork's ego data-collection policy and are dropped on purpose
    kept = {k: v for k, v in shared.items() if not k.startswith("idm_")}
    assert {k: dsrl_config("easysparse", 1000)[k] for k in kept} == kept


def test_unknown_task_is_rejected() -> None:
    with pytest.raises(ValueError, match="easysparse"):
        dsrl_config("easyheavy", 1000)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_creates_resets_and_steps(name: str) -> None:
    task = get_task(name)
    assert (task.obs_dim, task.act_dim, task.max_episode_steps) == (OBS_DIM, ACT_DIM, 1000)
    env = make_metadrive_env(task)
    try:
        assert env.observation_space.shape == (OBS_DIM,)
        assert env.action_space.shape == (ACT_DIM,)
        np.testing.assert_array_equal(env.action_space.low, task.action_low)
        np.testing.assert_array_equal(env.action_space.high, task.action_high)
        actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(20, ACT_DIM))
        actions[:, 0] *= 0.2  # mild steering so most tasks last the 20 steps
        observations, rewards, infos = _rollout(env, 0, actions)
        assert all(env.observation_space.contains(o) for o in observations)
        assert observations.dtype == np.float32 and np.isfinite(observations).all()
        assert all(isinstance(r, float) and np.isfinite(r) for r in rewards)
        assert all(info["cost"] >= 0.0 for info in infos)
    finally:
        env.close()


def test_gymnasium_env_checker_passes() -> None:
    env = make_metadrive_env(get_task("hardmean"))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*seed` function is dropped")  # MetaDrive's own seed()
            check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_seeded_resets_are_reproducible() -> None:
    task = get_task("easydense")
    actions = np.random.default_rng(1).uniform([-0.05, 0.5], [0.05, 1.0], size=(100, ACT_DIM))
    env = make_metadrive_env(task, seed=7)
    try:
        first_obs, _ = env.reset()  # the factory's seed
        run_a = _rollout(env, 7, actions)
        run_b = _rollout(env, 7, actions)
        env.reset(seed=7)
        traffic_7 = _traffic_positions(env)
        env.reset(seed=8)
        traffic_8 = _traffic_positions(env)
    finally:
        env.close()
    np.testing.assert_array_equal(first_obs, run_a[0][0])
    assert (run_a[0][:, -LIDAR_DIM:] < 1.0).any(), "the rollout should meet traffic"
    np.testing.assert_array_equal(run_a[0], run_b[0])
    assert run_a[1] == run_b[1]
    assert [i["cost"] for i in run_a[2]] == [i["cost"] for i in run_b[2]]
    assert traffic_7 != traffic_8, "another seed should place other traffic"

    fresh = make_metadrive_env(task)
    try:
        np.testing.assert_array_equal(_rollout(fresh, 7, actions)[0], run_a[0])
    finally:
        fresh.close()


def test_truncates_at_the_task_horizon() -> None:
    env = make_metadrive_env(dataclasses.replace(get_task("easysparse"), max_episode_steps=25))
    try:
        env.reset(seed=0)
        for step in range(1, 26):
            _, _, terminated, truncated, _ = env.step(np.array([0.0, -1.0]))  # stand still
            assert not terminated
            assert truncated == (step == 25)
    finally:
        env.close()


def test_out_of_road_costs_one_and_terminates() -> None:
    env = make_metadrive_env(get_task("easysparse"))
    try:
        _, _, infos = _rollout(env, 0, np.tile(HARD_LEFT, (60, 1)))
    finally:
        env.close()
    last = infos[-1]
    assert last["out_of_road"] and last["out_of_road_cost"] == 1.0
    assert last["cost"] == pytest.approx(1.0 + last["velocity_cost"] + last["proximity_cost"])
    assert all(i["cost"] < 1.0 for i in infos[:-1])


def test_velocity_cost_is_in_km_per_hour() -> None:
    env = make_metadrive_env(get_task("mediumsparse"))
    try:
        observations, _, infos = _rollout(env, 0, np.tile(FULL_THROTTLE, (40, 1)))
    finally:
        env.close()
    # observation index 3 is the speed, (km/h + 1) / (max km/h + 1) with a max of 80 km/h
    speed_kmh = observations[1:, 3].astype(np.float64) * 81.0 - 1.0
    expected = np.maximum(0.0, 1e-2 * (speed_kmh - 10.0))
    np.testing.assert_allclose([i["velocity_cost"] for i in infos], expected, atol=1e-5)
    assert infos[-1]["velocity_cost"] > 0.05
    assert all(i["cost"] == pytest.approx(i["velocity_cost"] + i["proximity_cost"]) for i in infos)


@pytest.mark.slow
def test_crash_and_proximity_costs_fire() -> None:
    env = make_metadrive_env(get_task("easydense"))
    try:
        episodes = (_rollout(env, seed, np.tile(FULL_THROTTLE, (150, 1)))[2] for seed in range(5))
        infos = next((e for e in episodes if e[-1]["crash_vehicle"]), None)
    finally:
        env.close()
    assert infos, "driving straight at full throttle through dense traffic should hit a car"
    assert infos[-1]["crash_cost"] == 1.0 and infos[-1]["cost"] >= 1.0
    assert max(i["proximity_cost"] for i in infos) > 0.0


def test_one_engine_per_process() -> None:
    old = make_metadrive_env(get_task("easymean"))
    old.reset(seed=0)
    new = make_metadrive_env(get_task("easymean"))  # an equal config must not pass for the old env's
    with pytest.raises(RuntimeError, match="superseded"):
        old.reset(seed=0)
    with pytest.raises(RuntimeError, match="superseded"):
        old.step(FULL_THROTTLE)
    old.close()  # must not close the newer env's engine
    new.reset(seed=0)
    new.step(FULL_THROTTLE)
    new.close()
    obs, _ = new.reset(seed=0)  # a closed env restarts its engine
    assert obs.shape == (OBS_DIM,)
    new.close()


@pytest.mark.slow
def test_idm_driver_matches_dsrl_best_return_on_easy() -> None:
    """The easy map and reward match the fork's: MetaDrive's IDM policy, driving the ego car along the
    route, earns DSRL's best recorded episode return."""
    from metadrive.policy.idm_policy import IDMPolicy

    task = get_task("easysparse")
    env = make_metadrive_env(task, agent_policy=IDMPolicy)
    try:
        _, rewards, infos = _rollout(env, 0, np.zeros((task.max_episode_steps, ACT_DIM)))
    finally:
        env.close()
    assert infos[-1]["arrive_dest"]
    assert sum(rewards) == pytest.approx(task.max_reward, rel=0.01)
