"""The planned grid of a sweep: algorithm × task × (the algorithm's axes) × seed, and its ``--dry-run`` text.

Each algorithm brings its own axes (``AlgorithmEntry.axes``, ``SweepAxis``): e.g. CAPS's K (``--heads``; κ stays a
test-time setting), and κ for the algorithms trained once per cost limit (the task's three DSRL thresholds). An axis
takes its values from the sweep option it declares, or from the task for κ. An evaluated axis (CAPS's critics) makes
no trials of its own: each trained trial is evaluated once per value.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from rllib_caps.algorithms.registry import get_algorithm, trained_per_threshold
from rllib_caps.algorithms.surface import COST_LIMIT_AXIS, SweepAxis
from rllib_caps.envs import TaskSpec
from rllib_caps.sweeps.options import SweepError, SweepOptions
from rllib_caps.sweeps.packing import (
    MAX_MEMBERS,
    describe_packing,
    members_that_fit,
    packed_variants,
    packs,
    why_not_packed,
)


def axis_values(options: SweepOptions, task: TaskSpec, axis: SweepAxis) -> list[Any]:
    """The values of one grid axis for ``task``."""
    if axis.name == COST_LIMIT_AXIS:
        return [float(k) for k in task.thresholds]
    if not axis.option:
        raise SweepError(f"no sweep option gives the values of the axis {axis.name!r} (its SweepAxis has no option)")
    return options.values(axis)


def axis_combinations(options: SweepOptions, task: TaskSpec, axes: Sequence[SweepAxis]) -> list[dict[str, Any]]:
    """Every combination of the values of ``axes`` for ``task``, axis name -> value."""
    names = [axis.name for axis in axes]
    return [dict(zip(names, values, strict=True))
            for values in itertools.product(*(axis_values(options, task, axis) for axis in axes))]


def grid_variants(options: SweepOptions, tasks: Sequence[TaskSpec]) -> list[dict[str, Any]]:
    """One ``{algo, task, <trained axes>}`` per trained configuration (each is run once per seed)."""
    return [{"algo": algo, "task": task.name, **values} for algo in options.algos for task in tasks
            for values in axis_combinations(options, task, get_algorithm(algo).trained_axes)]


def _values(values: Sequence[Any]) -> str:
    return "{" + ", ".join(v if isinstance(v, str) else f"{v:g}" for v in values) + "}"


def describe_grid(options: SweepOptions, tasks: Sequence[TaskSpec], cluster_cpus: float | None = None) -> str:
    """The ``--dry-run`` text: per algorithm its tasks × seeds × axes and trial count, then the total, and how the
    trials pack (on a cluster of ``cluster_cpus`` CPUs, where that limits a population: ``members_that_fit``); for
    ``--search``, the search's plan (``describe_search``)."""
    if options.search:
        return describe_search(options, tasks)
    variants = grid_variants(options, tasks)
    seeds = len(options.seeds)
    lines = [f"planned grid: algorithms {' '.join(options.algos)} × {len(tasks)} task(s) × {seeds} seed(s) "
             f"{options.seeds}"]
    for algo in options.algos:
        entry = get_algorithm(algo)
        mine = [v for v in variants if v["algo"] == algo]
        if entry.trained_axes:
            axes = " × ".join(
                f"{'κ' if axis.name == COST_LIMIT_AXIS else axis.column} "
                + (", ".join(f"{t.name} {_values(axis_values(options, t, axis))}" for t in tasks)
                   if axis.name == COST_LIMIT_AXIS else _values(axis_values(options, tasks[0], axis)))
                for axis in entry.trained_axes)
        else:
            axes = "one model per task and seed"
        deployment = "κ at test time" if entry.threshold_at_deployment else (
            "trained per κ" if trained_per_threshold(entry) else "κ ignored in training, evaluated at every κ")
        lines.append(f"  {entry.display_name:<10} {len(mine) * seeds:5d} trials: {len(tasks)} task(s) × "
                     f"{seeds} seed(s) × {axes} ({deployment})")
    lines.append(f"total: {len(variants) * seeds} trials")
    if packs(options):
        lines.append(describe_packing(packed_variants(variants, options.seeds,
                                                      members_that_fit(options, cluster_cpus))))
    else:
        lines.append(f"not packed into populations ({why_not_packed(options)}): every trial trains alone")
    return "\n".join(lines)


def describe_search(options: SweepOptions, tasks: Sequence[TaskSpec]) -> str:
    """The ``--dry-run`` text of ``--search optuna``: one Optuna experiment per (task, the algorithm's axis values),
    its samples × seeds, and how they pack (``rllib_caps.sweeps.search``)."""
    entry = get_algorithm(options.algos[0])  # a search tunes one algorithm (checked by the tune CLI)
    seeds, axes = len(options.seeds), entry.trained_axes
    combinations = len(axis_combinations(options, tasks[0], axes))
    per_experiment = options.num_samples * seeds
    spans = "".join(f" × {axis.column} {_values(axis_values(options, tasks[0], axis))}" for axis in axes
                    if axis.named_default or axis_values(options, tasks[0], axis) != [axis.reference])
    lines = [f"Optuna search of {entry.display_name} over {', '.join(sorted(entry.searchable))}: "
             f"{len(tasks)} task(s){spans}, one experiment each of {options.num_samples} samples × "
             f"{seeds} seed(s) {options.seeds} = {per_experiment} trained trials; "
             f"{per_experiment * len(tasks) * combinations} in all"]
    if not packs(options):
        lines.append(f"not packed into populations ({why_not_packed(options)}): every sample and seed is its own "
                     "Tune trial")
    elif options.population_samples:
        samples = min(options.population_samples, options.num_samples)
        lines.append(f"packed (--pack {options.pack}): each population trains {samples} Optuna sample(s) × {seeds} "
                     f"seed(s), {samples * seeds} members, each with its sample's settings: "
                     f"{math.ceil(options.num_samples / samples)} Tune trial(s) per experiment")
    else:
        lines.append(f"packed (--pack {options.pack}): each population trains as many Optuna samples × {seeds} "
                     f"seed(s) as spread the {options.num_samples} samples evenly over the trials that run at once "
                     f"(at most {MAX_MEMBERS} members), each member with its sample's settings")
    return "\n".join(lines)
