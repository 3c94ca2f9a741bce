"""Ray-free rollouts of a deployable policy (``CAPSPolicy`` and its kind) on the real simulator, scored at
cost thresholds the DSRL way. ``python -m rllib_caps.evaluate`` and the report's cost-limit ablation use it.

A policy here has ``reset(threshold, fixed_head=None)``, ``act(obs, cost, reward=...)`` (``cost`` and ``reward``:
the previous step's ``info["cost"]`` and reward; both ignored on an episode's first call), ``num_heads`` and
``last_heads``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from rllib_caps.core.budget import info_cost
from rllib_caps.core.calibration import CostCriticAPI
from rllib_caps.core.results import results_dict
from rllib_caps.core.scoring import EpisodeOutcome, summarize
from rllib_caps.envs import TaskSpec, make_env
from rllib_caps.utils.smoke import smoke_test


def run_episode(policy: Any, env: Any, threshold: float, seed: int, fixed_head: int | None = None) -> EpisodeOutcome:
    """One episode of the switching policy (or of ``fixed_head`` alone) with budget κ = ``threshold``,
    from ``reset(seed=seed)``."""
    policy.reset(threshold=threshold, fixed_head=fixed_head)
    obs, _ = env.reset(seed=seed)
    reward, cost, step_reward, step_cost, length = 0.0, 0.0, 0.0, 0.0, 0
    critic = policy if isinstance(policy, CostCriticAPI) else None
    predicted = discounted = None
    counts = np.zeros(policy.num_heads, dtype=np.int64)
    done = False
    while not done:
        action = policy.act(obs, step_cost, reward=step_reward)
        if critic is not None and length == 0:
            predicted = float(critic.predicted_cost(obs[None], critic.last_actions[:1], np.zeros(1))[0])
            discounted = 0.0
        counts[policy.last_heads[0]] += 1
        obs, r, terminated, truncated, info = env.step(action)
        step_reward, step_cost = float(r), info_cost(info)
        if critic is not None:
            discounted += critic.cost_gamma**length * step_cost
        reward, cost, length = reward + step_reward, cost + step_cost, length + 1
        done = terminated or truncated
    return EpisodeOutcome(reward=reward, cost=cost, length=length, head_counts=tuple(int(c) for c in counts),
                          predicted_cost=predicted, discounted_cost=discounted)


def episode_seed(policy: Any) -> int:
    """The first episode seed for a policy: 1000 × its training seed (0 when unknown), so evaluations of
    checkpoints trained with different seeds do not share their start states."""
    return 1000 * int(getattr(policy, "training_seed", None) or 0)


def evaluate_policy(policy: Any, task: TaskSpec, thresholds: Sequence[float], episodes: int, *, seed: int = 0,
                    fixed_head: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Every threshold sees the same episode seeds ``seed, seed+1, …``; returns the results schema.
    Under ``RLLIB_CAPS_SMOKE_TEST`` one episode per threshold."""
    episodes = 1 if smoke_test() else episodes
    env = make_env(task)
    summaries = []
    with tqdm(total=len(thresholds) * episodes, desc=f"evaluate {task.name}", unit="ep",
              disable=not progress) as bar:
        for threshold in thresholds:
            outcomes = []
            for i in range(episodes):
                outcomes.append(run_episode(policy, env, threshold, seed + i, fixed_head))
                bar.update(1)
            summaries.append(summarize(outcomes, threshold, task.min_reward, task.max_reward))
    env.close()
    return results_dict(summaries)
