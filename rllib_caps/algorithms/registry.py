"""The algorithm registry: what the sweeps, the report and the CLIs need to know of each algorithm.

Importing this module imports neither Ray nor any algorithm; ``config_class`` is resolved on first use.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.caps.critic_variants import CRITICS

# Friendly setting names (CLI flags, the sweep YAML's `training`) -> the config attributes they set.
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
class AblationAxis:
    """One ablation table of the report (``report.ablations``): its records' values of ``name`` side by side, the
    other axes held at their reference."""

    name: str  # the TrialRecord attribute
    title: str
    label: Callable[[Any], str]  # a value's column label
    reference: Any  # held fixed while another axis varies, when the sweep has it
    order: tuple[Any, ...] = ()  # the columns' order (values not listed follow, sorted)


@dataclass(frozen=True)
class AlgorithmEntry:
    """One algorithm: how to build its config, how to label its trials, what a search may tune, whether the
    cost limit κ is chosen at deployment (one policy for every κ) or at training time, and the sweep's grid
    axes for it: trial-param names that are also ``build_config`` settings, e.g. ``("heads",)`` for CAPS and
    ``(COST_LIMIT_AXIS,)`` for an algorithm trained once per κ (the sweep fills in the task's thresholds)."""

    name: str
    config_path: str  # "module:ClassName" of its OfflineSafeConfig subclass
    trial_label: Callable[[Mapping[str, Any]], str]  # trial params -> the report's configuration label
    searchable: tuple[str, ...]
    threshold_at_deployment: bool
    title: str = ""  # the report's column title (default: the name)
    axes: tuple[str, ...] = ()  # sweep grid axes besides task and seed
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
    def policy_class(self) -> type:
        """Its deployable policy class: ``from_checkpoint(path)``, ``reset(threshold)``, ``act(obs, cost, reward=)``."""
        if not self.policy_path:
            raise ValueError(f"{self.name} has no deployable policy")
        return _resolve(self.policy_path)


def _resolve(path: str) -> type:
    """The class a "module:ClassName" path names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# Ablation axes of a trial (`--backbones`, `--actors`, `--critics`) and their defaults, left out of the labels.
AXIS_DEFAULTS = {"backbone": "iql", "actor": "shared", "critic": "offline"}


def _caps_label(params: Mapping[str, Any]) -> str:
    """``K=<K>``, then the ablation axes that differ from their default (e.g. ``sacbc``, ``separate``,
    ``fqe-reward``), then any searched β and λ."""
    label = f"K={int(params['heads'])}"
    for axis, default in AXIS_DEFAULTS.items():
        if params.get(axis, default) != default:
            label += f" {params[axis]}"
    search = params.get("search") or {}
    if "awr_beta" in search:
        label += f" β={search['awr_beta']:.3g}"
    if search.get("lambdas"):
        label += " λ=" + ",".join(f"{v:.3g}" for v in search["lambdas"])
    return label


CAPS_ABLATIONS = (
    AblationAxis("heads", "number of heads K", lambda k: f"K={k}", 2),
    AblationAxis("actor", "shared vs separate actors", lambda a: f"{a} actor", AXIS_DEFAULTS["actor"],
                 ("shared", "separate")),
    AblationAxis("backbone", "IQL vs SAC+BC", lambda b: {"iql": "CAPS(IQL)", "sacbc": "CAPS(SAC+BC)"}.get(b, b),
                 AXIS_DEFAULTS["backbone"], ("iql", "sacbc")),
    AblationAxis("critic", "offline critics vs FQE",
                 lambda c: {"offline": "offline critics", "fqe-reward": "FQE reward + offline cost",
                            "fqe-both": "FQE reward and cost"}.get(c, c), AXIS_DEFAULTS["critic"], CRITICS),
)


def fixed_label(label: str) -> Callable[[Mapping[str, Any]], str]:
    """The trial label of an algorithm whose trials differ only in seed and κ (both averaged in the report)."""
    return lambda params: label


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "caps": AlgorithmEntry(name="caps", config_path="rllib_caps.algorithms.caps.caps:CAPSConfig",
                           trial_label=_caps_label, searchable=("awr_beta", "lambdas"), threshold_at_deployment=True,
                           title="CAPS", axes=("heads", "backbone", "actor"),
                           policy_path="rllib_caps.algorithms.caps.policy:CAPSPolicy", ablations=CAPS_ABLATIONS,
                           reference_loop="rllib_caps.algorithms.caps.plain_loop:PlainLoop",
                           extension_path="rllib_caps.algorithms.caps.extension:CAPSExtension"),
    # BC-All ignores κ in training: one model per seed, evaluated at every threshold (docs/baselines.md).
    "bc-all": AlgorithmEntry(name="bc-all", config_path="rllib_caps.algorithms.bc.bc:BCConfig",
                             trial_label=fixed_label("BC-All"), searchable=(), threshold_at_deployment=False,
                             title="BC-All"),
    "bc-safe": AlgorithmEntry(name="bc-safe", config_path="rllib_caps.algorithms.bc.bc:BCSafeConfig",
                              trial_label=fixed_label("BC-Safe"), searchable=(),
                              threshold_at_deployment=False, title="BC-Safe", axes=(COST_LIMIT_AXIS,)),
    "bearl": AlgorithmEntry(name="bearl", config_path="rllib_caps.algorithms.bearl.bearl:BEARLConfig",
                            trial_label=fixed_label("BEAR-Lag"), searchable=(), threshold_at_deployment=False,
                            title="BEAR-Lag", axes=(COST_LIMIT_AXIS,)),
    "cpq": AlgorithmEntry(name="cpq", config_path="rllib_caps.algorithms.cpq.cpq:CPQConfig",
                          trial_label=fixed_label("CPQ"), searchable=(), threshold_at_deployment=False,
                          title="CPQ", axes=(COST_LIMIT_AXIS,)),
    "coptidice": AlgorithmEntry(name="coptidice",
                                config_path="rllib_caps.algorithms.coptidice.coptidice:COptiDICEConfig",
                                trial_label=fixed_label("COptiDICE"), searchable=(), threshold_at_deployment=False,
                                title="COptiDICE", axes=(COST_LIMIT_AXIS,)),
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
    """Whether the algorithm trains one model per cost limit κ (its sweep axis is ``COST_LIMIT_AXIS``)."""
    return COST_LIMIT_AXIS in entry.axes


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
