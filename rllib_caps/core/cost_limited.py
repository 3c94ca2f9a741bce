"""The base of algorithms trained for one cost limit κ (the paper's baselines: BC-Safe, BEAR-Lag, CPQ, ...).

CAPS takes κ at deployment; these take it at training time (``.training(cost_limit=κ)``) and are evaluated at
that κ alone, through the same evaluation path and episode seeds as CAPS. The sweep makes κ a training axis
for them (``AlgorithmEntry.threshold_at_deployment=False``).
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.utils.annotations import override

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
            self._value_error(f"{type(self).__name__} is trained for one cost limit: set "
                              f".training(cost_limit=κ) with κ > 0 (got {self.cost_limit!r})")

    @property
    @override(OfflineSafeConfig)
    def _model_config_auto_includes(self) -> dict[str, Any]:
        return super()._model_config_auto_includes | {"cost_limit": self.cost_limit}
