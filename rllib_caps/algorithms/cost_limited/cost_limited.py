"""The base of algorithms trained for one cost limit κ (the paper's baselines: BC-Safe, BEAR-Lag, CPQ, ...).

CAPS takes κ at deployment; these take it at training time (``.training(cost_limit=κ)``) and are evaluated at
that κ alone, through the same evaluation path and episode seeds as CAPS. The sweep makes κ a training axis
for them (``AlgorithmEntry.threshold_at_deployment=False``).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.utils.annotations import override

from rllib_caps.core.budget import remaining_budget_threshold
from rllib_caps.core.offline import OfflineSafeConfig


class CostLimitedConfig(OfflineSafeConfig):
    """``OfflineSafeConfig`` for an algorithm trained for one cost limit.

        cost_limit: κ, the episode cost limit in the task's cost units (required).

    Unless ``evaluation_thresholds`` is set explicitly, evaluation runs at ``[cost_limit]``.
    """

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class)
        self.cost_limit: float | None = None

    @override(OfflineSafeConfig)
    def training(self, *, cost_limit: float = NotProvided, **kwargs: Any) -> CostLimitedConfig:
        super().training(**kwargs)
        return self.set_provided(locals())

    @property
    @override(OfflineSafeConfig)
    def thresholds(self) -> list[float]:
        if self.evaluation_thresholds is None and self.cost_limit is not None:
            return [float(self.cost_limit)]
        return super().thresholds

    @override(OfflineSafeConfig)
    def validate(self) -> None:
        super().validate()
        if self.cost_limit is None or not float(self.cost_limit) > 0:
            self.config_error(f"{type(self).__name__} is trained for one cost limit: set "
                              f".training(cost_limit=κ) with κ > 0 (got {self.cost_limit!r})")

    @override(OfflineSafeConfig)
    def model_config_settings(self) -> dict[str, Any]:
        return super().model_config_settings() | {"cost_limit": self.cost_limit}

    @property
    def discounted_cost_limit(self) -> float:
        """q̄_c = κ (1 − γ^T) / ((1 − γ) T): κ spread evenly over the T steps and summed with discounting, the scale
        of a discounted cost critic (docs/baselines.md; ``remaining_budget_threshold`` at t = 0)."""
        threshold = remaining_budget_threshold(float(self.cost_limit), torch.zeros(1, dtype=torch.float64),
                                               torch.zeros(1), self.resolved_horizon, self.gamma)
        return float(threshold[0])
