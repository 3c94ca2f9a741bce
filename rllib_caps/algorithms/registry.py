"""The algorithm registry: what the sweeps, the report and the CLIs need to know of each algorithm.

Importing this module imports neither Ray nor any algorithm; ``config_class`` is resolved on first use.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllib_caps.core.calibration import CostCriticAPI
from rllib_caps.core.critic_variants import CRITICS

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


COST_LIMIT_AXIS = "cost_limit"  # the sweep axis of per-threshold algorithms: the task's three thresholds


@dataclass(frozen=True)
class SweepAxis:
    """One sweep axis an algorithm declares: its trials differ in this value (or, ``evaluated``, each trained trial is
    evaluated once per value). ``name`` is the trial param, the record's key and the report's column; ``option`` the
    ``tune`` flag (``--<option>``) and sweep-YAML key that lists the values (empty: the values come from the task,
    only for κ); ``label`` writes a value in trial names and scopes (``K`` -> ``K2``), where a value at its default is
    left out unless ``named_default``; ``settings`` maps a value to the config settings it trains with (default:
    ``{name: value}``)."""

    name: str
    option: str = ""
    default: tuple[Any, ...] = ()
    kind: type = str
    choices: tuple[Any, ...] = ()
    help: str = ""
    label: str = ""
    named_default: bool = False
    settings: Callable[[Any], dict[str, Any]] | None = None
    evaluated: bool = False  # values are evaluations of one trained trial (``AlgorithmExtension.evaluate_variants``)
    legacy_names: tuple[str, ...] = ()  # the trial param's older names, read from older experiments' params.json

    @property
    def column(self) -> str:
        """Its name in report columns and descriptions: the label, else the name."""
        return self.label or self.name

    @property
    def reference(self) -> Any:
        """The value a trial without this axis has (its first default)."""
        return self.default[0] if self.default else None

    def config_settings(self, value: Any) -> dict[str, Any]:
        """The training settings of one value."""
        return self.settings(value) if self.settings else {self.name: value}

    def named(self, value: Any) -> bool:
        """Whether a trial's name and label show this value."""
        return self.named_default or value != self.reference

    def part(self, value: Any) -> str:
        """``K2``, ``kappa10``, ``sacbc``: the value as trial and member names write it."""
        if not self.label:
            return str(value)
        return f"{self.label}{float(value):g}" if self.kind is not str else f"{self.label}{value}"

    def text(self, value: Any) -> str:
        """``K=2``, ``sacbc``: the value as configuration labels write it."""
        return f"{self.label}={value}" if self.label else str(value)

    def scope_value(self, key: str) -> Any:
        """The value that a per-value override scope ``key`` (``K4``) names, or None where it names none."""
        if not self.label or not key.startswith(self.label) or len(key) == len(self.label):
            return None
        text = key[len(self.label):]
        try:
            value = self.kind(float(text)) if self.kind in (int, float) else self.kind(text)
        except ValueError:
            return None
        return value if self.part(value) == key else None

    def read(self, params: Mapping[str, Any]) -> Any:
        """A trial's value from its params (under its name or an older one), else None."""
        for name in (self.name, *self.legacy_names):
            if name in params:
                return params[name]
        return None


COST_LIMIT = SweepAxis(COST_LIMIT_AXIS, kind=float, label="kappa", named_default=True,
                       help="κ: the task's cost thresholds, one trial each")


@dataclass(frozen=True)
class SweepSetting:
    """A per-algorithm sweep option that is no axis (e.g. CAPS's ``fqe_steps``): a ``tune`` flag and sweep-YAML key,
    passed to ``AlgorithmExtension.evaluate_variants`` as its ``settings``."""

    name: str
    bounds: Mapping[str, Any] = field(default_factory=dict)  # utils.checks.check_number's keywords (a number)
    help: str = ""


@dataclass(frozen=True)
class TrainFlag:
    """An algorithm's own ``train`` flag: ``flag`` (``--heads``) sets ``setting`` (a friendly name or config
    attribute)."""

    setting: str
    flag: str
    kind: type | None = None  # None: a switch (store_true)
    choices: tuple[Any, ...] = ()
    help: str = ""


@dataclass(frozen=True)
class AblationAxis:
    """One ablation table of the report (``report.ablations``): its records' values of the axis ``name`` side by
    side, the other axes held at their reference."""

    name: str  # a SweepAxis name (the TrialRecord's ``axes`` key)
    title: str
    label: Callable[[Any], str]  # a value's column label
    reference: Any  # held fixed while another axis varies, when the sweep has it
    order: tuple[Any, ...] = ()  # the columns' order (values not listed follow, sorted)


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
    def reads_cost_critic(self) -> bool:
        """Whether its deployable policy switches on a cost critic it can report (``CostCriticAPI``)."""
        return bool(self.policy_path) and issubclass(self.policy_class, CostCriticAPI)

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


