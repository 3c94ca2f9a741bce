"""make_env on the real simulators, for all 38 tasks: spaces, seeded rollouts, info["cost"], time limits,
determinism, and the RLlib registration.

Creating an env costs ~0.1 s (Bullet, velocity), 2-7 s (Safety-Gymnasium navigation compiles its MuJoCo
model at every reset) and ~1 s (MetaDrive). Each task's first rollout is cached and shared by the
tests; the tests that create a second navigation or MetaDrive env are marked slow.
"""

import functools
import subprocess
import sys
from dataclasses import dataclass

import gymnasium
import numpy as np
import pytest

from rllib_caps.envs import make_env, register_envs
from rllib_caps.envs.tasks import TASKS, TaskSpec, get_task
from rllib_caps.utils.smoke import SMOKE_EPISODE_STEPS, SMOKE_TEST_ENV, smoke_evaluation_env_config

SEED = 3
STEPS = 20
SLOW_SUITES = ("safetygym", "metadrive")


@dataclass(frozen=True)
class Rollout:
    """What one seeded rollout of fixed actions produced."""

    obs_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    action_low: np.ndarray
    action_high: np.ndarray
    time_limit: int | None
    obs: np.ndarray
    rewards: np.ndarray
    costs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


def _time_limit(env: gymnasium.Env) -> int | None:
    """max_episode_steps of the TimeLimit wrapper in the env's wrapper chain, if any."""
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            return env._max_episode_steps
        env = env.env
    return None


def _actions(task: TaskSpec) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.uniform(task.action_low, task.action_high, (STEPS, task.act_dim)).astype(np.float32)


def _rollout(name: str, seed: int) -> Rollout:
    task = get_task(name)
    env = make_env(task)
    try:
        obs, _ = env.reset(seed=seed)
        observations, rewards, costs, terminated, truncated = [obs], [], [], [], []
        for action in _actions(task):
            obs, reward, term, trunc, info = env.step(action)
            observations.append(obs)
            rewards.append(reward)
            costs.append(info["cost"])
            terminated.append(term)
            truncated.append(trunc)
            if term or trunc:
                break
        return Rollout(
            obs_shape=env.observation_space.shape,
            action_shape=env.action_space.shape,
            action_low=env.action_space.low,
            action_high=env.action_space.high,
            time_limit=_time_limit(env),
            obs=np.asarray(observations, dtype=np.float64),
            rewards=np.asarray(rewards, dtype=np.float64),
            costs=np.asarray(costs, dtype=np.float64),
            terminated=np.asarray(terminated),
            truncated=np.asarray(truncated),
        )
    finally:
        env.close()


@functools.cache
def _first_rollout(name: str) -> Rollout:
    return _rollout(name, SEED)


def _params(slow_suites: tuple[str, ...]) -> list:
    return [
        pytest.param(name, marks=pytest.mark.slow) if spec.suite in slow_suites else name
        for name, spec in TASKS.items()
    ]


@pytest.mark.parametrize("name", _params(()))
def test_seeded_rollout(name: str) -> None:
    task, run = TASKS[name], _first_rollout(name)
    assert run.obs_shape == (task.obs_dim,)
    assert run.action_shape == (task.act_dim,)
    np.testing.assert_array_equal(run.action_low, task.action_low)
    np.testing.assert_array_equal(run.action_high, task.action_high)
    assert run.time_limit == task.max_episode_steps
    assert run.obs.shape[1:] == (task.obs_dim,)
    assert np.isfinite(run.obs).all() and np.isfinite(run.rewards).all() and np.isfinite(run.costs).all()
    assert (run.costs >= 0).all()
    assert not run.truncated.any()


@pytest.mark.parametrize("name", _params(SLOW_SUITES))
def test_same_seed_same_trajectory(name: str) -> None:
    first, second = _first_rollout(name), _rollout(name, SEED)
    for field in ("obs", "rewards", "costs", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(second, field), getattr(first, field), err_msg=field)


# MetaDrive is left out: a new seed changes only the traffic, which 20 steps may never meet.
@pytest.mark.parametrize(
    "name",
    [n for n, t in TASKS.items() if t.suite in ("bullet", "velocity")]
    + [pytest.param("PointGoal1", marks=pytest.mark.slow)],
)
def test_other_seed_other_trajectory(name: str) -> None:
    assert not np.array_equal(_rollout(name, SEED + 1).obs[0], _first_rollout(name).obs[0])


def test_make_env_seed_applies_to_first_reset() -> None:
    env = make_env("BallCircle", seed=SEED)
    obs, _ = env.reset()
    env.close()
    np.testing.assert_array_equal(obs, _first_rollout("BallCircle").obs[0])


@pytest.mark.parametrize("name", ["BallRun", "SwimmerVelocity"])
def test_truncates_at_dsrl_episode_length(name: str) -> None:
    env = make_env(name, seed=SEED)
    env.reset()
    zeros = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
    for step in range(1, TASKS[name].max_episode_steps + 1):
        _, _, terminated, truncated, _ = env.step(zeros)
        assert not terminated
        assert truncated == (step == TASKS[name].max_episode_steps)
    env.close()


def test_a_smoke_tests_evaluation_envs_time_out_after_its_step_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``RLLIB_CAPS_SMOKE_TEST`` an evaluation env (``make_env`` with ``smoke_evaluation_env_config``: the
    Ray-free evaluation's, and RLlib's evaluation EnvRunners' through the config's evaluation ``env_config``) times
    out after ``SMOKE_EPISODE_STEPS`` steps; without it, and for any other env, at the task's episode length."""
    from rllib_caps import CAPSConfig

    monkeypatch.setenv(SMOKE_TEST_ENV, "1")
    env = make_env("BallRun", seed=SEED, **smoke_evaluation_env_config())
    env.reset()
    zeros = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
    ends = [env.step(zeros)[2:4] for _ in range(SMOKE_EPISODE_STEPS)]
    env.close()
    assert ends == [(False, False)] * (SMOKE_EPISODE_STEPS - 1) + [(False, True)]
    assert SMOKE_EPISODE_STEPS < TASKS["BallRun"].max_episode_steps
    assert _time_limit(make_env("BallRun")) == TASKS["BallRun"].max_episode_steps  # training data, collection
    evaluation = CAPSConfig().environment("BallRun").apply_smoke_test_limits().get_evaluation_config_object()
    assert _time_limit(make_env("BallRun", **evaluation.env_config)) == SMOKE_EPISODE_STEPS
    monkeypatch.setenv(SMOKE_TEST_ENV, "0")
    assert smoke_evaluation_env_config() == {}


def test_unknown_task_is_an_error() -> None:
    with pytest.raises(ValueError, match="closest valid names: BallRun"):
        make_env("BallRnu")


def test_importing_envs_does_not_import_ray() -> None:
    code = "import sys, rllib_caps.envs; assert 'ray' not in sys.modules, 'ray was imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_register_envs_with_rllib() -> None:
    from ray.tune.registry import ENV_CREATOR, _global_registry

    register_envs()
    for spec in TASKS.values():
        assert _global_registry.contains(ENV_CREATOR, spec.id)
        assert _global_registry.contains(ENV_CREATOR, spec.name)
    creator = _global_registry.get(ENV_CREATOR, "OfflineBallCircle-v0")  # unpickled, as RLlib does
    env = creator({"seed": SEED})
    obs, _ = env.reset()
    env.close()
    np.testing.assert_array_equal(obs, _first_rollout("BallCircle").obs[0])
