"""CAPS's surface, declared for its registry entry: its sweep axes (K, backbone, actor, and the critic variants it is
evaluated with), FQE's steps, its own ``train`` flags, its trial label and its ablation tables. No Ray import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllib_caps.algorithms.caps.critic_variants import CRITICS
from rllib_caps.algorithms.surface import AblationAxis, SweepAxis, SweepSetting, TrainFlag, axes_label

CAPS_HEADS = SweepAxis("num_heads", option="heads", default=(2,), kind=int, label="K", named_default=True,
                       legacy_names=("heads",), help="CAPS's numbers of policy heads K, e.g. 2 4 8")
CAPS_BACKBONE = SweepAxis("backbone", option="backbones", default=("iql",), choices=("iql", "sacbc"),
                          help="offline RL backbones under the heads, one trial each (ablation: iql, sacbc)")
CAPS_ACTOR = SweepAxis("actor", option="actors", default=("shared",), choices=("shared", "separate"),
                       settings=lambda actor: {"shared_actor": actor == "shared"},
                       help="actor bodies, one trial each: shared (paper) or separate (ablation)")
CAPS_CRITIC = SweepAxis("critic", option="critics", default=("offline",), choices=CRITICS, evaluated=True,
                        help="critics the switching rule reads, each evaluated after the same training (FQE "
                             "ablation): offline, fqe-reward (FQE Q̂^r + offline Q^c), fqe-both (FQE Q̂^r and Q̂^c), "
                             "fqe-fallback (offline Q^r; Q^c: the head once, then the cost head, by FQE)")
CAPS_AXES = (CAPS_HEADS, CAPS_BACKBONE, CAPS_ACTOR, CAPS_CRITIC)


def caps_label(params: Mapping[str, Any]) -> str:
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
                            "fqe-both": "FQE reward and cost", "fqe-fallback": "FQE cost of the fallback"}.get(c, c),
                 CAPS_CRITIC.reference, CRITICS),
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
    TrainFlag("expectile_reward", "--expectile-reward", float,
              help="CAPS(IQL): the reward value's expectile τ_r in (0, 1); the paper's 0.7, 0.5 on MetaDrive"),
    TrainFlag("expectile_cost", "--expectile-cost", float,
              help="CAPS(IQL): the cost value's expectile τ_c in (0, 1). 0.7 (the paper's) fits V^c to the cheaper "
                   "continuations in the data, 0.5 (the paper's MetaDrive setting) to their mean, below 0.5 to the "
                   "costlier ones, so Q^c reads a more pessimistic cost-to-go (docs/paper.md)"),
    TrainFlag("cost_head_episode_limit", "--cost-head-episode-limit", float,
              help="CAPS: the cost head (the fallback when no head fits the budget) learns only from the episodes "
                   "whose total cost is at most this, e.g. the task's smallest threshold; inf: every episode "
                   "(docs/paper.md, \"A cost head of the safe episodes\")"),
)