def axes_label(axes: Sequence[SweepAxis], params: Mapping[str, Any]) -> str:
    """``K=2 sacbc separate``: the values of ``axes`` that a label shows (``SweepAxis.named``); κ is left out (the
    report averages over it)."""
    return " ".join(axis.text(params[axis.name]) for axis in axes
                    if axis.name != COST_LIMIT_AXIS and axis.name in params and axis.named(params[axis.name]))


def search_label(search: Mapping[str, Any]) -> str:
    """``actor_lr=0.00123``: a trial's searched settings (``lr=0.1,0.2`` for a list)."""
    return " ".join(f"{name}=" + ",".join(f"{v:.3g}" for v in (value if isinstance(value, list) else [value]))
                    for name, value in search.items())


def fixed_label(label: str, *axes: SweepAxis) -> Callable[[Mapping[str, Any]], str]:
    """The trial label of an algorithm: ``label``, then the values of its ``axes`` that a label shows, then its
    searched settings (seed and κ are averaged in the report)."""
    return lambda params: " ".join(filter(None, [label, axes_label(axes, params),
                                                 search_label(params.get("search") or {})]))


# CAPS's surface: its axes (K, backbone, actor, critic), FQE's steps, its train flags and its search space.
CAPS_HEADS = SweepAxis("num_heads", option="heads", default=(2,), kind=int, label="K", named_default=True,
                       legacy_names=("heads",), help="CAPS's numbers of policy heads K, e.g. 2 4 8")
CAPS_BACKBONE = SweepAxis("backbone", option="backbones", default=("iql",), choices=("iql", "sacbc"),
                          help="offline RL backbones under the heads, one trial each (ablation: iql, sacbc)")
CAPS_ACTOR = SweepAxis("actor", option="actors", default=("shared",), choices=("shared", "separate"),
                       settings=lambda actor: {"shared_actor": actor == "shared"},
                       help="actor bodies, one trial each: shared (paper) or separate (ablation)")
CAPS_CRITIC = SweepAxis("critic", option="critics", default=("offline",), choices=CRITICS, evaluated=True,
                        help="critics the switching rule reads, each evaluated after the same training (FQE "
                             "ablation): offline, fqe-reward (FQE Q̂^r + offline Q^c), fqe-both (FQE Q̂^r and Q̂^c)")
CAPS_AXES = (CAPS_HEADS, CAPS_BACKBONE, CAPS_ACTOR, CAPS_CRITIC)


def _caps_label(params: Mapping[str, Any]) -> str:
    """``K=<K>``, then the ablation axes that differ from their default (e.g. ``sacbc``, ``separate``,
    ``fqe-reward``), then any searched β and λ."""
    label = axes_label(CAPS_AXES, params)
    search = params.get("search") or {}
    if "awr_beta" in search:
        label += f" β={search['awr_beta']:.3g}"
    if search.get("lambdas"):
        label += " λ=" + ",".join(f"{v:.3g}" for v in search["lambdas"])
    return label


CAPS_ABLATIONS = (
    AblationAxis(CAPS_HEADS.name, "number of heads K", lambda k: f"K={k}", CAPS_HEADS.reference),
    AblationAxis(CAPS_ACTOR.name, "shared vs separate actors", lambda a: f"{a} actor", CAPS_ACTOR.reference,
                 CAPS_ACTOR.choices),
    AblationAxis(CAPS_BACKBONE.name, "IQL vs SAC+BC",
                 lambda b: {"iql": "CAPS(IQL)", "sacbc": "CAPS(SAC+BC)"}.get(b, b), CAPS_BACKBONE.reference,
                 CAPS_BACKBONE.choices),
    AblationAxis(CAPS_CRITIC.name, "offline critics vs FQE",
                 lambda c: {"offline": "offline critics", "fqe-reward": "FQE reward + offline cost",
                            "fqe-both": "FQE reward and cost"}.get(c, c), CAPS_CRITIC.reference, CRITICS),
)
CAPS_SWEEP_SETTINGS = (SweepSetting("fqe_steps", bounds={"integer": True, "minimum": 1},
                                    help="FQE gradient steps per trial with --critics fqe-* [20000]"),)
