"""Evaluation at cost thresholds on RLlib's evaluation EnvRunners: the custom evaluation function of every
offline safe algorithm here (``OfflineSafeConfig.custom_evaluation_function``).

For each κ a module that takes κ at deployment is told it (``CostThresholdAPI``), the runners roll out
``evaluation_duration`` episodes from the same seeds (split over the runners by ``rollout.runner_shares``; each runner
resets its env with its RLlib seed first, then autoresets it unseeded: the episodes that ``rollout.evaluate_policy``
reproduces without Ray), and each episode is reduced to an ``EpisodeOutcome``
on its runner (with the extra metrics of the module's extension, e.g. CAPS's head usage). Results go to
``evaluation/dsrl/thresholds/<κ>/...`` and ``evaluation/dsrl/mean`` (the schema of ``rllib_caps.core.results``),
plus RLlib's usual ``evaluation/env_runners`` episode statistics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    EVALUATION_RESULTS,
    NUM_EPISODES,
)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from tqdm import tqdm

from rllib_caps.core.budget import info_cost
from rllib_caps.core.cost_threshold_api import tell_cost_threshold
from rllib_caps.core.extension import module_extension
from rllib_caps.core.keys import RESULTS_KEY
from rllib_caps.core.results import results_dict
from rllib_caps.core.rollout import episode_outcome, runner_shares
from rllib_caps.core.scoring import EpisodeOutcome, reward_range, summarize


def episode_outcomes(episodes: Iterable[Any], module: Any) -> list[EpisodeOutcome]:
    """Undiscounted return, summed ``info["cost"]`` and length of each episode, and the extra metrics that
    ``module``'s extension derives from its extra model outputs and costs (``AlgorithmExtension.episode_metrics``)."""
    extension = module_extension(type(module))
    outcomes = []
    for episode in episodes:
        infos = episode.get_infos()[1:]  # infos[0] comes from reset
        costs = np.array([info_cost(info) for info in infos], dtype=np.float64)
        outputs = {name: np.asarray(episode.get_extra_model_outputs(name)) for name in episode.extra_model_outputs}
        metrics = extension.episode_metrics(module, outputs, costs)
        outcomes.append(episode_outcome(episode.get_rewards(), costs, metrics))
    return outcomes


def evaluate_at_thresholds(algorithm: Any, eval_runners: Any) -> tuple[dict, int, int]:
    """RLlib custom evaluation: roll out the policy at every threshold of ``config.thresholds``.

    Each threshold gets ``evaluation_duration`` episodes, split over the runners. ``sample(num_episodes=…)``
    re-seeds each runner's envs with its fixed seed, so every threshold sees the same start states and
    results are reproducible. Returns ``{"dsrl": {"thresholds": {"κ": ...}, "mean": ...}}``, the reward normalised
    only where the task's reward range is known (not for a plain custom env, nor a declared task without one).
    """
    config = algorithm.config
    min_reward, max_reward = reward_range(config.task)
    summaries, all_outcomes = [], []
    extension = module_extension(config.get_default_rl_module_spec().module_class)
    bar = tqdm(config.thresholds, desc=f"evaluate {config.env}", unit="κ", disable=None)  # off when not a terminal
    for threshold in bar:
        bar.set_postfix(kappa=f"{threshold:g}", episodes=config.evaluation_duration)
        eval_runners.foreach_env_runner(lambda er, k=threshold: tell_cost_threshold(er.module, k),
                                        local_env_runner=True)
        outcomes = _sample_outcomes(eval_runners, config.evaluation_duration)
        all_outcomes += outcomes
        summaries.append(summarize(outcomes, threshold, min_reward, max_reward, extension))
    env_steps = sum(o.length for o in all_outcomes)
    results = results_dict(summaries)
    _log_evaluation(algorithm, results, all_outcomes)
    return {RESULTS_KEY: results}, env_steps, env_steps


def _log_evaluation(algorithm: Any, results: dict, outcomes: list[EpisodeOutcome]) -> None:
    """Puts the results where RLlib's ``evaluate()`` reads them: ``evaluation/dsrl/...``, plus RLlib's
    usual ``evaluation/env_runners`` episode statistics over all thresholds."""
    results_logger, runner_logger = MetricsLogger(), MetricsLogger()
    results_logger.log_dict(results, window=1)
    runner_logger.log_dict({
        EPISODE_RETURN_MEAN: float(np.mean([o.reward for o in outcomes])),
        EPISODE_LEN_MEAN: float(np.mean([o.length for o in outcomes])),
        NUM_EPISODES: len(outcomes),
    }, window=1)
    algorithm.metrics.aggregate([results_logger.reduce()], key=(EVALUATION_RESULTS, RESULTS_KEY))
    algorithm.metrics.aggregate([runner_logger.reduce()], key=(EVALUATION_RESULTS, ENV_RUNNER_RESULTS))


def _sample_outcomes(eval_runners: Any, num_episodes: int) -> list[EpisodeOutcome]:
    """Runs the episodes, split over the remote runners (or on the local one), and reduces each episode
    to an ``EpisodeOutcome`` on the runner, so little data moves."""
    def outcomes(er: Any, episodes: int) -> list[EpisodeOutcome]:
        return episode_outcomes(er.sample(num_episodes=episodes, explore=False), er.module)

    shares = dict(runner_shares(num_episodes, eval_runners.num_remote_env_runners()))
    if 0 in shares:
        return outcomes(eval_runners.local_env_runner, num_episodes)
    per_runner = eval_runners.foreach_env_runner(lambda er: outcomes(er, shares[er.worker_index]),
                                                 local_env_runner=False)
    return [outcome for outcomes in per_runner for outcome in outcomes]
