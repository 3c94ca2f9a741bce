"""PPO-Lagrangian's multiplier for behaviour policies trained at a target episode cost (DSRL's recipe).

A behaviour policy for target cost ``d`` maximises ``reward - λ·cost``; after every PPO iteration the
multiplier moves by the episode cost measured in that iteration, ``J_c``:

    λ ← clip(λ · exp(lr · tanh((J_c − d) / max(d, 1))), MIN_MULTIPLIER, MAX_MULTIPLIER)

The update is multiplicative so one step size serves tasks whose reward per step differs by orders of
magnitude (CarCircle's ≈ 0.05, MetaDrive's ≈ 0.4, against a cost of 1 per unsafe step): λ crosses a
decade in a few iterations whatever its scale. The violation is relative to the target (a cost of 30
against 20 is as large a miss as 3 against 2) and squashed by ``tanh``, so no single iteration moves λ
by more than a factor ``exp(lr)``. λ grows while the policy costs more than ``d`` and shrinks while it
costs less, so the policy settles where its episode cost is about ``d``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INITIAL_MULTIPLIER = 0.1  # λ at the start of training
MULTIPLIER_LR = 0.3  # at most a factor exp(0.3) ≈ 1.35 per PPO iteration
MIN_MULTIPLIER = 1e-3  # λ stays positive so a multiplicative update can grow it again
MAX_MULTIPLIER = 100.0


def update_multiplier(multiplier: float, episode_cost: float, target: float, lr: float = MULTIPLIER_LR) -> float:
    """The next multiplier after an iteration whose episodes cost `episode_cost` on average (see the module)."""
    if target < 0 or episode_cost < 0 or lr < 0:
        raise ValueError(f"target ({target}), episode_cost ({episode_cost}) and lr ({lr}) must be non-negative")
    violation = math.tanh((episode_cost - target) / max(target, 1.0))
    return min(max(multiplier * math.exp(lr * violation), MIN_MULTIPLIER), MAX_MULTIPLIER)


def step_multiplier(multiplier: float, episode_costs: Sequence[float], target: float) -> float:
    """`update_multiplier` on the mean of an iteration's finished episodes' costs; unchanged if none finished."""
    if not episode_costs:
        return multiplier
    return update_multiplier(multiplier, sum(episode_costs) / len(episode_costs), target)