CAPS_TRAIN_FLAGS = (
    TrainFlag("heads", "--heads", int, help="CAPS: number of policy heads K >= 2"),
    TrainFlag("backbone", "--backbone", str, CAPS_BACKBONE.choices,
              help="CAPS's offline RL backbone: IQL or SAC+BC (docs/paper.md, Training)"),
    TrainFlag("implementation", "--implementation", str, ("paper", "code"),
              help="the paper's equations or the authors' code behaviour (docs/paper.md)"),
    TrainFlag("actor_time", "--actor-time",
              help="CAPS with --time-limit time_aware: the actor heads also see the remaining time"),
    TrainFlag("cost_gamma", "--cost-gamma", float,
              help="CAPS: the cost critics' discount; 1.0 (with --time-limit terminal or time_aware) makes Q^c the "
                   "undiscounted cost-to-go, compared with the budget left itself"),
)


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "caps": AlgorithmEntry(name="caps", config_path="rllib_caps.algorithms.caps.caps:CAPSConfig",
                           trial_label=_caps_label, searchable=("awr_beta", "lambdas"), threshold_at_deployment=True,
                           title="CAPS", axes=CAPS_AXES, sweep_settings=CAPS_SWEEP_SETTINGS,
                           train_flags=CAPS_TRAIN_FLAGS,
                           search_space="rllib_caps.algorithms.caps.search_space:caps_search_space",
                           policy_path="rllib_caps.algorithms.caps.policy:CAPSPolicy", ablations=CAPS_ABLATIONS,
                           reference_loop="rllib_caps.algorithms.caps.plain_loop:PlainLoop",
                           extension_path="rllib_caps.algorithms.caps.extension:CAPSExtension"),
    # BC-All ignores κ in training: one model per seed, evaluated at every threshold (docs/baselines.md).
    "bc-all": AlgorithmEntry(name="bc-all", config_path="rllib_caps.algorithms.bc.bc:BCConfig",
                             trial_label=fixed_label("BC-All"), searchable=(), threshold_at_deployment=False,
                             title="BC-All"),
    "bc-safe": AlgorithmEntry(name="bc-safe", config_path="rllib_caps.algorithms.bc.bc:BCSafeConfig",
                              trial_label=fixed_label("BC-Safe"), searchable=(),
                              threshold_at_deployment=False, title="BC-Safe", axes=(COST_LIMIT,)),
    "bearl": AlgorithmEntry(name="bearl", config_path="rllib_caps.algorithms.bearl.bearl:BEARLConfig",
                            trial_label=fixed_label("BEAR-Lag"), searchable=(), threshold_at_deployment=False,
                            title="BEAR-Lag", axes=(COST_LIMIT,)),
    "cpq": AlgorithmEntry(name="cpq", config_path="rllib_caps.algorithms.cpq.cpq:CPQConfig",
                          trial_label=fixed_label("CPQ"), searchable=(), threshold_at_deployment=False,
                          title="CPQ", axes=(COST_LIMIT,)),
    "coptidice": AlgorithmEntry(name="coptidice",
                                config_path="rllib_caps.algorithms.coptidice.coptidice:COptiDICEConfig",
                                trial_label=fixed_label("COptiDICE"), searchable=(), threshold_at_deployment=False,
                                title="COptiDICE", axes=(COST_LIMIT,)),
    # CDT takes κ at deployment as its initial cost-to-go: one model per seed for every κ (docs/baselines.md).
    "cdt": AlgorithmEntry(name="cdt", config_path="rllib_caps.algorithms.cdt.cdt:CDTConfig",
                          trial_label=fixed_label("CDT"), searchable=(), threshold_at_deployment=True, title="CDT",
                          policy_path="rllib_caps.algorithms.cdt.policy:CDTPolicy"),
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


def defaults_text(setting: str) -> str:
    """The config classes' defaults of ``setting`` (a friendly or attribute name) for help texts: the one value when
    every algorithm that has the setting agrees, else e.g. ``100000 (caps, cpq); 300000 (bearl)``. A config's
    ``resolved_<setting>`` property, where it has one, gives the value in effect (e.g. ``resolved_time_limit``)."""
    attribute = SETTING_ALIASES.get(setting, setting)
    groups: dict[str, list[str]] = {}
    for name in ALGORITHMS:
        config = default_config(name)
        value = getattr(config, f"resolved_{attribute}", getattr(config, attribute, None))
        if value is not None:
            text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            groups.setdefault(text, []).append(name)
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


def build_config(algo: str, task: str, data: str | Path, *, seed: int = 0, num_learners: int = 0,
                 num_gpus_per_learner: float = 0.0, **settings: Any) -> Any:
    """The algorithm's config for one task and dataset, ready to ``build_algo()``.

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
