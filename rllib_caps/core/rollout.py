"""Ray-free rollouts of a deployable policy (``core.deployment.DeployedPolicy``: ``CAPSPolicy`` and its kind) on
the real simulator, scored at cost thresholds the DSRL way. ``python -m rllib_caps.evaluate`` and the report's
cost-limit ablation use it.

A policy here has ``module``, ``reset(threshold)``, ``act(obs, cost, reward=...)`` (``cost`` and ``reward``: the
previous step's ``info["cost"]`` and reward; both ignored on an episode's first call) and ``last_outputs`` (name ->
per-env array of what its last ``act`` computed besides the action), which its module's extension turns into the
algorithm's extra results (``AlgorithmExtension.episode_metrics``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from rllib_caps.core.budget import info_cost
from rllib_caps.core.extension import AlgorithmExtension, module_extension
from rllib_caps.core.results import results_dict
from rllib_caps.core.scoring import EpisodeOutcome, reward_range, summarize
from rllib_caps.envs import TaskSpec, get_task, make_env
from rllib_caps.utils.smoke import smoke_test


def run_episode(policy: Any, env: Any, threshold: float, seed: int, extension: AlgorithmExtension
                ) -> EpisodeOutcome:
    """One episode of ``policy`` with budget κ = ``threshold``, from ``reset(seed=seed)``; ``extension`` (of the
    policy's algorithm) derives its extra metrics."""
    policy.reset(threshold=threshold)
    obs, _ = env.reset(seed=seed)
    reward, cost, step_reward, step_cost = 0.0, 0.0, 0.0, 0.0
    costs, outputs = [], []
    done = False
    while not done:
        action = policy.act(obs, step_cost, reward=step_reward)
        outputs.append({name: values[0] for name, values in policy.last_outputs.items()})
        obs, r, terminated, truncated, info = env.step(action)
        step_reward, step_cost = float(r), info_cost(info)
        reward, cost = reward + step_reward, cost + step_cost
        costs.append(step_cost)
        done = terminated or truncated
    per_step = {name: np.asarray([o[name] for o in outputs]) for name in outputs[0]}
    return EpisodeOutcome(reward=reward, cost=cost, length=len(costs),
                          metrics=extension.episode_metrics(policy.module, per_step, np.asarray(costs, np.float64)))


def episode_seed(policy: Any) -> int:
    """The first episode seed for a policy: 1000 × its training seed (0 when unknown), so evaluations of
    checkpoints trained with different seeds do not share their start states."""
    return 1000 * int(getattr(policy, "training_seed", None) or 0)


def policy_task(policy: Any, name: str | None = None) -> TaskSpec:
    """The task to evaluate ``policy`` on: ``name`` (a DSRL or declared task) where given, else the declared task's spec
    its checkpoint carries (``OfflineSafeConfig.task_spec``), else the DSRL task it was trained on."""
    carried = policy.module.model_config.get("task_spec")
    if carried is not None and (name is None or name.strip().lower() in (carried["name"].lower(),
                                                                          carried["id"].lower())):
        return TaskSpec.from_dict(carried)  # with the ranges derived from its dataset, where it declared none
    if not (name or policy.task):
        raise ValueError("the checkpoint was trained on a custom env that is not a declared task; pass --task (with "
                         "--task-file where it is declared)")
    return get_task(name or policy.task)


def evaluate_policy(policy: Any, task: TaskSpec, thresholds: Sequence[float], episodes: int, *, seed: int = 0,
                    progress: bool = True) -> dict[str, Any]:
    """Every threshold sees the same episode seeds ``seed, seed+1, …``; returns the results schema, with the extra
    results of the policy's algorithm (its module's extension). Under ``RLLIB_CAPS_SMOKE_TEST`` one episode per
    threshold."""
    episodes = 1 if smoke_test() else episodes
    extension = module_extension(type(policy.module))
    env = make_env(task)
    summaries = []
    with tqdm(total=len(thresholds) * episodes, desc=f"evaluate {task.name}", unit="ep",
              disable=not progress) as bar:
        for threshold in thresholds:
            outcomes = []
            for i in range(episodes):
                outcomes.append(run_episode(policy, env, threshold, seed + i, extension))
                bar.update(1)
            summaries.append(summarize(outcomes, threshold, *reward_range(task), extension))
    env.close()
    return results_dict(summaries)
