"""The cost budget at act time: the per-episode bookkeeping (``BudgetTracker``) and the pure conversion of
the remaining undiscounted budget into the scale of a discounted cost critic (``remaining_budget_threshold``).

The RLlib evaluation connector (``rllib_caps.core.budget_connector``) and Ray-free deployment
(``CAPSPolicy``) both keep their budget with ``BudgetTracker``; there is no other copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def remaining_budget_threshold(
    cost_threshold: torch.Tensor | float,
    cost_spent: torch.Tensor,
    step: torch.Tensor,
    horizon: int,
    gamma: float,
) -> torch.Tensor:
    """Converts the undiscounted remaining budget into the scale of a discounted Q^c (docs/paper.md, choice 4).

    ``thr_t = max(κ − c_<t, 0) · (1 − γ^(T−t)) / ((1 − γ)(T − t))``: the remaining budget spread evenly
    over the T − t remaining steps and re-summed with discounting. At t = 0 with γ → 1 this is κ itself.

    Args:
        cost_threshold: κ, scalar or shape ``(B,)``.
        cost_spent: c_<t, the undiscounted cost already incurred, shape ``(B,)``.
        step: t, the 0-based step index within the episode, shape ``(B,)``.
        horizon: T, the episode length.
        gamma: the discount the cost critic was trained with.
    """
    remaining = torch.clamp(torch.as_tensor(cost_threshold, dtype=cost_spent.dtype) - cost_spent, min=0.0)
    steps_left = torch.clamp(horizon - step.to(cost_spent.dtype), min=1.0)
    if gamma >= 1.0:
        return remaining
    discounted_sum = (1.0 - gamma**steps_left) / (1.0 - gamma)
    return remaining * discounted_sum / steps_left


def check_budget_input(value: Any, name: str, num_envs: int | None = None) -> np.ndarray:
    """A deployed policy's budget input as float64: the cost limit κ (``num_envs`` None: one number, +inf allowed)
    or the previous step's cost (one finite number, or one per env: shape ``(num_envs,)``).

    Raises ``TypeError`` for a non-number (a string, None, a bool) and ``ValueError`` for a wrong shape, NaN, a
    negative value or an infinite cost; the message names ``name``.
    """
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    array = array.astype(np.float64)
    shapes = [()] if num_envs is None else [(), (num_envs,)]
    if array.shape not in shapes:
        raise ValueError(f"{name} has shape {array.shape}, expected {' or '.join(map(str, shapes))}")
    if not (array >= 0).all():  # also NaN
        raise ValueError(f"{name} must be >= 0 (not NaN), got {value!r}")
    if num_envs is not None and not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite (info['cost'] of the previous step), got {value!r}")
    return array if num_envs is None else np.broadcast_to(array, (num_envs,))


class BudgetTracker:
    """The cost already spent (c_<t) and the step index (t) of ``num_envs`` parallel episodes.

    ``record(costs)`` after every env step adds that step's ``info["cost"]``; ``restart(mask)`` starts new
    episodes. Under gymnasium 1.x autoreset, call ``restart`` for an env when its new episode's first
    observation arrives, not before.
    """

    def __init__(self, num_envs: int = 1) -> None:
        self.spent = np.zeros(num_envs, dtype=np.float64)
        self.step = np.zeros(num_envs, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.spent)

    def restart(self, mask: np.ndarray | None = None) -> None:
        """Zeroes the bookkeeping of the envs where ``mask`` is True (all envs without a mask)."""
        mask = np.ones(len(self), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        self.spent[mask], self.step[mask] = 0.0, 0

    def record(self, costs: float | np.ndarray, mask: np.ndarray | None = None) -> None:
        """Adds one finished step with cost ``costs`` (scalar or ``(num_envs,)``) to the envs in ``mask``."""
        costs = np.broadcast_to(np.asarray(costs, dtype=np.float64), self.spent.shape)
        mask = np.ones(len(self), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if not np.isfinite(costs[mask]).all():
            raise ValueError(f"cost must be finite (info['cost'] of the previous step), got {costs[mask]}")
        self.spent[mask] += costs[mask]
        self.step[mask] += 1


def info_cost(info: dict) -> float:
    """The step cost an env reports in ``info["cost"]``; a clear error when it is missing."""
    try:
        return float(info["cost"])
    except KeyError:
        raise KeyError(f"the env's info has no 'cost' entry (keys: {sorted(info)}); offline safe RL needs "
                       "info['cost'] at every step") from None
