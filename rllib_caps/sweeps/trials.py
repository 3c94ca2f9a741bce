"""One trial: its Tune config -> the algorithm config, its metrics, and the Tune trainable and callback.

A trial's Tune config is small: ``algo`` (default ``caps``), ``task``, ``heads``, ``seed`` (or ``seeds`` under
a Repeater), the optional ``search`` values and the sweep-wide ``setup``. The last training iteration
evaluates at the task's thresholds and ends the trial; every result carries top-level
``normalized_reward``, ``normalized_cost``, ``safe`` and ``objective`` (NaN before that evaluation), so
Tune's strict metric check and searchers see them in every result.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import ALGORITHMS, build_config, canonical_settings, get_algorithm
from rllib_caps.core.keys import RESULTS_KEY
from rllib_caps.core.rollout import episode_seed
from rllib_caps.data.schema import DATA_DIR
from rllib_caps.envs import TaskSpec, get_task
from rllib_caps.report.records import CRITIC_RESULTS, trial_seed
from rllib_caps.sweeps.options import SweepError

logger = logging.getLogger("rllib_caps.tune")

METRIC_KEYS = ("normalized_reward", "normalized_cost", "safe", "objective")
INFEASIBLE_FLOOR = -1000.0  # objective of a config with normalised cost > 1, minus its violation


def trial_settings(training: Mapping[str, Any], overrides: Mapping[str, Any], task: TaskSpec,
                   heads: int) -> dict[str, Any]:
    """``training``, then ``overrides[suite]``, then ``overrides[task]``; inside each, ``K<heads>`` wins."""
    settings = dict(training)
    for scope in (task.suite, task.name):
        scoped = dict(overrides.get(scope) or {})
        per_k = {k: scoped.pop(k) for k in list(scoped) if k.startswith("K") and k[1:].isdigit()}
        settings.update(scoped)
        settings.update(per_k.get(f"K{heads}") or {})
    return settings


def dataset_dir(data_root: str | Path, task: TaskSpec) -> Path:
    """``DATA_ROOT/<ShortName>``, or a SweepError that says how to make it."""
    path = Path(data_root).resolve() / task.name
    if not (path / DATA_DIR).is_dir():
        raise SweepError(
            f"--data-root {data_root}: no converted dataset for {task.name} at {path}. Convert DSRL's data with "
            f"`python -m data_conversion.dsrl_to_parquet --task {task.name} --out {path}`, or collect it from the "
            f"simulator with `python -m data_conversion.collect --task {task.name} --out {task.name}.hdf5` and "
            f"convert that file with `--h5 {task.name}.hdf5`."
        )
    return path


def axis_settings(trial: Mapping[str, Any]) -> dict[str, Any]:
    """The training settings of a trial's ablation axes: ``backbone`` as is, ``actor`` as ``shared_actor``."""
    settings = {"backbone": trial["backbone"]} if "backbone" in trial else {}
    if "actor" in trial:
        settings["shared_actor"] = trial["actor"] == "shared"
    return settings


def trial_config(trial: Mapping[str, Any]) -> Any:
    """The algorithm config of one trial config ``{algo, task, heads, seed | seeds, [backbone], [actor], [search],
    setup}``."""
    setup = trial["setup"]
    task = get_task(trial["task"])
    entry = get_algorithm(trial.get("algo", "caps"))
    settings = trial_settings(setup["training"], setup["overrides"], task, trial["heads"])
    settings.update(axis_settings(trial))
    settings.update({k: v for k, v in (trial.get("search") or {}).items() if k in entry.searchable})
    res = setup["resources"]
    runners = int(canonical_settings(settings).get("evaluation_num_env_runners") or 0)
    config = build_config(entry.name, task.name, dataset_dir(setup["data_root"], task), heads=int(trial["heads"]),
                          seed=trial_seed(trial), num_gpus_per_learner=res["gpus"], **settings)
    main_cpus = res["cpus"] / 2 if runners else res["cpus"]  # evaluation runs after training: they share
    return (config.learners(num_cpus_per_learner=main_cpus)
            .resources(num_cpus_for_main_process=main_cpus)
            .env_runners(num_cpus_per_env_runner=res["cpus"] / 2 / max(runners, 1)))


def constrained_objective(normalized_reward: float, normalized_cost: float) -> float:
    """Lexicographic score: a safe result (cost ≤ 1) scores its reward; an unsafe one scores below every
    safe one (normalised rewards above ``INFEASIBLE_FLOOR``), lower the more it violates."""
    if normalized_cost <= 1.0:
        return normalized_reward
    return INFEASIBLE_FLOOR - (normalized_cost - 1.0)


