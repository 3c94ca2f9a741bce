"""One trial: its Tune config -> the algorithm config, its metrics, and the Tune trainable and callback.

A trial's Tune config is small: ``algo``, ``task``, the algorithm's trained axes by name (``num_heads``,
``backbone`` and ``actor`` for CAPS, ``cost_limit`` for the per-threshold baselines; ``AlgorithmEntry.axes``),
``seed`` (or ``seeds`` under a Repeater), the optional ``search`` values and the sweep-wide ``setup``; a grid sweep
nests the first three under ``variant`` (``rllib_caps.sweeps.trial_schema.trial_params`` flattens it). One trainable,
``SweepTrial``, runs every algorithm, so trials of different algorithms share one Tune experiment and pack on the
same CPUs/GPUs. The last training iteration evaluates at the task's thresholds and ends the trial; every result
carries top-level ``normalized_reward``, ``normalized_cost``, ``safe`` and ``objective`` (NaN before that
evaluation; evaluations during training, ``eval_every``, are under ``evaluation/dsrl`` only), so Tune's strict
metric check and searchers see them in every result, and ``gradient_steps``, the gradient steps trained so far.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rllib_caps.algorithms.registry import (
    SETTING_ALIASES,
    AlgorithmEntry,
    build_config,
    canonical_settings,
    declared,
    get_algorithm,
)
from rllib_caps.algorithms.surface import COST_LIMIT_AXIS
from rllib_caps.core.keys import GRADIENT_STEPS
from rllib_caps.core.offline import task_for_dataset
from rllib_caps.data.schema import DATA_DIR
from rllib_caps.envs import TaskSpec, get_task
from rllib_caps.envs.tasks import CUSTOM_SUITE
from rllib_caps.sweeps.options import SweepError
from rllib_caps.sweeps.trial_schema import (
    EVALUATED,
    MEMBERS,
    TASK_SPECS,
    trial_params,
    trial_seed,
)

logger = logging.getLogger("rllib_caps.tune")

METRIC_KEYS = ("normalized_reward", "normalized_cost", "safe", "objective")
INFEASIBLE_FLOOR = -1000.0  # objective of a config with normalised cost > 1, minus its violation


def scope_axis(key: str) -> tuple[str, Any] | None:
    """(axis name, value) where ``key`` is a per-value override scope of a declared axis (``K4``: CAPS's K = 4),
    else None."""
    for axis in declared("axes").values():
        value = axis.scope_value(key)
        if value is not None:
            return axis.name, value
    return None


def trial_settings(training: Mapping[str, Any], overrides: Mapping[str, Any], task: TaskSpec,
                   axes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``training``, then ``overrides[suite]``, then ``overrides[task]``; inside each, the scopes of the trial's axis
    values (``axes``, by name; ``K4`` for K = 4) win."""
    settings = dict(training)
    for scope in (task.suite, task.name):
        scoped = dict(overrides.get(scope) or {})
        per_value = {key: (named, scoped.pop(key)) for key in list(scoped) if (named := scope_axis(key)) is not None}
        settings.update(scoped)
        for (name, value), values in per_value.values():
            if (axes or {}).get(name) == value:
                settings.update(values or {})
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


def settings_for(algo: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep-wide settings that ``algo``'s config has (``training``/``overrides`` serve every algorithm of
    the sweep: e.g. ``awr_beta`` goes to CAPS only); ``unknown_settings`` rejects those that no algorithm has."""
    config = get_algorithm(algo).config_class()
    return {k: v for k, v in settings.items() if hasattr(config, SETTING_ALIASES.get(k, k))}


def unknown_settings(algos: list[str], settings: Mapping[str, Any]) -> list[str]:
    """Settings that none of ``algos`` has (typos, or settings of an algorithm not in the sweep)."""
    return sorted(set(settings) - {k for algo in algos for k in settings_for(algo, settings)})


def missing_datasets(data_root: str | Path, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """The tasks that have no converted dataset under ``data_root``."""
    return [task for task in tasks if not (Path(data_root).resolve() / task.name / DATA_DIR).is_dir()]


def missing_datasets_message(data_root: str | Path, missing: Sequence[TaskSpec]) -> str:
    """One message naming every missing dataset and the commands that make them."""
    names = ",".join(task.name for task in missing)
    return (f"--data-root {data_root}: no converted dataset for {len(missing)} task(s): {names.replace(',', ', ')}. "
            f"Get and convert them with `python -m data_conversion.fetch --tasks {names} --out {data_root}` (from "
            "DSRL's Hugging Face Hub repo; --source DIR for a directory of DSRL files), or add --prepare [SOURCE] "
            "to this command; or collect a task's data from its simulator with `python -m data_conversion.collect`.")


def axis_settings(entry: AlgorithmEntry, values: Mapping[str, Any]) -> dict[str, Any]:
    """The training settings of a trial's values of its entry's trained axes, by axis name
    (``SweepAxis.config_settings``)."""
    settings: dict[str, Any] = {}
    for axis in entry.trained_axes:
        if axis.name in values:
            settings.update(axis.config_settings(values[axis.name]))
    return settings


def declared_specs(tasks: Sequence[TaskSpec]) -> dict[str, Any]:
    """The setup entry that carries the sweep's declared tasks to its trial processes, where they are not declared:
    ``{TASK_SPECS: {name: spec dict}}``, or nothing for a sweep of DSRL tasks only."""
    specs = {task.name: task.to_dict() for task in tasks if task.suite == CUSTOM_SUITE}
    return {TASK_SPECS: specs} if specs else {}


def trial_task(name: str, setup: Mapping[str, Any]) -> TaskSpec:
    """The task a trial trains on: its declared spec carried in the sweep's setup, else the DSRL task."""
    carried = (setup.get(TASK_SPECS) or {}).get(name)
    return TaskSpec.from_dict(carried) if carried is not None else get_task(name)


def trial_config(trial: Mapping[str, Any]) -> Any:
    """The algorithm config of one trial config ``{algo, task, <axes>, seed | seeds, [search], setup}`` (axes
    possibly nested under ``variant``)."""
    trial = trial_params(trial)
    setup = trial["setup"]
    declared = trial_task(trial["task"], setup)
    task = task_for_dataset(declared, dataset_dir(setup["data_root"], declared))  # a range derived where none is known
    if not task.has_reward_range:  # a sweep ranks normalised scores
        raise SweepError(f"task {task.name}: no reward range, declared or in its dataset's metadata.json (converted "
                         "without one?); give it a reward_range in its task file, or convert its dataset again")
    entry = get_algorithm(trial["algo"])
    values = {axis.name: value for axis in entry.trained_axes if (value := axis.read(trial)) is not None}
    settings = settings_for(entry.name, trial_settings(setup["training"], setup["overrides"], task, values))
    settings.update({k: v for k, v in (trial.get("search") or {}).items() if k in entry.searchable})
    settings.update(axis_settings(entry, values))
    res = setup["resources"]
    runners = int(canonical_settings(settings).get("evaluation_num_env_runners") or 0)
    config = build_config(entry.name, task, dataset_dir(setup["data_root"], task),
                          seed=trial_seed(trial), num_gpus_per_learner=res["gpus"], **settings)
    main_cpus = res["cpus"] / 2 if runners else res["cpus"]  # half for the learner, half for evaluation
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


def members_summary(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A packed trial's top-level metrics (what Tune, its progress table and the trackers see; the report reads
    each member's own): the members' mean normalised reward, cost and safe share, and the constrained objective of
    those means; NaN before the final evaluation. For a population of one sample's seeds that is the sample's
    score; a packed search's trial of several samples is scored per sample (``sweeps.search.PackedSamples``), and
    its top level is only their mean."""
    summary = {key: float(np.mean([result[key] for result in results]))
               for key in ("normalized_reward", "normalized_cost", "safe", GRADIENT_STEPS)}
    summary["objective"] = (math.nan if math.isnan(summary["normalized_reward"]) else
                            constrained_objective(summary["normalized_reward"], summary["normalized_cost"]))
    return summary


def evaluated_values(entry: AlgorithmEntry, setup: Mapping[str, Any]) -> list[Any]:
    """The values of the entry's evaluated axis that a trained trial is evaluated at besides the trained one (its
    reference): none where the sweep asks only for that (or the entry has no such axis)."""
    axis = entry.evaluated_axis
    if axis is None:
        return []
    values = list((setup.get(EVALUATED) or {}).get(axis.name) or [])
    return [] if values in ([], [axis.reference]) else values


def axis_parts(params: Mapping[str, Any], leave_out: Collection[str] = ()) -> list[str]:
    """``["K2"]``, ``["kappa10"]``, ``["K2", "sacbc", "separate"]``: the trial's trained axis values of its
    algorithm, for names and logs; values at their default that names leave out (``SweepAxis.named``) and the axes
    in ``leave_out`` are left out."""
    values = get_algorithm(params["algo"]).axis_values(params)
    return [axis.part(values[axis.name]) for axis in get_algorithm(params["algo"]).trained_axes
            if axis.name not in leave_out and axis.named(values[axis.name])]


def _identity(config: Mapping[str, Any], seed: str) -> list[str]:
    """The algorithm, task, axis values and ``seed`` (formatted with the seed), or a packed trial's member count
    (its members' κ and seeds are in their names)."""
    params = trial_params(config)
    if MEMBERS in params:
        parts = axis_parts(params, leave_out=(COST_LIMIT_AXIS,))
        return [params["algo"], params["task"], *parts, f"population{len(params[MEMBERS])}"]
    return [params["algo"], params["task"], *axis_parts(params), seed.format(trial_seed(params))]


def describe_trial(config: Mapping[str, Any]) -> str:
    """``caps BallCircle K2 seed=0``, ``caps BallCircle K2 population3``: one line naming a trial."""
    return " ".join(_identity(config, "seed={}"))


def trial_name(config: Mapping[str, Any], trial_id: str) -> str:
    """``caps_BallCircle_K2_seed0_<id>``, ``bc-safe_BallCircle_kappa10_seed0_<id>``,
    ``bc-safe_BallCircle_population9_<id>``."""
    return "_".join([*_identity(config, "seed{}"), trial_id])
