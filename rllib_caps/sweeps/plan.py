"""A sweep's plan: what it trains and how Tune runs it, recorded in ``STORAGE/NAME/sweep_plan.yaml`` when the sweep
starts, and the check that a later run of the same ``--name`` (a re-run, or ``--resume``) asks for that sweep.

Tune runs an experiment's trials as they were planned: ``Tuner.restore`` adds no trials, drops none, and keeps the
trials' configs and Tune's settings. A command whose grid or settings differ from the recorded plan is therefore
refused with each difference named (``PlanChangedError``); ``new_trial_grids`` splits a grown grid into the grids
of only its new trials, each of which can run as a sweep of its own inside the old one (``changed_plan_advice``
prints their commands), where the report of the old one reads them too.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.sweeps.options import TRAINING_FLAGS, SweepError, SweepOptions, option_axes
from rllib_caps.utils.atomic import atomic_file

logger = logging.getLogger("rllib_caps.tune")

# Not a *.json or *.pkl file: Tune copies those of the experiment directory back in place on every state save of a
# resumed run, so a driver killed during that copy would truncate the plan (sweeps/state_backup.py).
PLAN_FILE = "sweep_plan.yaml"
LEGACY_PLAN_FILE = "sweep_plan.json"  # where sweeps recorded their plan before, still read
# Options that say how one command runs, not what the sweep trains or how Tune runs it: free to differ between runs.
RUN_OPTIONS = frozenset({"resume", "address", "dashboard", "dry_run", "verify", "prepare", "cost_limits", "storage",
                         "name", "output", "log_artifacts", "gpu_figures"})
SEARCH_OPTIONS = frozenset({"num_samples", "population_samples", "search_space"})  # what only --search reads
GENERIC_GRID_AXES = ("algos", "tasks", "seeds")  # the options that span every sweep's grid


def grid_axes() -> tuple[str, ...]:
    """The options whose values span the grid, in the order new_trial_grids splits a grown grid: the generic ones,
    then the entries' axes by option (``heads``, ...)."""
    return (*GENERIC_GRID_AXES, *option_axes())
UNSET = "unset"  # how a difference shows a setting that one side does not have


def sweep_plan(options: SweepOptions) -> dict[str, Any]:
    """The sweep as JSON: the grid's axes (tasks by name), the dataset root (absolute), the training settings with
    the flags that override them, and every other option that enters a trial's config or Tune's; not the options of
    one run (``RUN_OPTIONS``), nor a grid sweep's search options."""
    left_out = RUN_OPTIONS | TRAINING_FLAGS | (set() if options.search else SEARCH_OPTIONS)
    plan = {key: value for key, value in options.flat().items() if key not in left_out}
    plan.update(tasks=[task.name for task in options.task_specs()], data_root=str(Path(options.data_root).resolve()),
                training=options.training_settings())
    return json.loads(json.dumps(plan, default=str))