def sweep_metrics(evaluation: Mapping[str, Any] | None) -> dict[str, float]:
    """Top-level metrics of a result: the mean over thresholds, or NaN before the final evaluation."""
    if evaluation is None:
        return dict.fromkeys(METRIC_KEYS, math.nan)
    mean = evaluation["mean"]
    return {"normalized_reward": mean["normalized_reward"], "normalized_cost": mean["normalized_cost"],
            "safe": mean["safe"],
            "objective": constrained_objective(mean["normalized_reward"], mean["normalized_cost"])}


def critic_evaluations(algo: Any, critics: Sequence[str], fqe_steps: int | None) -> dict[str, dict[str, Any]]:
    """After training: the trained CAPS policy evaluated Ray-free with every critic variant on the same episodes
    (FQE fitted once on the trial's dataset, on CPU), critic -> results."""
    from rllib_caps.algorithms.caps.fqe import FQESettings, evaluate_critics
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.data import TransitionDataset

    config = algo.config
    policy = CAPSPolicy(copy.deepcopy(algo.get_module()).to("cpu"))
    settings = FQESettings(steps=fqe_steps or FQESettings.steps, seed=int(config.seed or 0))
    logger.info("FQE for %s seed %s: %d steps, then evaluating critics %s", config.task.name, config.seed,
                settings.steps, list(critics))
    return evaluate_critics(policy, TransitionDataset.from_parquet(config.input_), config.task, config.thresholds,
                            config.evaluation_duration, critics, settings, seed=episode_seed(policy), progress=False)


def _define_trial_class(algo: str) -> type:
    """The Tune trainable of ``algo``: its algorithm class, built from a trial config, ending after the
    evaluation of its last iteration. Defined on first use so importing this module does not import RLlib."""
    from ray.rllib.utils.metrics import EVALUATION_RESULTS
    from ray.tune.result import DONE

    base = get_algorithm(algo).config_class().algo_class

    class Trial(base):
        def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
            built = trial_config(config)
            self._iterations = built.num_iterations
            setup = config.get("setup") or {}
            self._critics, self._fqe_steps = setup.get("critics") or ["offline"], setup.get("fqe_steps")
            super().__init__(config=built, **kwargs)

        @classmethod
        def default_resource_request(cls, config: dict[str, Any]):
            return super().default_resource_request(trial_config(config).to_dict())

        def step(self) -> dict[str, Any]:
            result = super().step()
            metrics = sweep_metrics(result.get(EVALUATION_RESULTS, {}).get(RESULTS_KEY))
            done = self.iteration + 1 >= self._iterations
            if done and self._critics != ["offline"]:
                metrics[CRITIC_RESULTS] = critic_evaluations(self, self._critics, self._fqe_steps)
            return {**metrics, **result, DONE: done}

    Trial.__name__ = Trial.__qualname__ = f"{base.__name__}Trial"
    Trial.__module__ = __name__
    return Trial


def _define_trial_logger() -> type:
    from ray.tune import Callback

    class TrialLogger(Callback):
        """Tune callback: one log line per finished trial with its normalised reward and cost."""

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            r, c = trial.last_result, trial.config
            logger.info("finished %s %s K=%s seed=%s: normalised reward %.3f, cost %.3f (%s)", c.get("algo", "caps"),
                        c["task"], c["heads"], trial_seed(c), r.get("normalized_reward", math.nan),
                        r.get("normalized_cost", math.nan), "safe" if r.get("safe") == 1 else "UNSAFE")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            logger.error("trial %s K=%s seed=%s failed; see %s", trial.config["task"], trial.config["heads"],
                         trial_seed(trial.config), trial.path)

    TrialLogger.__module__ = __name__
    return TrialLogger


_TRIAL_CLASSES: dict[str, type] = {}  # algo -> its trainable, also a module attribute (for pickle)


def trial_class(algo: str = "caps") -> type:
    """The (cached) Tune trainable of ``algo``, e.g. ``CAPSTrial``."""
    if algo not in _TRIAL_CLASSES:
        cls = _TRIAL_CLASSES[algo] = _define_trial_class(algo)
        globals()[cls.__name__] = cls
    return _TRIAL_CLASSES[algo]


def trial_logger() -> Any:
    if "TrialLogger" not in globals():
        globals()["TrialLogger"] = _define_trial_logger()
    return globals()["TrialLogger"]()


def __getattr__(name: str) -> Any:
    """Lazy module attributes: pickle finds ``rllib_caps.sweeps.trials.CAPSTrial`` through this in Ray workers."""
    if name.startswith("__") or not (name == "TrialLogger" or name.endswith("Trial")):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "TrialLogger":
        trial_logger()
        return globals()[name]
    for algo in ALGORITHMS:
        if name == f"{get_algorithm(algo).config_class().algo_class.__name__}Trial":
            return trial_class(algo)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
