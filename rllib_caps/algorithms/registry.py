"""The algorithm registry: what the sweeps, the report and the CLIs need to know of each algorithm.

Importing this module imports neither Ray nor any algorithm; ``config_class`` is resolved on first use, and the
defaults that help texts show are declared here as plain data (``HELP_DEFAULTS``, ``AlgorithmEntry.defaults``), so
``--help`` builds no config (tests/test_cli_help.py compares them with the config classes).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.caps.surface import (
    CAPS_ABLATIONS,
    CAPS_AXES,
    CAPS_SWEEP_SETTINGS,
    CAPS_TRAIN_FLAGS,
    caps_label,
)
from rllib_caps.algorithms.surface import (
    COST_LIMIT,
    COST_LIMIT_AXIS,
    AblationAxis,
    SweepAxis,
    SweepSetting,
    TrainFlag,
    fixed_label,
)
from rllib_caps.core.keys import TIME_LIMITS
from rllib_caps.utils.checks import number_type

# Friendly setting names (CLI flags, the sweep YAML's `training` and keys) -> the config attributes they set: the one
# rename table (train's flags and the sweep's options use these names too).
SETTING_ALIASES = {
    "steps": "num_gradient_steps",
    "heads": "num_heads",
    "batch_size": "train_batch_size_per_learner",
    "eval_episodes": "evaluation_duration",
    "eval_runners": "evaluation_num_env_runners",
    "eval_every": "evaluation_every",
    "thresholds": "evaluation_thresholds",
    "compile": "torch_compile_learner",
    "compile_backend": "torch_compile_learner_dynamo_backend",
}
EVALUATION_SETTINGS = ("evaluation_duration", "evaluation_num_env_runners", "evaluation_thresholds", "evaluation_every")
# Opt-in torch.compile of the learner's forward pass and losses, and its backend (RLlib's default: inductor; the
# tests' CPU compiles use aot_eager, the same fullgraph capture without generating C++ kernels).
FRAMEWORK_SETTINGS = ("torch_compile_learner", "torch_compile_learner_dynamo_backend")
# The training flags that ``train`` and ``tune`` share (every algorithm has their settings; ``tune``'s override the
# sweep YAML's ``training``): declared once, added to both parsers by ``rllib_caps.training_flags``.
COMMON_TRAIN_FLAGS = (
    TrainFlag("steps", "--steps", int, help="gradient steps"),
    TrainFlag("time_limit", "--time-limit", str, TIME_LIMITS,
              help="how the critics treat time-outs: bootstrap through them, treat them as terminal, or terminal with "
                   "the remaining time as a critic input (docs/paper.md)"),
    TrainFlag("hidden", "--hidden", int, nargs="+", help="hidden layer sizes"),
    TrainFlag("batch_size", "--batch-size", int, help="minibatch size per learner"),
    TrainFlag("updates_per_iteration", "--updates-per-iteration", int, help="gradient steps per RLlib iteration"),
    TrainFlag("eval_episodes", "--eval-episodes", int, help="episodes per threshold, 0: skip evaluation"),
    TrainFlag("eval_every", "--eval-every", number_type(integer=True, minimum=1),
              help="also evaluate every N gradient steps during training, logged (a multiple of "
                   "--updates-per-iteration; without it: after the last step only)"),
    TrainFlag("eval_runners", "--eval-runners", int, help="remote evaluation EnvRunners, 0: in-process"),
)
# The defaults of the settings that help texts show (friendly names), where an entry's ``defaults`` do not say
# otherwise: ``OfflineSafeConfig``'s, as plain data.
HELP_DEFAULTS: dict[str, Any] = {"steps": 100000, "updates_per_iteration": 1000, "batch_size": 512,
                                 "hidden": (256, 256), "eval_episodes": 20, "eval_runners": 0,
                                 "time_limit": "bootstrap"}


@dataclass(frozen=True)
class AlgorithmEntry:
    """One algorithm's whole surface: how to build its config, how to label its trials, its sweep axes (``SweepAxis``:
    e.g. CAPS's K, backbone, actor and critic; ``COST_LIMIT`` for an algorithm trained once per κ, whose values come
    from the task) and other sweep settings, its own ``train`` flags, what a search tunes (``searchable``: the
    settings; ``search_space``: the Optuna space), and whether the cost limit κ is chosen at deployment (one policy
    for every κ) or at training time."""

    name: str
    config_path: str  # "module:ClassName" of its OfflineSafeConfig subclass
    trial_label: Callable[[Mapping[str, Any]], str]  # trial params (axes by name, ``search``) -> configuration label
    searchable: tuple[str, ...]
    threshold_at_deployment: bool
    title: str = ""  # the report's column title (default: the name)
    axes: tuple[SweepAxis, ...] = ()  # sweep grid axes besides task and seed
    sweep_settings: tuple[SweepSetting, ...] = ()  # its sweep options that are no axis (``evaluate_variants``)
    train_flags: tuple[TrainFlag, ...] = ()  # its own ``train`` flags
    # "module:function" or the function: (the trial's axis values by name, the sweep YAML's ``search_space`` ranges)
    # -> Optuna's define-by-run space, a picklable callable (Tune saves the searcher) that suggests
    # ``search/<setting>`` for each setting in ``searchable``; raises ValueError naming the range at fault.
    search_space: str | Callable[..., Callable[[Any], dict[str, Any] | None]] = ""
    policy_path: str = ""  # "module:ClassName" of its Ray-free deployable policy (core.rollout), if it has one
    ablations: tuple[AblationAxis, ...] = ()  # the report's ablation tables over its trials
    reference_loop: str = ""  # "module:ClassName" of its learner's step in plain PyTorch (``bench``), if it has one
    extension_path: str = ""  # "module:ClassName" of its core.extension.AlgorithmExtension, if it adds hooks
    # Its config class's defaults that differ from ``HELP_DEFAULTS`` or are its own (``heads``), for help texts
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def extension(self) -> Any:
        """Its ``AlgorithmExtension``: the hooks it adds to the sweep, evaluation and report (the base's no-ops
        when it adds none)."""
        from rllib_caps.core.extension import AlgorithmExtension

        return _resolve(self.extension_path)() if self.extension_path else AlgorithmExtension()

    @property
    def display_name(self) -> str:
        return self.title or self.name

    @property
    def config_class(self) -> type:
        return _resolve(self.config_path)

    @property
    def reference_loop_class(self) -> type:
        """Its plain-PyTorch loop: ``(config, device=)``, called with a number of gradient steps."""
        if not self.reference_loop:
            raise ValueError(f"{self.name} has no plain-PyTorch reference loop")
        return _resolve(self.reference_loop)

    @property
    def trained_axes(self) -> tuple[SweepAxis, ...]:
        """Its axes whose values are trials of their own (not evaluations of one trained trial)."""
        return tuple(axis for axis in self.axes if not axis.evaluated)

    @property
    def evaluated_axis(self) -> SweepAxis | None:
        """Its evaluated axis (values: evaluations of one trained trial), if it has one."""
        return next((axis for axis in self.axes if axis.evaluated), None)

    def axis_values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's value of each of its axes, by axis name (the reference where its params have none)."""
        values = {}
        for axis in self.axes:
            value = axis.read(params)
            values[axis.name] = axis.reference if value is None else value
        return values

    def label(self, params: Mapping[str, Any]) -> str:
        """The configuration label of a trial (axis values by name, and its ``search``)."""
        return self.trial_label({**params, **self.axis_values(params)})

    def space(self, axes: Mapping[str, Any], ranges: Mapping[str, Any]) -> Callable[[Any], dict[str, Any] | None]:
        """Its Optuna define-by-run space for a trial of these axis values (``search_space``)."""
        if not self.search_space:
            raise ValueError(f"{self.name} declares no search space")
        build = _resolve(self.search_space) if isinstance(self.search_space, str) else self.search_space
        return build(axes, ranges)

    @property
    def policy_class(self) -> type:
        """Its deployable policy class: ``from_checkpoint(path)``, ``reset(threshold)``, ``act(obs, cost, reward=)``."""
        if not self.policy_path:
            raise ValueError(f"{self.name} has no deployable policy")
        return _resolve(self.policy_path)


