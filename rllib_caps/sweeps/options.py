"""Sweep options: command line over the ``--config`` YAML over the defaults of ``SweepOptions``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import ALGORITHMS, COMMON_TRAIN_FLAGS, DEFAULT_ALGORITHM, declared, get_algorithm
from rllib_caps.algorithms.surface import SweepAxis
from rllib_caps.envs import TaskSpec, select_tasks
from rllib_caps.utils.checks import check_number, check_seed, number_type, read_yaml


class SweepError(ValueError):
    """A sweep that cannot start; the message names the flag, file or path to fix."""


PACK_MODES = ("auto", "on", "off")  # --pack: rllib_caps.sweeps.packing
# The largest population a search packs: on an H100 (h512/b512, TF32, captured) member-steps/s rose 34% from P = 8 to
# P = 32, and 12% more from 32 to 128 (docs/performance.md), while every sample packed into a running population is
# one the search suggests without the results still to come.
MAX_MEMBERS = 32
COMMAND_LINE = "the command line"
COMMAND_LINE_ONLY = {"resume", "address", "dashboard", "dry_run", "verify", "output",  # not YAML keys
                     "gpu_figures"}
# Numeric options and training settings: the bounds of utils.checks.check_number. None fields are unset.
NUMBERS: dict[str, dict[str, Any]] = {
    "steps": {"integer": True, "minimum": 1},
    "eval_episodes": {"integer": True, "minimum": 0}, "eval_runners": {"integer": True, "minimum": 0},
    "num_gpus": {"minimum": 0}, "gpus_per_trial": {"minimum": 0}, "cpus_per_trial": {"positive": True},
    "max_concurrent": {"integer": True, "minimum": 1}, "max_failures": {"integer": True, "minimum": -1},
    "checkpoint_every": {"integer": True, "minimum": 1}, "num_samples": {"integer": True, "minimum": 1},
    "eval_every": {"integer": True, "minimum": 1}, "population_samples": {"integer": True, "minimum": 1},
    "batch_size": {"integer": True, "minimum": 1}, "updates_per_iteration": {"integer": True, "minimum": 1},
}
# Options that override a training setting (the flags train has too, registry.COMMON_TRAIN_FLAGS): the plan and
# the trials hold the merged settings (SweepOptions.training_settings).
TRAINING_FLAGS = frozenset(flag.setting for flag in COMMON_TRAIN_FLAGS)
TRAINING_NUMBERS = {f"training.{key}": NUMBERS.get(key, {"integer": True, "minimum": 1})
                    for key in ("steps", "eval_episodes", "eval_runners", "eval_every", "batch_size",
                                "updates_per_iteration")}
# Tracking options (rllib_caps.sweeps.tracking): what each names, or True for its default.
TRACKERS = {"wandb": "a W&B project name", "mlflow": "an MLflow tracking URI"}


def option_axes() -> dict[str, SweepAxis]:
    """The axes the entries declare whose values a sweep option lists, by option (``heads`` -> CAPS's K axis)."""
    return {axis.option: axis for axis in declared("axes").values() if axis.option}


def option_bounds(key: str) -> dict[str, Any]:
    """The bounds of a numeric option: the sweep's own (``NUMBERS``) or an entry's sweep setting's."""
    settings = declared("sweep_settings")
    return dict(settings[key].bounds) if key in settings else NUMBERS[key]


def option_type(key: str) -> Callable[[str], int | float]:
    """The argparse ``type`` of a numeric option's flag: the same bounds as its YAML key."""
    return number_type(**option_bounds(key))


# ----------------------------------------------------------------------------------------------------------
# Options: command line over YAML over defaults
# ----------------------------------------------------------------------------------------------------------

@dataclass
class SweepOptions:
    """Everything a sweep needs. Each field is a flag (``--data-root``) and a YAML key (``data_root``), but ``axes``
    and ``algorithm_settings``, whose entries are (``--heads``, ``heads``; ``--fqe-steps``, ``fqe_steps``):
    ``of`` and ``flat`` convert."""

    algos: list[str] = field(default_factory=lambda: [DEFAULT_ALGORITHM])  # registry names
    tasks: str = "BallCircle"
    seeds: list[int] = field(default_factory=lambda: [0, 10, 20])
    # The entries' axes (``SweepAxis``): axis name -> its values (a flag and YAML key each: the axis's ``option``);
    # an axis not given takes its declared defaults.
    axes: dict[str, list[Any]] = field(default_factory=dict)
    # The entries' other sweep settings (``SweepSetting``, e.g. ``fqe_steps``): a flag and YAML key each; None unset.
    algorithm_settings: dict[str, Any] = field(default_factory=dict)
    data_root: str = "datasets"
    storage: str = "results"
    name: str = "sweep"
    steps: int | None = None  # overrides training.steps
    eval_episodes: int | None = None  # overrides training.eval_episodes
    eval_runners: int | None = None  # overrides training.eval_runners
    time_limit: str | None = None  # overrides training.time_limit
    eval_every: int | None = None  # overrides training.eval_every: also evaluate every N gradient steps in training
    hidden: list[int] | None = None  # overrides training.hidden
    batch_size: int | None = None  # overrides training.batch_size
    updates_per_iteration: int | None = None  # overrides training.updates_per_iteration
    num_gpus: float = 0.0
    gpus_per_trial: float | None = None
    cpus_per_trial: float = 1.0
    max_concurrent: int | None = None
    max_failures: int = 2
    reuse_actors: bool = True  # a finished trial's actor runs the next trial (no new process per trial)
    pack: str = "auto"  # trials as populations: on, off, auto (when trials train on GPUs; rllib_caps.sweeps.packing)
    checkpoint_every: int = 10
    address: str | None = None
    dashboard: bool = False
    resume: bool = False
    verify: bool = True  # False (--no-verify, command line only): datasets without checksums are used, logged
    dry_run: bool = False  # print the planned grid and its trial count, run nothing
    gpu_figures: str | None = None  # the dry run's GPU figures (rllib_caps.sweeps.gpu_figures); None: the H100's
    wandb: str | bool | None = None  # W&B project of one run per trial (True: the default project)
    mlflow: str | bool | None = None  # MLflow tracking URI of one run per trial (True: SQLite beside the results)
    log_artifacts: bool = False  # also log checkpoints, deployable bundles and the report's plots to the trackers
    output: str = "default"  # what the sweep prints: quiet, default or verbose (rllib_caps.sweeps.console)
    cost_limits: bool | None = None  # the report's cost-limit table; None: when an algorithm takes κ at deployment
    prepare: str | None = None  # fetch and convert missing datasets first: hf, a directory or a URL prefix
    search: str | None = None
    num_samples: int = 10
    population_samples: int | None = None  # Optuna samples per packed trial; None: rllib_caps.sweeps.packing's rule
    training: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    search_space: dict[str, Any] = field(default_factory=dict)  # Optuna ranges (rllib_caps.sweeps.search)

    def __post_init__(self) -> None:
        self.axes = {**{axis.name: list(axis.default) for axis in option_axes().values()}, **self.axes}
        self.algorithm_settings = {**dict.fromkeys(declared("sweep_settings")), **self.algorithm_settings}

    @classmethod
    def of(cls, **options: Any) -> SweepOptions:
        """Options from flat keys, as flags and the YAML give them: an axis by its option (``heads: [2, 4]``), an
        entry's sweep setting by its name (``fqe_steps``), the rest by field."""
        axes, settings = option_axes(), declared("sweep_settings")
        return cls(**{k: v for k, v in options.items() if k not in axes and k not in settings},
                   axes={axes[k].name: v for k, v in options.items() if k in axes},
                   algorithm_settings={k: v for k, v in options.items() if k in settings})

    def flat(self) -> dict[str, Any]:
        """The options by flat key (``of``'s inverse): the axes by their options, the entries' settings by name."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("axes", "algorithm_settings")}
        flat.update({option: self.axes[axis.name] for option, axis in option_axes().items()})
        return {**flat, **self.algorithm_settings}

    def values(self, axis: SweepAxis) -> list[Any]:
        """The sweep's values of one axis (its declared defaults where the options do not list it)."""
        return list(self.axes.get(axis.name, axis.default))

    @property
    def experiment_dir(self) -> Path:
        return Path(self.storage).resolve() / self.name

    def task_specs(self) -> list[TaskSpec]:
        try:
            return select_tasks(self.tasks)
        except ValueError as err:
            raise SweepError(f"--tasks: {err}") from err

    @property
    def gpus(self) -> bool:
        """Whether the sweep's trials train on GPUs."""
        return bool(self.gpus_per_trial if self.gpus_per_trial is not None else self.num_gpus)

    @property
    def report_cost_limits(self) -> bool:
        """Whether the final report evaluates the checkpoints at the paper's cost limits (its Table 2): as asked,
        else when the sweep has an algorithm that takes κ at deployment (CAPS, CDT)."""
        if self.cost_limits is not None:
            return self.cost_limits
        return any(get_algorithm(name).threshold_at_deployment for name in self.algos)

    def training_settings(self) -> dict[str, Any]:
        """The YAML ``training`` mapping with the training flags' overrides (``TRAINING_FLAGS``: --steps, --hidden,
        --batch-size, ...)."""
        flags = {key: getattr(self, key) for key in TRAINING_FLAGS}
        return {**self.training, **{k: v for k, v in flags.items() if v is not None}}


def option_keys() -> set[str]:
    """Every option's flat key (a flag's name with underscores, a YAML key)."""
    return set(SweepOptions().flat())


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A sweep YAML: any option by its flag's name with underscores, plus ``training``, ``overrides`` and
    ``search_space``."""
    path = Path(path)
    try:
        data = read_yaml(path)
    except ValueError as err:
        raise SweepError(f"--config {path}: {err}") from err
    if data is None:  # an empty file, or only comments or `null`: not the default sweep by accident
        raise SweepError(f"--config {path}: the file sets no options (it is empty, or only comments or null); "
                         "give the sweep's options, or leave out --config for the defaults")
    if not isinstance(data, dict):
        raise SweepError(f"--config {path}: expected a mapping of options, got {type(data).__name__}")
    known = option_keys() - COMMAND_LINE_ONLY
    unknown = sorted(set(data) - known)
    if unknown:
        raise SweepError(f"--config {path}: unknown keys {unknown}; valid keys: {sorted(known)}")
    if isinstance(data.get("algos"), str):
        data["algos"] = data["algos"].replace(",", " ").split()
    if isinstance(data.get("tasks"), list):
        data["tasks"] = ",".join(data["tasks"])
    return data


def resolve_options(args: argparse.Namespace) -> SweepOptions:
    """Flags given on the command line win over the ``--config`` file, which wins over the defaults. Each source
    is checked on its own, so an error names the flag (``--seeds``) or the file and key (``sweep.yaml: seeds``)."""
    file_options = load_config_file(args.config) if args.config else {}
    if args.config:
        check_options(SweepOptions.of(**file_options), f"--config {args.config}")
    if args.name is None and args.config and "name" not in file_options:
        file_options["name"] = Path(args.config).stem
    given = {k: v for k, v in vars(args).items() if k not in ("config", "task_file") and v is not None}  # files: read
    check_options(SweepOptions.of(**given), COMMAND_LINE)
    return SweepOptions.of(**{**file_options, **given})


def _where(source: str, key: str) -> str:
    """How an error names an option: its flag on the command line, else the file and the YAML key."""
    return f"--{key.replace('_', '-')}" if source == COMMAND_LINE else f"{source}: {key}"


def _is_list(value: Any, kind: type) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, kind) and not isinstance(v, bool)
                                                           for v in value)


def check_options(options: SweepOptions, source: str) -> None:
    """Types and values that would otherwise fail inside a trial, or silently repeat work. ``source`` is
    ``COMMAND_LINE`` or the file the options came from; each error names the flag, or the file and key."""
    for key in ("storage", "data_root"):
        value = getattr(options, key)
        if "://" in str(value):
            raise SweepError(f"{_where(source, key)} {value}: a URI is not supported; the sweep reads results and "
                             "datasets as local files, so mount the bucket on every node (e.g. s3fs, gcsfuse) and "
                             "pass the mount path (docs/sweeps.md, Several machines)")
    for key, what in TRACKERS.items():
        value = getattr(options, key)
        if not (value is None or isinstance(value, bool) or (isinstance(value, str) and value.strip())):
            raise SweepError(f"{_where(source, key)} must be {what} or true (the default), got {value!r}")
    for key in ("training", "overrides"):
        if not isinstance(getattr(options, key), dict):
            raise SweepError(f"{_where(source, key)} must be a mapping, got {getattr(options, key)!r}")
    bounds_of = {**NUMBERS, **{key: option_bounds(key) for key in declared("sweep_settings")}, **TRAINING_NUMBERS}
    flat = options.flat()
    for key, bounds in bounds_of.items():
        scope, _, name = key.rpartition(".")
        value = (options.training if scope else flat).get(name)
        try:
            if value is not None:
                check_number(value, **bounds)
        except ValueError as err:
            raise SweepError(f"{_where(source, key)} {err}") from None
    kinds = {"seeds": int, "algos": str, **{option: axis.kind for option, axis in option_axes().items()}}
    for key, kind in kinds.items():
        values = flat[key]
        if not _is_list(values, kind):
            raise SweepError(f"{_where(source, key)} must be a non-empty list of "
                             f"{'integers' if kind is int else 'names'}, got {values!r}")
        if len(set(values)) != len(values):
            raise SweepError(f"{_where(source, key)} {values} repeats a value; each must appear once")
    for seed in options.seeds:
        try:
            check_seed(seed)
        except ValueError as err:
            raise SweepError(f"{_where(source, 'seeds')}: each seed {err}") from None
    for algo in options.algos:
        if algo not in ALGORITHMS:
            raise SweepError(f"{_where(source, 'algos')}: unknown algorithm {algo!r}; known: {', '.join(ALGORITHMS)}")
    if options.pack not in PACK_MODES:
        raise SweepError(f"{_where(source, 'pack')} must be one of {', '.join(PACK_MODES)}, got {options.pack!r}")
    for key, axis in option_axes().items():
        wrong = [v for v in flat[key] if axis.choices and v not in axis.choices]
        if wrong:
            raise SweepError(f"{_where(source, key)} {wrong} unknown; choose from {', '.join(axis.choices)}")
    for key, hidden in (("training.hidden", options.training.get("hidden")), ("hidden", options.hidden)):
        if hidden is not None and not _is_list(hidden, int):
            raise SweepError(f"{_where(source, key)} must be a list of integers, got {hidden!r}")
    for scope in options.overrides:
        try:
            select_tasks(str(scope))
        except ValueError as err:
            raise SweepError(f"{_where(source, 'overrides')}.{scope}: not a task or suite ({err})") from err
