"""The trial-config schema of a sweep: what a Tune trial's params and results hold, and how they are decoded. The
sweep writes them (``rllib_caps.sweeps``) and the report reads them (``rllib_caps.report.records``), so this module
imports neither Ray nor any other sweep module.

A trial's params are ``{algo, task, <the algorithm's trained axes by name, e.g. num_heads or cost_limit>, seed |
seeds + __trial_index__, [search], setup}``; a grid sweep nests the per-algorithm part under ``variant``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllib_caps.algorithms.surface import COST_LIMIT, COST_LIMIT_AXIS

TRIAL_INDEX = "__trial_index__"  # ray.tune.search.repeater.TRIAL_INDEX: the repeat (seed) index under Repeater
VARIANT = "variant"  # a grid sweep's per-algorithm trial part: {algo, task, axes...} (Tune grid-searches it whole)
# Result key: value of the algorithm's evaluated axis -> results schema (``AlgorithmExtension.evaluate_variants``);
# experiments of rllib-caps before 0.3 wrote it as ``critic_evaluations``, still read.
VARIANT_RESULTS = "variant_evaluations"
LEGACY_VARIANT_RESULTS = "critic_evaluations"
EVALUATED = "evaluated"  # setup key: evaluated axis name -> the values each trained trial is evaluated at
TASK_SPECS = "task_specs"  # setup key: the declared tasks' specs by name (``TaskSpec.to_dict``), for the trials
ALGORITHM_SETTINGS = "algorithm_settings"  # setup key: the entries' sweep settings (``SweepSetting``) by name
# A packed trial (a population, rllib_caps.sweeps.packing): its params list its members, each ``{seed, [cost_limit]}``,
# or in a packed search ``{sample, seed, search}``;
# each result holds ``members: {member name: that member's result}``, and each checkpoint ``members/<name>/``, an
# ordinary checkpoint of that member.
MEMBERS = "members"



def trial_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's params with its ``variant`` (if any) merged into the top level."""
    return {**{k: v for k, v in params.items() if k != VARIANT}, **(params.get(VARIANT) or {})}


def trial_seed(params: Mapping[str, Any]) -> int:
    """``seed``, or under a Repeater (search) ``seeds[__trial_index__]``."""
    return int(params["seed"]) if "seed" in params else int(params["seeds"][params.get(TRIAL_INDEX, 0)])


def member_name(member: Mapping[str, Any]) -> str:
    """``seed0``, ``kappa10_seed0``, ``sample1_seed0``: a packed trial's member, in its results and checkpoint
    directories (``sample``: its Optuna sample's index in a packed search trial)."""
    kappa = [COST_LIMIT.part(member[COST_LIMIT_AXIS])] if COST_LIMIT_AXIS in member else []
    sample = [f"sample{int(member['sample'])}"] if "sample" in member else []
    return "_".join([*sample, *kappa, f"seed{int(member['seed'])}"])


def trial_members(params: Mapping[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """(member name, its own trial params) per member of a packed trial; ``[(None, params)]`` for a trial alone."""
    params = trial_params(params)
    if MEMBERS not in params:
        return [(None, params)]
    shared = {k: v for k, v in params.items() if k != MEMBERS}
    return [(member_name(member), {**shared, **member}) for member in params[MEMBERS]]