def _resolve(path: str) -> Any:
    """The class or function a "module:Name" path names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "caps": AlgorithmEntry(name="caps", config_path="rllib_caps.algorithms.caps.caps:CAPSConfig",
                           trial_label=caps_label, searchable=("awr_beta", "lambdas"), threshold_at_deployment=True,
                           title="CAPS", axes=CAPS_AXES, sweep_settings=CAPS_SWEEP_SETTINGS,
                           train_flags=CAPS_TRAIN_FLAGS,
                           search_space="rllib_caps.algorithms.caps.search_space:caps_search_space",
                           policy_path="rllib_caps.algorithms.caps.policy:CAPSPolicy", ablations=CAPS_ABLATIONS,
                           reference_loop="rllib_caps.algorithms.caps.plain_loop:PlainLoop",
                           extension_path="rllib_caps.algorithms.caps.extension:CAPSExtension",
                           defaults={"hidden": (512, 512), "heads": 2, "backbone": "iql", "implementation": "paper",
                                     "cost_gamma": 0.99, "expectile_reward": 0.7, "expectile_cost": 0.7,
                                     "cost_head_episode_limit": math.inf}),
    # BC-All ignores κ in training: one model per seed, evaluated at every threshold (docs/baselines.md).
    "bc-all": AlgorithmEntry(name="bc-all", config_path="rllib_caps.algorithms.bc.bc:BCConfig",
                             trial_label=fixed_label("BC-All"), searchable=(), threshold_at_deployment=False,
                             title="BC-All"),
    "bc-safe": AlgorithmEntry(name="bc-safe", config_path="rllib_caps.algorithms.bc.bc:BCSafeConfig",
                              trial_label=fixed_label("BC-Safe"), searchable=(),
                              threshold_at_deployment=False, title="BC-Safe", axes=(COST_LIMIT,)),
    "bearl": AlgorithmEntry(name="bearl", config_path="rllib_caps.algorithms.bearl.bearl:BEARLConfig",
                            trial_label=fixed_label("BEAR-Lag"), searchable=(), threshold_at_deployment=False,
                            title="BEAR-Lag", axes=(COST_LIMIT,),
                            defaults={"steps": 300000, "time_limit": "terminal", "implementation": "osrl"}),
    "cpq": AlgorithmEntry(name="cpq", config_path="rllib_caps.algorithms.cpq.cpq:CPQConfig",
                          trial_label=fixed_label("CPQ"), searchable=(), threshold_at_deployment=False,
                          title="CPQ", axes=(COST_LIMIT,),
                          defaults={"time_limit": "terminal", "implementation": "osrl"}),
    "coptidice": AlgorithmEntry(name="coptidice",
                                config_path="rllib_caps.algorithms.coptidice.coptidice:COptiDICEConfig",
                                trial_label=fixed_label("COptiDICE"), searchable=(), threshold_at_deployment=False,
                                title="COptiDICE", axes=(COST_LIMIT,),
                                defaults={"time_limit": "terminal", "implementation": "osrl"}),
    # CDT takes κ at deployment as its initial cost-to-go: one model per seed for every κ (docs/baselines.md).
    "cdt": AlgorithmEntry(name="cdt", config_path="rllib_caps.algorithms.cdt.cdt:CDTConfig",
                          trial_label=fixed_label("CDT"), searchable=(), threshold_at_deployment=True, title="CDT",
                          policy_path="rllib_caps.algorithms.cdt.policy:CDTPolicy",
                          defaults={"hidden": (512, 512), "batch_size": 2048}),
}


DEFAULT_ALGORITHM = "caps"  # what the CLIs train and sweep when no --algo/--algos is given


def get_algorithm(name: str) -> AlgorithmEntry:
    try:
        return ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None


@functools.cache
def default_config(name: str) -> Any:
    """A config of the algorithm with every default (built once per process)."""
    return get_algorithm(name).config_class()


def help_defaults(entry: AlgorithmEntry) -> dict[str, Any]:
    """The declared defaults of the settings help texts show, for one entry (``HELP_DEFAULTS`` and its own)."""
    return {**HELP_DEFAULTS, **entry.defaults}


def defaults_text(setting: str) -> str:
    """The declared defaults of ``setting`` (a friendly name) for help texts, without building a config: the one
    value when every algorithm that has the setting agrees, else e.g. ``100000 (caps, cpq); 300000 (bearl)``."""
    groups: dict[str, list[str]] = {}
    for name, entry in ALGORITHMS.items():
        value = help_defaults(entry).get(setting)
        if value is not None:
            text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            groups.setdefault(text, []).append(name)
    if not groups:
        raise ValueError(f"no algorithm declares a default of {setting!r} for help texts (HELP_DEFAULTS or an "
                         "entry's defaults)")
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{value} ({', '.join(names)})" for value, names in groups.items())


def names_where(predicate: Callable[[AlgorithmEntry], bool]) -> str:
    """``bc-safe, bearl, cpq, coptidice``: the registry names of the entries for which ``predicate`` holds."""
    return ", ".join(name for name, entry in ALGORITHMS.items() if predicate(entry))


def trained_per_threshold(entry: AlgorithmEntry) -> bool:
    """Whether the algorithm trains one model per cost limit κ (its sweep axis is ``COST_LIMIT``)."""
    return any(axis.name == COST_LIMIT_AXIS for axis in entry.axes)


def declared(kind: str) -> dict[str, Any]:
    """Every entry's declarations of one kind (``axes``, ``sweep_settings``, ``train_flags``) by name (an axis by
    its name), the first entry's where two declare the same name."""
    found: dict[str, Any] = {}
    for entry in ALGORITHMS.values():
        for item in getattr(entry, kind):
            key = item.setting if kind == "train_flags" else item.name
            found.setdefault(key, item)
    return found