def _flat(plan: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"training": {"steps": 5}}`` as ``{"training.steps": 5}``; an empty mapping has no entries."""
    flat: dict[str, Any] = {}
    for key, value in plan.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(_text, value))
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class PlanChange:
    """One option that differs from the recorded plan, by its YAML key (``seeds``, ``training.steps``)."""

    key: str
    old: Any  # UNSET where the recorded plan has no such setting
    new: Any  # UNSET where this command has none

    @property
    def added(self) -> list[Any]:
        return [v for v in self.new if v not in self.old] if self.key in grid_axes() else []

    @property
    def removed(self) -> list[Any]:
        return [v for v in self.old if v not in self.new] if self.key in grid_axes() else []

    def describe(self) -> str:
        if self.key in grid_axes():
            return "; ".join(f"{what} {_text(values)}" for what, values in (("added", self.added),
                                                                          ("removed", self.removed)) if values)
        return f"{_text(self.old)} -> {_text(self.new)}"


def plan_changes(recorded: dict[str, Any], planned: dict[str, Any]) -> list[PlanChange]:
    """Every option of ``planned`` that differs from ``recorded``: the grid's axes as sets (order is no change),
    nested settings each by its dotted key."""
    old, new = _flat(recorded), _flat(planned)
    changes = []
    for key in [*old, *(k for k in new if k not in old)]:
        before, after = old.get(key, UNSET), new.get(key, UNSET)
        same = {json.dumps(v) for v in before} == {json.dumps(v) for v in after} if key in grid_axes() else \
            before == after
        if not same:
            changes.append(PlanChange(key, before, after))
    return changes


class PlanChangedError(SweepError):
    """A command that asks an existing experiment for another grid or other settings than it was planned with."""

    def __init__(self, experiment_dir: Path, recorded: dict[str, Any], planned: dict[str, Any],
                 changes: list[PlanChange]) -> None:
        self.experiment_dir, self.recorded, self.planned, self.changes = experiment_dir, recorded, planned, changes
        grid = any(c.key in grid_axes() for c in changes)
        super().__init__(
            f"{experiment_dir} holds a sweep planned with other values (its {PLAN_FILE}); Tune runs an experiment's "
            f"trials as planned, so {'it cannot add or drop trials, and ' if grid else ''}a re-run or --resume "
            "cannot change them:\n" + "\n".join(f"  {c.key}: {c.describe()}" for c in changes))


def read_plan(experiment_dir: Path) -> dict[str, Any] | None:
    """The plan recorded in ``experiment_dir`` (``PLAN_FILE``, or an older sweep's ``LEGACY_PLAN_FILE``); None where
    it has none (a sweep started before plans were kept)."""
    path = next((experiment_dir / name for name in (PLAN_FILE, LEGACY_PLAN_FILE)
                 if (experiment_dir / name).is_file()), None)
    if path is None:
        return None
    load = json.loads if path.name == LEGACY_PLAN_FILE else yaml.safe_load
    try:
        plan = load(path.read_text())
    except (OSError, json.JSONDecodeError, yaml.YAMLError) as err:
        raise SweepError(f"{path}: unreadable ({err}); the sweep's plan cannot be checked") from err
    if not isinstance(plan, dict):
        raise SweepError(f"{path}: not a sweep plan (a mapping of its settings)")
    return plan


def experiment_started(experiment_dir: Path) -> bool:
    """Whether ``experiment_dir`` holds more than a plan: a sweep that started there (Tune wrote to it)."""
    return experiment_dir.is_dir() and any(p.name not in (PLAN_FILE, LEGACY_PLAN_FILE)
                                           for p in experiment_dir.iterdir())


def check_plan(options: SweepOptions) -> None:
    """A ``PlanChangedError`` where the sweep already started in ``options.experiment_dir`` with another plan."""
    experiment_dir = options.experiment_dir
    if not experiment_started(experiment_dir):
        return
    recorded = read_plan(experiment_dir)
    if recorded is None:
        logger.warning("%s has no %s (started before sweeps recorded their plan): this command's grid and settings "
                       "are not checked against the sweep's", experiment_dir, PLAN_FILE)
        return
    planned = sweep_plan(options)
    changes = plan_changes(recorded, planned)
    if changes:
        raise PlanChangedError(experiment_dir, recorded, planned, changes)


def record_plan(options: SweepOptions) -> None:
    """Before the sweep's first trial: writes its plan into its experiment directory (atomically); where the sweep
    started already, checks that ``options`` still plan it (``check_plan``)."""
    check_plan(options)
    if not experiment_started(options.experiment_dir):
        with atomic_file(options.experiment_dir / PLAN_FILE) as tmp:
            tmp.write_text(yaml.safe_dump(sweep_plan(options), sort_keys=False))


def _algos_with(option: str, algos: list[str]) -> list[str]:
    """The algorithms whose trials the grid option ``option`` (one of ``grid_axes``) multiplies (or evaluates)."""
    axis = option_axes().get(option)
    return algos if axis is None else [a for a in algos if axis in get_algorithm(a).axes]


def new_trial_grids(recorded: dict[str, Any], planned: dict[str, Any]) -> list[tuple[str, dict[str, list[Any]]]]:
    """The trials ``planned`` has and ``recorded`` has not, as grids: for each grid axis whose values grew, its added
    values × the values both plans share on the axes before it × the planned values on the axes after it (so no two
    grids share a trial), only for the algorithms that axis multiplies. Each is (the axis, its added values and the
    other options it sets otherwise than ``planned`` does); empty grids are left out."""
    grids = []
    axes = grid_axes()
    for i, axis in enumerate(axes):
        added = [v for v in planned[axis] if v not in recorded.get(axis, [])]
        grid = {axis: added, **{before: [v for v in planned[before] if v in recorded.get(before, [])]
                                for before in axes[:i]}}
        grid["algos"] = _algos_with(axis, grid.get("algos", planned["algos"]))
        if all(grid.values()):
            grids.append((axis, {key: values for key, values in grid.items()
                                 if key == axis or values != planned[key]}))
    return grids


def without_flags(argv: list[str], flags: list[str]) -> list[str]:
    """``argv`` without the given long flags and their values (``--seeds 0 1``, ``--name=x``); flags appended after
    it win over any abbreviation left in it, as argparse keeps the last."""
    kept, dropping = [], False
    for text in argv:
        if text.startswith("-"):
            dropping = text.split("=", 1)[0] in flags
        if not dropping:
            kept.append(text)
    return kept


def changed_plan_advice(err: PlanChangedError, argv: list[str]) -> str:
    """What to run instead of the ``tune`` command ``argv`` that changed a sweep's plan: where only a grid sweep's
    grid changed, one command per grid of the new trials (``new_trial_grids``), each a sweep inside the experiment
    directory, and the report that reads them all (it reads every trial under the directory); else the sweep's own
    values, or another --name."""
    grid_only = all(c.key in grid_axes() for c in err.changes) and not err.planned.get("search")
    grids = new_trial_grids(err.recorded, err.planned) if grid_only else []
    keep = f"Repeat the sweep's own values ({err.experiment_dir / PLAN_FILE}) to continue or report it"
    if not grids:
        return f"{keep}, or give another --name to start a sweep of these values."
    lines = [f"{keep}. To train only the new trials, as sweeps of their own inside it:"]
    for axis, grid in grids:
        flags = {f"--{key}": [",".join(values)] if key == "tasks" else list(map(str, values))
                 for key, values in grid.items()}
        flags.update({"--storage": [str(err.experiment_dir)], "--name": [f"{axis}-{'-'.join(map(str, grid[axis]))}"]})
        given = without_flags(argv, ["--resume", *flags])
        lines.append("  " + shlex.join(["python", "-m", "rllib_caps.tune", *given,
                                        *(text for flag, values in flags.items() for text in (flag, *values))]))
    cost_limits = ["--cost-limits"] if SweepOptions(algos=err.planned["algos"]).report_cost_limits else []
    lines.append("then one report of all its trials:\n  "
                 + shlex.join(["python", "-m", "rllib_caps.report", str(err.experiment_dir), *cost_limits]))
    if any(c.removed for c in err.changes):
        lines.append("(The trials of the removed values stay in the sweep and its report.)")
    return "\n".join(lines)
