"""``CAPSConfig`` and ``CAPS``: Constraint-Adaptive Policy Switching (Chemingui et al., AAAI 2025) on
RLlib's new API stack, with IQL as the underlying offline RL algorithm.

    config = (
        CAPSConfig()
        .environment("BallCircle")
        .offline_data(input_="datasets/BallCircle")
        .training(num_heads=4)
    )
    algo = config.build_algo()
    algo.train()
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.offline.offline_data import OfflineData
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    EVALUATION_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_EPISODES,
    TIMERS,
)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from rllib_caps.caps.cost_budget_connector import CostBudget
from rllib_caps.caps.episodes import episode_outcomes
from rllib_caps.data import parquet_files
from rllib_caps.envs import register_envs
from rllib_caps.losses import CAPSLossSettings, default_lambdas
from rllib_caps.results import results_dict
from rllib_caps.scoring import EpisodeOutcome, summarize

IMPLEMENTATIONS = ("paper", "code")


class CAPSConfig(AlgorithmConfig):
    """Configuration of CAPS(IQL). Defaults are the paper's hyperparameters (digest, "Training").

    CAPS-specific settings (``.training(...)``):
        num_heads: K ≥ 2 policy heads: head 0 maximises reward, head K−1 minimises cost.
        lambdas: the K−2 middle heads' trade-offs λ_k; default λ_k = k / ((K − 1) / 2).
        shared_actor: one shared actor body (paper) or K independent actors (ablation).
        implementation: "paper" (Eq. 8 weights, learned std, critics on +c) or "code" (the authors'
            code: summed clipped weights, std fixed at 1, critics on −c). See ``rllib_caps.losses``.
        awr_beta: the advantage temperature β (RLlib's MARWIL/IQL ``beta`` is capped at 1; CAPS uses 3).
        expectile_reward, expectile_cost: IQL expectiles τ_r, τ_c.
        reward_scale: rewards are multiplied by this in training (costs are not).
        max_weight: clip of the advantage weights.
        actor_lr, critic_lr, value_lr: Adam learning rates.
        tau: Polyak coefficient, applied after every gradient step.
        hidden: hidden layer sizes of the actor body, critics and value nets.
        updates_per_iteration: gradient steps per ``Algorithm.train()`` call.
        horizon: episode length T for the switching threshold (default: the task's max episode steps).

    Evaluation (``.evaluation(...)``) rolls out the switching policy at each of ``evaluation_thresholds``
    (default: the task's three DSRL thresholds) for ``evaluation_duration`` episodes each.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or CAPS)
        self.num_heads = 2
        self.lambdas: list[float] | None = None
        self.shared_actor = True
        self.implementation = "paper"
        self.awr_beta = 3.0
        self.expectile_reward = 0.7
        self.expectile_cost = 0.7
        self.reward_scale = 0.1
        self.max_weight = 100.0
        self.actor_lr = 3e-4
        self.critic_lr = 3e-4
        self.value_lr = 3e-4
        self.tau = 0.005
        self.hidden = [512, 512]
        self.updates_per_iteration = 1000
        self.horizon: int | None = None
        self.evaluation_thresholds: list[float] | None = None
        # RLlib settings that differ for CAPS.
        self.gamma = 0.99
        self.lr = None
        self.train_batch_size_per_learner = 512
        self.num_env_runners = 0
        self.normalize_actions = True
        self.evaluation_duration = 20
        self.evaluation_duration_unit = "episodes"
        self.evaluation_config = {"explore": False}
        self.custom_evaluation_function = evaluate_at_thresholds
        self.offline_data_class = InMemoryOfflineData
        self._is_online = False  # no training EnvRunners (like MARWIL/IQL)

    @override(AlgorithmConfig)
    def training(
        self,
        *,
        num_heads: int = NotProvided,
        lambdas: list[float] | None = NotProvided,
        shared_actor: bool = NotProvided,
        implementation: str = NotProvided,
        awr_beta: float = NotProvided,
        expectile_reward: float = NotProvided,
        expectile_cost: float = NotProvided,
        reward_scale: float = NotProvided,
        max_weight: float = NotProvided,
        actor_lr: float = NotProvided,
        critic_lr: float = NotProvided,
        value_lr: float = NotProvided,
        tau: float = NotProvided,
        hidden: list[int] = NotProvided,
        updates_per_iteration: int = NotProvided,
        horizon: int | None = NotProvided,
        **kwargs: Any,
    ) -> CAPSConfig:
        super().training(**kwargs)
        for name, value in locals().items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                setattr(self, name, value)
        return self

    @override(AlgorithmConfig)
    def evaluation(self, *, evaluation_thresholds: list[float] | None = NotProvided, **kwargs: Any) -> CAPSConfig:
        super().evaluation(**kwargs)
        if evaluation_thresholds is not NotProvided:
            self.evaluation_thresholds = evaluation_thresholds
        return self

    @property
    def task(self):
        """The registry entry of ``env`` (a DSRL id or short name), or None for a custom env."""
        from rllib_caps.tasks import TASKS, get_task

        names = {n.lower() for n in TASKS} | {t.id.lower() for t in TASKS.values()}
        return get_task(self.env) if isinstance(self.env, str) and self.env.lower() in names else None

    @property
    def resolved_lambdas(self) -> list[float]:
        return list(self.lambdas) if self.lambdas is not None else default_lambdas(self.num_heads)

    @property
    def thresholds(self) -> list[float]:
        if self.evaluation_thresholds is not None:
            return [float(k) for k in self.evaluation_thresholds]
        if self.task is None:
            raise ValueError("evaluation_thresholds must be set for an env that is not a DSRL task")
        return [float(k) for k in self.task.thresholds]

    @property
    def resolved_horizon(self) -> int:
        if self.horizon is not None:
            return int(self.horizon)
        if self.task is None:
            raise ValueError("horizon must be set for an env that is not a DSRL task")
        return self.task.max_episode_steps

    def loss_settings(self) -> CAPSLossSettings:
        """The hyperparameters the pure loss functions take."""
        return CAPSLossSettings(
            gamma=self.gamma, reward_scale=self.reward_scale, expectile_reward=self.expectile_reward,
            expectile_cost=self.expectile_cost, beta=self.awr_beta, max_weight=self.max_weight,
            lambdas=tuple(self.resolved_lambdas), implementation=self.implementation,
        )

    @override(AlgorithmConfig)
    def validate(self) -> None:
        self._fill_spaces_from_registry()
        super().validate()
        if self.num_heads < 2:
            self._value_error(f"num_heads must be >= 2, got {self.num_heads}")
        if len(self.resolved_lambdas) != self.num_heads - 2:
            self._value_error(f"lambdas needs num_heads - 2 = {self.num_heads - 2} values, got {self.lambdas}")
        if self.implementation not in IMPLEMENTATIONS:
            self._value_error(f"implementation must be one of {IMPLEMENTATIONS}, got {self.implementation!r}")
        if self.awr_beta <= 0:
            self._value_error(f"awr_beta must be > 0, got {self.awr_beta}")
        for name in ("expectile_reward", "expectile_cost"):
            if not 0.0 < getattr(self, name) < 1.0:
                self._value_error(f"{name} must be in (0, 1), got {getattr(self, name)}")
        if not self.is_offline:
            self._value_error("CAPS trains offline: set .offline_data(input_=DATASET_DIR)")
        self.resolved_horizon  # noqa: B018  (raises for a custom env without horizon)

    def _fill_spaces_from_registry(self) -> None:
        """Offline training has no env runner to ask, so take the spaces from the task registry."""
        task = self.task
        if task is not None and self.observation_space is None:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (task.obs_dim,), np.float32)
        if task is not None and self.action_space is None:
            self.action_space = gym.spaces.Box(np.array(task.action_low, np.float32),
                                               np.array(task.action_high, np.float32))

    @property
    @override(AlgorithmConfig)
    def _model_config_auto_includes(self) -> dict[str, Any]:
        return super()._model_config_auto_includes | {
            "hidden": list(self.hidden), "num_heads": self.num_heads, "shared_actor": self.shared_actor,
            "learn_std": self.implementation == "paper", "cost_maximize": self.implementation == "code",
            "gamma": self.gamma, "horizon": self.resolved_horizon,
            "task": self.task.name if self.task is not None else None,
        }

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_caps.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule

        return RLModuleSpec(module_class=DefaultCAPSTorchRLModule)

    @override(AlgorithmConfig)
    def get_default_learner_class(self) -> type:
        from rllib_caps.caps.torch.caps_torch_learner import CAPSTorchLearner

        return CAPSTorchLearner

    @override(AlgorithmConfig)
    def build_env_to_module_connector(self, env=None, spaces=None, device=None):
        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        pipeline.prepend(CostBudget())
        return pipeline


class InMemoryOfflineData(OfflineData):
    """Stands in for RLlib's ``OfflineData``: CAPS learners load the dataset themselves (``CAPSLearner``),
    so the driver only checks that the path exists and starts no Ray Data pipeline."""

    def __init__(self, config: AlgorithmConfig) -> None:  # noqa: D107  (no super(): no Ray Data)
        self.config = config
        self.path = parquet_files(config.input_ if isinstance(config.input_, str) else config.input_[0])


class CAPS(Algorithm):
    """CAPS: K policy heads trained by IQL-style advantage weighting, switched at act time by Q^r/Q^c."""

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        if config.task is not None:
            register_envs()  # so EnvRunners can build the DSRL task by its id or short name
        super().setup(config)

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> CAPSConfig:
        return CAPSConfig()

    @override(Algorithm)
    def restore_from_path(self, path: Any, *args: Any, **kwargs: Any) -> None:
        """Restores the learner group and pushes its weights to the evaluation EnvRunners.

        ``Algorithm.restore_from_path`` then syncs the training EnvRunners, which an offline algorithm
        does not have (it raises on ``None`` in Ray 2.60), so the generic ``Checkpointable`` restore is used.
        """
        Checkpointable.restore_from_path(self, path, *args, **kwargs)
        if self.eval_env_runner_group is not None:
            self.eval_env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                                    inference_only=True)

    @override(Algorithm)
    def get_module(self, module_id: str = DEFAULT_MODULE_ID) -> Any:
        """The current (learner) module: CAPS has no training EnvRunners to ask, unlike online algorithms."""
        if self.learner_group.is_local:
            return self.learner_group._learner.module[module_id]
        module = self.config.get_rl_module_spec(module_id=module_id).build()
        module.set_state(self.learner_group.get_weights(module_ids=[module_id])[module_id])
        return module

    @override(Algorithm)
    def training_step(self) -> None:
        """``updates_per_iteration`` gradient steps on every learner (in parallel), then log metrics."""
        num_updates = self.config.updates_per_iteration
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            results = self.learner_group.foreach_learner(
                lambda learner: learner.update_from_dataset(num_updates=num_updates)
            )
        results = [call.get() for call in results]  # RemoteCallResults, local learner or not
        self.metrics.aggregate(results, key=LEARNER_RESULTS)
        steps = num_updates * self.config.train_batch_size_per_learner * max(1, self.config.num_learners)
        self.metrics.log_value(NUM_ENV_STEPS_TRAINED_LIFETIME, steps, reduce="lifetime_sum")


def evaluate_at_thresholds(algorithm: CAPS, eval_runners: Any) -> tuple[dict, int, int]:
    """RLlib custom evaluation: roll out the switching policy at every threshold on the eval EnvRunners.

    Each threshold gets ``evaluation_duration`` episodes, split over the runners. ``sample(num_episodes=…)``
    re-seeds each runner's envs with its fixed seed, so every threshold sees the same start states
    and results are reproducible. Returns ``{"caps": {"thresholds": {"κ": ...}, "mean": ...}}``.
    """
    config: CAPSConfig = algorithm.config
    task = config.task
    min_reward, max_reward = (task.min_reward, task.max_reward) if task else (0.0, 1.0)
    summaries, all_outcomes = [], []
    for threshold in config.thresholds:
        eval_runners.foreach_env_runner(lambda er, k=threshold: er.module.set_cost_threshold(k),
                                        local_env_runner=True)
        outcomes = _sample_outcomes(eval_runners, config.evaluation_duration, config.num_heads)
        all_outcomes += outcomes
        summaries.append(summarize(outcomes, threshold, min_reward, max_reward))
    env_steps = sum(o.length for o in all_outcomes)
    results = results_dict(summaries)
    _log_evaluation(algorithm, results, all_outcomes)
    return {"caps": results}, env_steps, env_steps


def _log_evaluation(algorithm: CAPS, results: dict, outcomes: list[EpisodeOutcome]) -> None:
    """Puts the results where RLlib's ``evaluate()`` reads them: ``evaluation/caps/...``, plus RLlib's
    usual ``evaluation/env_runners`` episode statistics over all thresholds."""
    caps_logger, runner_logger = MetricsLogger(), MetricsLogger()
    caps_logger.log_dict(results, window=1)
    runner_logger.log_dict({
        EPISODE_RETURN_MEAN: float(np.mean([o.reward for o in outcomes])),
        EPISODE_LEN_MEAN: float(np.mean([o.length for o in outcomes])),
        NUM_EPISODES: len(outcomes),
    }, window=1)
    algorithm.metrics.aggregate([caps_logger.reduce()], key=(EVALUATION_RESULTS, "caps"))
    algorithm.metrics.aggregate([runner_logger.reduce()], key=(EVALUATION_RESULTS, ENV_RUNNER_RESULTS))


def _sample_outcomes(eval_runners: Any, num_episodes: int, num_heads: int) -> list[EpisodeOutcome]:
    """Runs the episodes, split over the remote runners (or on the local one), and reduces each episode
    to an ``EpisodeOutcome`` on the runner, so little data moves."""
    remote = eval_runners.num_remote_env_runners()
    if remote == 0:
        episodes = eval_runners.local_env_runner.sample(num_episodes=num_episodes, explore=False)
        return episode_outcomes(episodes, num_heads)
    shares = [len(part) for part in np.array_split(np.arange(num_episodes), remote)]
    per_runner = eval_runners.foreach_env_runner(
        lambda er: episode_outcomes(er.sample(num_episodes=shares[er.worker_index - 1], explore=False), num_heads),
        local_env_runner=False,
    )
    return [outcome for outcomes in per_runner for outcome in outcomes]