def attribute_flag(attribute: str, flags: Collection[str]) -> str | None:
    """The flag among ``flags`` (``--batch-size``) that sets a config attribute (``train_batch_size_per_learner``):
    ``--`` and its friendly name (``SETTING_ALIASES``) or its own, dashed; None where ``flags`` has neither."""
    names = [friendly for friendly, target in SETTING_ALIASES.items() if target == attribute] + [attribute]
    return next((flag for name in names if (flag := "--" + name.replace("_", "-")) in flags), None)


def load_policy(checkpoint: str | Path, algo: str | None = None, *, verify: bool = True) -> Any:
    """The deployable policy of a checkpoint: ``algo``'s policy class, or (``algo`` None) that of the algorithm
    whose RLModule the checkpoint holds; ``verify=False`` skips the manifest check (logged)."""
    from rllib_caps.core.deployment import load_module

    deployable = [entry for entry in ALGORITHMS.values() if entry.policy_path]
    module = load_module(checkpoint, [entry.policy_class.module_class for entry in deployable], verify=verify)
    for entry in deployable:
        if algo in (None, entry.name) and type(module) is entry.policy_class.module_class:
            return entry.policy_class(module)
    raise ValueError(f"{checkpoint}: holds a {type(module).__name__}, not the module of "
                     f"{algo or 'an algorithm with a deployable policy'} "
                     f"({', '.join(entry.name for entry in deployable)})")


