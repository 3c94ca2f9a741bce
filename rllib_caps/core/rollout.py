"""Ray-free rollouts of a deployable policy (``core.deployment.DeployedPolicy``: ``CAPSPolicy`` and its kind) on
the real simulator, scored at cost thresholds the DSRL way. ``python -m rllib_caps.evaluate`` and the report's
cost-limit ablation use it.

A policy here has ``module``, ``reset(threshold)``, ``act(obs, cost, reward=...)`` (``cost`` and ``reward``: the
previous step's ``info["cost"]`` and reward; both ignored on an episode's first call) and ``last_outputs`` (name ->
per-env array of what its last ``act`` computed besides the action), which its module's extension turns into the
algorithm's extra results (``AlgorithmExtension.episode_metrics``).

The episodes are those of ``train``'s evaluation on RLlib's EnvRunners (``core.evaluation``), outcome for outcome:
RLlib seeds an evaluation EnvRunner's env with the training seed + its worker index + 1,000,000, resets it with that
seed at the start of each κ's episodes and autoresets it unseeded after each episode, so its later episodes continue
the env's random state. ``evaluate_policy`` does the same on one env, runner by runner (``runner_shares``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from rllib_caps.core.budget import info_cost
from rllib_caps.core.extension import AlgorithmExtension, module_extension
from rllib_caps.core.results import results_dict
from rllib_caps.core.scoring import EpisodeOutcome, reward_range, summarize
from rllib_caps.envs import TaskSpec, get_task, make_env
from rllib_caps.utils.smoke import smoke_evaluation_env_config, smoke_test

EVALUATION_SEED_OFFSET = 1_000_000  # RLlib's EnvRunner: an evaluation runner's seed is seed + worker index + 1e6


def episode_outcome(rewards: Sequence[float], costs: Sequence[float], metrics: dict[str, Any]) -> EpisodeOutcome:
    """An episode's outcome from its per-step rewards and ``info["cost"]``s, summed as RLlib's episodes sum their
    return (in step order) and as ``core.evaluation`` sums their cost, so both paths give the same bits."""
    return EpisodeOutcome(reward=float(sum(rewards)), cost=float(np.asarray(costs, np.float64).sum()),
                          length=len(costs), metrics=metrics)


def run_episode(policy: Any, env: Any, threshold: float, seed: int | None, extension: AlgorithmExtension
                ) -> EpisodeOutcome:
    """One episode of ``policy`` with budget κ = ``threshold``, from ``reset(seed=seed)`` (None: the env's random
    state continues); ``extension`` (of the policy's algorithm) derives its extra metrics."""
    policy.reset(threshold=threshold)
    obs, _ = env.reset(seed=seed)
    step_reward, step_cost = 0.0, 0.0
    rewards, costs, outputs = [], [], []
    done = False
    while not done:
        action = policy.act(obs, step_cost, reward=step_reward)
        outputs.append({name: values[0] for name, values in policy.last_outputs.items()})
        obs, r, terminated, truncated, info = env.step(action)
        step_reward, step_cost = float(r), info_cost(info)
        rewards.append(step_reward)
        costs.append(step_cost)
        done = terminated or truncated
    per_step = {name: np.asarray([o[name] for o in outputs]) for name in outputs[0]}
    return episode_outcome(rewards, costs,
                           extension.episode_metrics(policy.module, per_step, np.asarray(costs, np.float64)))


def episode_seed(policy: Any) -> int:
    """The seed of the first episode of ``train``'s evaluation of ``policy``: its training seed (0 when unknown)
    + 1,000,000, the seed RLlib gives the local evaluation EnvRunner; runner i of several starts from this + i."""
    return int(getattr(policy, "training_seed", None) or 0) + EVALUATION_SEED_OFFSET


def evaluation_runners(policy: Any) -> int:
    """The remote evaluation EnvRunners ``train`` evaluated ``policy`` on (0: the local one; 0 when not recorded)."""
    return int(policy.module.model_config.get("evaluation_runners") or 0)


def runner_shares(episodes: int, runners: int) -> list[tuple[int, int]]:
    """How ``train``'s evaluation splits ``episodes`` over its EnvRunners, as (worker index, episodes): all on the
    local runner (index 0) without remote ones, else as evenly as they go over the remote runners 1 to ``runners``,
    the first ones taking one more."""
    if runners == 0:
        return [(0, episodes)]
    return [(index, len(part)) for index, part in enumerate(np.array_split(np.arange(episodes), runners), start=1)]


def threshold_episodes(policy: Any, env: Any, threshold: float, shares: Sequence[tuple[int, int]], seed: int,
                       extension: AlgorithmExtension | None, on_episode: Callable[[], Any] = lambda: None
                       ) -> list[EpisodeOutcome]:
    """The evaluation episodes at one threshold, as ``train`` runs them: runner i's share (``runner_shares``), its
    first from ``reset(seed=seed + i)`` and its others unseeded; ``on_episode`` is called after each."""
    outcomes = []
    for index, share in shares:
        for i in range(share):
            outcomes.append(run_episode(policy, env, threshold, seed + index if i == 0 else None, extension))
            on_episode()
    return outcomes


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


def evaluate_policy(policy: Any, task: TaskSpec, thresholds: Sequence[float], episodes: int, *,
                    seed: int = EVALUATION_SEED_OFFSET, runners: int | None = None, progress: bool = True
                    ) -> dict[str, Any]:
    """``train``'s evaluation without Ray: every threshold sees the same episodes, split over ``runners`` (default:
    as ``train`` split them, ``evaluation_runners``) as ``runner_shares`` says, runner i's first from
    ``reset(seed=seed + i)`` and its others unseeded. Returns the results schema, with the extra results of the
    policy's algorithm (its module's extension). Under ``RLLIB_CAPS_SMOKE_TEST`` one episode per threshold, of at
    most ``SMOKE_EPISODE_STEPS`` steps."""
    episodes = 1 if smoke_test() else episodes
    shares = runner_shares(episodes, evaluation_runners(policy) if runners is None else runners)
    extension = module_extension(type(policy.module))
    env = make_env(task, **smoke_evaluation_env_config())
    summaries = []
    with tqdm(total=len(thresholds) * episodes, desc=f"evaluate {task.name}", unit="ep",
              disable=not progress) as bar:
        for threshold in thresholds:
            outcomes = threshold_episodes(policy, env, threshold, shares, seed, extension, lambda: bar.update(1))
            summaries.append(summarize(outcomes, threshold, *reward_range(task), extension))
    env.close()
    return results_dict(summaries)
