"""The algorithm registry: what the sweeps, the report and the CLIs need to know of each algorithm.

Importing this module imports neither Ray nor any algorithm; ``config_class`` is resolved on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Friendly setting names (CLI flags, the sweep YAML's `training`) -> the config attributes they set.
SETTING_ALIASES = {
    "steps": "num_gradient_steps",
    "heads": "num_heads",
    "batch_size": "train_batch_size_per_learner",
    "eval_episodes": "evaluation_duration",
    "eval_runners": "evaluation_num_env_runners",
    "thresholds": "evaluation_thresholds",
    "compile": "torch_compile_learner",
}
EVALUATION_SETTINGS = ("evaluation_duration", "evaluation_num_env_runners", "evaluation_thresholds")
FRAMEWORK_SETTINGS = ("torch_compile_learner",)  # opt-in torch.compile of the learner's forward_train


COST_LIMIT_AXIS = "cost_limit"  # the sweep axis of per-threshold algorithms: the task's three thresholds


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

    @property
    def display_name(self) -> str:
        return self.title or self.name

    @property
    def config_class(self) -> type:
        return _resolve(self.config_path)

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


def fixed_label(label: str) -> Callable[[Mapping[str, Any]], str]:
    """The trial label of an algorithm whose trials differ only in seed and κ (both averaged in the report)."""
    return lambda params: label


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "caps": AlgorithmEntry(name="caps", config_path="rllib_caps.algorithms.caps.caps:CAPSConfig",
                           trial_label=_caps_label, searchable=("awr_beta", "lambdas"), threshold_at_deployment=True,
                           title="CAPS", axes=("heads", "backbone", "actor"),
                           policy_path="rllib_caps.algorithms.caps.policy:CAPSPolicy"),
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


def get_algorithm(name: str) -> AlgorithmEntry:
    try:
        return ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None


def load_policy(checkpoint: str | Path, algo: str | None = None, *, verify: bool = True) -> Any:
    """The deployable policy of a checkpoint: ``algo``'s policy class, or (``algo`` None) that of the algorithm
    whose RLModule the checkpoint holds; ``verify=False`` skips the manifest check (logged)."""
    from rllib_caps.core.deployment import load_module

    module = load_module(checkpoint, verify=verify)
    for entry in ALGORITHMS.values():
        if entry.policy_path and algo in (None, entry.name):
            if isinstance(module, entry.config_class().get_default_rl_module_spec().module_class):
                return entry.policy_class(module)
    deployable = ", ".join(e.name for e in ALGORITHMS.values() if e.policy_path)
    raise ValueError(f"{checkpoint}: holds a {type(module).__name__}, not the module of "
                     f"{algo or 'an algorithm with a deployable policy'} ({deployable})")


def canonical_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` keyed by config attribute names (friendly names translated), without the unset (None) ones."""
    return {SETTING_ALIASES.get(k, k): v for k, v in settings.items() if v is not None}


def build_config(algo: str, task: str, data: str | Path, *, seed: int = 0, num_learners: int = 0,
                 num_gpus_per_learner: float = 0.0, **settings: Any) -> Any:
    """The algorithm's config for one task and dataset, ready to ``build_algo()``.

    ``settings`` are config attributes or their friendly names (``SETTING_ALIASES``); only those given
    (not None) are set, so everything else keeps the config class's default. ``eval_episodes=0`` trains
    without evaluation; otherwise the last of ``num_iterations`` iterations evaluates at every threshold.
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
    return config.evaluation(evaluation_interval=config.num_iterations if episodes > 0 else None)