def canonical_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` keyed by config attribute names (friendly names translated), without the unset (None) ones."""
    return {SETTING_ALIASES.get(k, k): v for k, v in settings.items() if v is not None}


def build_config(algo: str, task: Any, data: str | Path, *, seed: int = 0, num_learners: int = 0,
                 num_gpus_per_learner: float = 0.0, **settings: Any) -> Any:
    """The algorithm's config for one task (a name, or a ``TaskSpec``, which a declared task's config carries) and
    dataset, ready to ``build_algo()``.

    ``settings`` are config attributes or their friendly names (``SETTING_ALIASES``); only those given
    (not None) are set, so everything else keeps the config class's default. ``eval_episodes=0`` trains
    without evaluation; otherwise the last of ``num_iterations`` iterations evaluates at every threshold, and with
    ``eval_every`` also every that many gradient steps (a multiple of ``updates_per_iteration``).
    """
    from rllib_caps.data import parquet_files

    entry = get_algorithm(algo)
    given = canonical_settings(settings)
    defaults = entry.config_class()
    for name in given:
        if not hasattr(defaults, name):
            raise ValueError(f"{name} is not a setting of {entry.name} ({type(defaults).__name__})")
    evaluation = {k: given.pop(k) for k in EVALUATION_SETTINGS if k in given}
    framework = {k: given.pop(k) for k in FRAMEWORK_SETTINGS if k in given}
    config = (entry.config_class()
              .framework("torch", **framework)
              .environment(task)
              .offline_data(input_=str(parquet_files(data).resolve()))
              .training(**given)
              .learners(num_learners=num_learners, num_gpus_per_learner=num_gpus_per_learner)
              .debugging(seed=seed))
    episodes = evaluation.pop("evaluation_duration", config.evaluation_duration)
    config.evaluation(evaluation_duration=max(episodes, 1), **evaluation).apply_smoke_test_limits()
    config.updates_per_iteration = min(config.updates_per_iteration, config.num_gradient_steps)
    if episodes == 0 and config.evaluation_every is not None:
        raise ValueError(f"evaluation_every {config.evaluation_every} needs evaluation episodes; eval_episodes is 0")
    return config.evaluation(evaluation_interval=config.evaluation_iterations if episodes > 0 else None)
