"""The offline base every safe algorithm here builds on, the way RLlib's ``IQLConfig`` builds on ``MARWILConfig``.

``OfflineSafeConfig`` holds what all of them share: the DSRL task (spaces, horizon, thresholds), training
length, the in-memory data path, the time-limit handling of the critics and the evaluation at cost
thresholds. ``OfflineSafeAlgorithm`` trains without training EnvRunners: N updates on every learner per
iteration, evaluation through ``rllib_caps.core.evaluation``. Subclasses add their hyperparameters,
module and learner.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.offline.offline_data import OfflineData
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EVALUATION_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    TIMERS,
)

from rllib_caps.core.budget_connector import CostBudget
from rllib_caps.core.deployment import save_policy
from rllib_caps.core.evaluation import evaluate_at_thresholds
from rllib_caps.core.keys import TIME_LIMITS
from rllib_caps.core.precision import DEFAULT_MATMUL_PRECISION, MATMUL_PRECISIONS
from rllib_caps.core.ray_internals import ConfigHooks, local_learner
from rllib_caps.data import parquet_files
from rllib_caps.data.validation import dataset_metadata
from rllib_caps.envs import TaskSpec, get_task, register_envs
from rllib_caps.envs.tasks import CUSTOM_SUITE, is_task_name, with_dataset_ranges
from rllib_caps.utils.manifest import verify_manifest, write_manifest
from rllib_caps.utils.paths import resolve_local
from rllib_caps.utils.smoke import smoke_evaluation_env_config, smoke_test

WEIGHTS_SYNC_TAG = "set_state"  # the tag of RLlib's sends of weights to EnvRunners (EnvRunnerGroup.sync_weights)
CAPTURED_STEP_SETTINGS = ("auto", True, False)


def task_for_dataset(task: TaskSpec, data: str | Path) -> TaskSpec:
    """``task`` itself where its reward range is known; else with the ranges derived from the dataset at ``data`` (its
    ``metadata.json``'s episode returns and costs, as DSRL derives its own; ``range_source="dataset"``); unchanged
    where the dataset records none (its scores are then raw)."""
    if task.has_reward_range:
        return task
    metadata = dataset_metadata(data) or {}
    if "episode_reward_return" not in metadata or "episode_cost_return" not in metadata:
        return task
    return with_dataset_ranges(task, metadata["episode_reward_return"], metadata["episode_cost_return"])


def evaluates_at(iteration: int, config: Any) -> bool:
    """Whether training iteration ``iteration`` (1-based) of a trial with this config ends with an evaluation: every
    ``evaluation_interval`` iterations, and after the last of ``num_iterations``."""
    interval = config.evaluation_interval
    return bool(interval) and (iteration % interval == 0 or iteration == config.num_iterations)


class OfflineSafeConfig(ConfigHooks, AlgorithmConfig):
    """Settings shared by the offline safe algorithms (``.training(...)``), with their defaults:

        num_gradient_steps: gradient steps of a whole training run (the paper: 100k; MetaDrive 200k).
        updates_per_iteration: gradient steps per ``Algorithm.train()`` call.
        hidden: hidden layer sizes of every network.
        tau: Polyak coefficient of the target nets, applied after every gradient step.
        time_limit: "bootstrap", "terminal" or "time_aware" (``rllib_caps.core.time_limit``).
        horizon: episode length T for the budget conversion and time-aware critics (default: the task's).
        captured_step: "auto" (default), True or False: record the whole gradient step once as a CUDA graph and
            replay it (``rllib_caps.core.captured_step``). "auto" captures on CUDA wherever the learner's step
            allows it (``OfflineSafeTorchLearner.captured_step_blockers``) and never on CPU, where there is no graph
            to capture; True raises where it cannot.
        matmul_precision: the matrix products of CUDA learners: "highest" (IEEE fp32), "high" (TF32 tensor cores;
            the default) or "bf16" (forward pass and losses under bf16 autocast, outputs and optimiser in fp32;
            ``rllib_caps.core.precision``). CPU learners always compute in fp32.

    Evaluation (``.evaluation(...)``) rolls out the policy at each of ``evaluation_thresholds`` (default: the
    task's three DSRL thresholds) for ``evaluation_duration`` episodes each, after the last iteration and, with
    ``evaluation_every`` (gradient steps, a multiple of ``updates_per_iteration``), also during training: RLlib's
    ``evaluation_interval`` is then ``evaluation_iterations`` (``registry.build_config`` sets it).
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class)
        self.num_gradient_steps = 100_000
        self.updates_per_iteration = 1000
        self.hidden = [512, 512]
        self.tau = 0.005
        self.time_limit = "bootstrap"
        self.horizon: int | None = None
        self.captured_step: bool | str = "auto"
        self.matmul_precision = DEFAULT_MATMUL_PRECISION
        self.evaluation_thresholds: list[float] | None = None
        self.evaluation_every: int | None = None  # gradient steps between evaluations in training; None: the end only
        # A declared task's spec (``TaskSpec.to_dict``), carried in the config so that Ray workers and checkpoints have
        # it without the task being declared in their process; None for a DSRL task or a plain custom env.
        self.task_spec: dict[str, Any] | None = None
        # RLlib settings that differ for offline safe RL.
        self.gamma = 0.99
        self.lr = None
        self.train_batch_size_per_learner = 512
        # The learner checks all gradients for NaN/inf at once (rllib_caps.core.learner); this turns off
        # RLlib's per-parameter check, which costs one device sync per parameter.
        self.torch_skip_nan_gradients = True
        self.num_env_runners = 0
        self.normalize_actions = True
        self.evaluation_duration = 20
        self.evaluation_duration_unit = "episodes"
        self.evaluation_config = {"explore": False}
        self.custom_evaluation_function = evaluate_at_thresholds
        self.offline_data_class = InMemoryOfflineData
        self.mark_offline()  # no training EnvRunners (like MARWIL/IQL)

    @override(AlgorithmConfig)
    def training(self, *, num_gradient_steps: int = NotProvided, updates_per_iteration: int = NotProvided,
                 hidden: list[int] = NotProvided, tau: float = NotProvided, time_limit: str = NotProvided,
                 horizon: int | None = NotProvided,
                 captured_step: bool | str = NotProvided, matmul_precision: str = NotProvided,
                 **kwargs: Any) -> OfflineSafeConfig:
        super().training(**kwargs)
        if hidden is not NotProvided and not (hidden and all(isinstance(h, int) and h >= 1 for h in hidden)):
            raise ValueError(f"hidden must be a non-empty list of layer widths >= 1, got {hidden}")
        return self.set_provided(locals())

    def set_provided(self, arguments: dict[str, Any]) -> OfflineSafeConfig:
        """Sets each keyword argument of a ``training(...)`` call that was given (not ``NotProvided``); the caller
        passes its ``locals()``."""
        for name, value in arguments.items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                setattr(self, name, value)
        return self

    @override(AlgorithmConfig)
    def evaluation(self, *, evaluation_thresholds: list[float] | None = NotProvided,
                   evaluation_every: int | None = NotProvided, **kwargs: Any) -> OfflineSafeConfig:
        super().evaluation(**kwargs)
        return self.set_provided(locals())

    @override(AlgorithmConfig)
    def environment(self, env: Any = NotProvided, **kwargs: Any) -> OfflineSafeConfig:
        """RLlib's ``environment``; ``env`` may also be a ``TaskSpec``, or the name of a task declared in this
        process: a declared task's spec is then carried in the config (``task_spec``) and ``env`` is its name."""
        carried = self.task_spec is not None and env == self.task_spec["name"]  # set again where it is not declared
        if env is not NotProvided and not carried:
            spec = env if isinstance(env, TaskSpec) else get_task(env) if isinstance(env, str) and is_task_name(env) \
                else None
            self.task_spec = spec.to_dict() if spec is not None and spec.suite == CUSTOM_SUITE else None
            env = spec.name if isinstance(env, TaskSpec) else env
        super().environment(env=env, **kwargs)
        return self

    @property
    def dataset_path(self) -> str:
        """The dataset the learners load: ``input_`` (one path, or the first of a list)."""
        return self.input_ if isinstance(self.input_, str) else self.input_[0]

    @property
    def task(self) -> TaskSpec | None:
        """The declared task's carried spec, else the registry entry of ``env`` (a DSRL id or short name), or None
        for a plain custom env."""
        if self.task_spec is not None:
            return TaskSpec.from_dict(self.task_spec)
        return get_task(self.env) if isinstance(self.env, str) and is_task_name(self.env) else None

    @property
    def num_iterations(self) -> int:
        """``Algorithm.train()`` calls of a whole run: ``ceil(num_gradient_steps / updates_per_iteration)``."""
        for name in ("num_gradient_steps", "updates_per_iteration"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        return math.ceil(self.num_gradient_steps / self.updates_per_iteration)

    @property
    def evaluation_iterations(self) -> int:
        """Iterations between evaluations (RLlib's ``evaluation_interval``): ``evaluation_every`` gradient steps in
        iterations of ``updates_per_iteration``, or without it ``num_iterations`` (the last one only). The last
        iteration evaluates in either case (``OfflineSafeAlgorithm.step``)."""
        every = self.evaluation_every
        if every is None:
            return self.num_iterations
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"evaluation_every must be a whole number of gradient steps >= 1, got {every!r}")
        if every % self.updates_per_iteration:
            raise ValueError(f"evaluation_every {every} is not a multiple of updates_per_iteration "
                             f"{self.updates_per_iteration}: evaluation runs between iterations of "
                             f"{self.updates_per_iteration} gradient steps")
        return every // self.updates_per_iteration

    @property
    def thresholds(self) -> list[float]:
        if self.evaluation_thresholds is not None:
            return [float(k) for k in self.evaluation_thresholds]
        if self.task is None:
            raise ValueError("evaluation_thresholds must be set for an env that is not a DSRL task")
        return [float(k) for k in self.task.thresholds]

    @property
    def resolved_time_limit(self) -> str:
        """The time-limit handling in effect; a subclass may derive it from other settings when ``time_limit`` is
        None."""
        return self.time_limit

    @property
    def resolved_horizon(self) -> int:
        if self.horizon is not None:
            return int(self.horizon)
        if self.task is None:
            raise ValueError("horizon must be set for an env that is not a DSRL task")
        return self.task.max_episode_steps

    def member_hyperparameters(self) -> dict[str, Any]:
        """The settings, besides seed and κ, in which the members of one population (``rllib_caps.core.population``)
        may differ: numbers (or lists of numbers) that the learner's ``member_losses`` takes as a member's own
        tensors (its ``hyperparameters`` argument), named as the config names them (CAPS's ``awr_beta``) or, for a
        value derived from a setting that may differ anyway (κ), as the config's property is (COptiDICE's
        ``constraint_threshold``). None by default."""
        return {}

    def apply_smoke_test_limits(self) -> OfflineSafeConfig:
        """Under ``RLLIB_CAPS_SMOKE_TEST``: at most 20 gradient steps in iterations of at most 10, hidden
        [16, 16], batches of at most 32 and 1 evaluation episode per threshold, of at most
        ``SMOKE_EPISODE_STEPS`` steps. Otherwise unchanged."""
        if smoke_test():
            self.evaluation_config = {**(self.evaluation_config or {}),
                                      "env_config": {**self.env_config, **smoke_evaluation_env_config()}}
            self.num_gradient_steps = min(self.num_gradient_steps, 20)
            self.updates_per_iteration = min(self.updates_per_iteration, 10)
            self.hidden = [16, 16]
            self.train_batch_size_per_learner = min(self.train_batch_size_per_learner, 32)
            self.evaluation_duration = 1
        return self

    @override(AlgorithmConfig)
    def build_algo(self, *args: Any, **kwargs: Any) -> Algorithm:
        """``AlgorithmConfig.build_algo`` after ``apply_smoke_test_limits`` (a restore from a checkpoint does not
        come through here, so it keeps its sizes)."""
        self.apply_smoke_test_limits()
        return super().build_algo(*args, **kwargs)

    @override(AlgorithmConfig)
    def validate(self) -> None:
        self._fill_spaces_from_registry()
        super().validate()
        if not self.is_offline:
            self.config_error(f"{type(self).__name__} trains offline: set .offline_data(input_=DATASET_DIR)")
        for name in ("num_gradient_steps", "updates_per_iteration", "train_batch_size_per_learner"):
            if getattr(self, name) < 1:
                self.config_error(f"{name} must be >= 1, got {getattr(self, name)}")
        if (self.evaluation_config or {}).get("num_envs_per_env_runner", self.num_envs_per_env_runner) > 1:
            self.config_error("evaluation needs num_envs_per_env_runner = 1: with several envs per runner, "
                              "sample(num_episodes=N) favours short episodes and biases the cost")
        try:
            self.evaluation_iterations  # noqa: B018  (raises for an evaluation_every that is not whole iterations)
        except ValueError as err:
            self.config_error(str(err))
        if self.captured_step not in CAPTURED_STEP_SETTINGS:
            self.config_error(f"captured_step must be one of {CAPTURED_STEP_SETTINGS}, got {self.captured_step!r}")
        if self.matmul_precision not in MATMUL_PRECISIONS:
            self.config_error(f"matmul_precision must be one of {MATMUL_PRECISIONS}, got {self.matmul_precision!r}")
        if self.resolved_time_limit not in TIME_LIMITS:
            self.config_error(f"time_limit must be one of {TIME_LIMITS}, got {self.time_limit!r}")
        self.resolved_horizon  # noqa: B018  (raises for a custom env without horizon)

    def _fill_spaces_from_registry(self) -> None:
        """Offline training has no env runner to ask, so take the spaces from the task registry."""
        task = self.task
        if task is not None and self.observation_space is None:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (task.obs_dim,), np.float32)
        if task is not None and self.action_space is None:
            self.action_space = gym.spaces.Box(np.array(task.action_low, np.float32),
                                               np.array(task.action_high, np.float32))

    @override(ConfigHooks)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {
            "hidden": list(self.hidden), "gamma": self.gamma, "horizon": self.resolved_horizon,
            "time_limit": self.resolved_time_limit,
            "task": self.task.name if self.task is not None else None,
            **({"task_spec": dict(self.task_spec)} if self.task_spec is not None else {}),
            "seed": self.seed,  # so Ray-free evaluation can derive its episode seeds from the training seed
            "evaluation_runners": self.evaluation_num_env_runners,  # so Ray-free evaluation splits them as train did
        }

    @override(AlgorithmConfig)
    def build_env_to_module_connector(self, env=None, spaces=None, device=None):
        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        pipeline.prepend(CostBudget())
        return pipeline


class InMemoryOfflineData(OfflineData):
    """Stands in for RLlib's ``OfflineData``: the learners load the dataset themselves
    (``OfflineSafeTorchLearner``), so the driver only checks that the path exists and starts no Ray Data pipeline."""

    def __init__(self, config: AlgorithmConfig) -> None:  # noqa: D107  (no super(): no Ray Data)
        self.config = config
        self.path = parquet_files(config.dataset_path)


class OfflineSafeAlgorithm(Algorithm):
    """An offline algorithm without training EnvRunners, evaluated at cost thresholds."""

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        if config.task_spec is not None:
            register_envs(config.task)  # so EnvRunners build the declared task from its carried spec
        elif config.task is not None:
            register_envs()  # so EnvRunners can build the DSRL task by its id or short name
        super().setup(config)

    @staticmethod
    @override(Algorithm)
    def from_checkpoint(path: Any, filesystem: Any = None, **kwargs: Any) -> Algorithm:
        """``Algorithm.from_checkpoint`` that also takes a relative local path."""
        return Algorithm.from_checkpoint(resolve_local(path), filesystem, **kwargs)

    @override(Algorithm)
    def save_to_path(self, path: Any = None, **kwargs: Any) -> str:
        """``Algorithm.save_to_path`` that also takes a relative local path, and writes a local checkpoint's
        pickle-free deployable policy (``policy/``, ``core.deployment.save_policy``) and ``manifest.json`` with the
        sha256 of every file (``rllib_caps.utils.manifest``)."""
        saved = super().save_to_path(None if path is None else resolve_local(path), **kwargs)
        if "://" not in saved and kwargs.get("filesystem") is None:
            save_policy(self.get_module(), Path(saved), training_data=str(self.config.dataset_path))
            write_manifest(Path(saved))
        return saved

    @override(Algorithm)
    def restore_from_path(self, path: Any, *args: Any, verify: bool = True, **kwargs: Any) -> None:
        """Checks the checkpoint's ``manifest.json`` (local paths; ``verify=False``, also through
        ``from_checkpoint(path, verify=False)``, skips it with a warning), restores the learner group and pushes its
        weights to the evaluation EnvRunners.

        ``Algorithm.restore_from_path`` then syncs the training EnvRunners, which an offline algorithm
        does not have (it raises on ``None`` in Ray 2.60), so the generic ``Checkpointable`` restore is used.
        """
        path = resolve_local(path)
        if "://" not in path and kwargs.get("component") is None:
            verify_manifest(Path(path), verify=verify)
        Checkpointable.restore_from_path(self, path, *args, **kwargs)
        if self.eval_env_runner_group is not None:
            self.eval_env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                                    inference_only=True)

    @override(Algorithm)
    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """RLlib's evaluation, once every earlier send of weights to the evaluation EnvRunners has landed.

        RLlib sends them fire-and-forget (``sync_weights``) and drops a send to a runner that still has one in flight
        (``max_requests_in_flight_per_env_runner``, 1): a runner still taking the weights of its build or of a
        restore (a slow start on a loaded machine) would skip the evaluation's send and roll out those instead,
        untrained. Waiting for them first makes the evaluation's own send go out, and the runner takes it before it
        samples (an actor runs one caller's calls in order)."""
        if self.eval_env_runner_group is not None:
            self.eval_env_runner_group.fetch_ready_async_reqs(tags=WEIGHTS_SYNC_TAG, timeout_seconds=None)
        return super().evaluate(*args, **kwargs)

    @override(Algorithm)
    def get_module(self, module_id: str = DEFAULT_MODULE_ID) -> Any:
        """The current (learner) module: there are no training EnvRunners to ask, unlike online algorithms."""
        if self.learner_group.is_local:
            return local_learner(self.learner_group).module[module_id]
        module = self.config.get_rl_module_spec(module_id=module_id).build()
        module.set_state(self.learner_group.get_weights(module_ids=[module_id])[module_id])
        return module

    @override(Algorithm)
    def step(self) -> dict[str, Any]:
        """RLlib's iteration: training, then evaluation every ``evaluation_interval`` iterations, and here also
        after the last of ``num_iterations`` where the interval does not land on it (``evaluation_every``). RLlib
        carries an evaluation's metrics over into the results of the iterations after it; they are dropped, so a
        result has ``evaluation`` exactly when its iteration evaluated."""
        results = super().step()
        iteration, interval = self.iteration + 1, self.config.evaluation_interval  # ``iteration`` counts after step
        if not evaluates_at(iteration, self.config):
            results.pop(EVALUATION_RESULTS, None)
        elif iteration % interval:
            results[EVALUATION_RESULTS] = self.evaluate()
        return results

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
