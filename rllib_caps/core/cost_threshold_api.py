"""``CostThresholdAPI``: the RLModule API of policies whose action depends on the cost limit κ chosen at
deployment (beside RLlib's ``TargetNetworkAPI`` and ``InferenceOnlyAPI``)."""

from __future__ import annotations

import abc


class CostThresholdAPI(abc.ABC):
    """Implemented by an RLModule that takes κ at act time (CAPS's switching rule, CDT's initial cost-to-go).

    Evaluation (``core.evaluation``) and the deployable policies tell such a module each κ before its episodes;
    a module trained for one κ does not implement it and is evaluated as trained.
    """

    @abc.abstractmethod
    def set_cost_threshold(self, threshold: float) -> None:
        """Sets the undiscounted episode cost limit κ the module acts for."""


def tell_cost_threshold(module: object, threshold: float) -> None:
    """Tells ``module`` κ if it acts for a κ chosen at deployment (``CostThresholdAPI``); else nothing."""
    if isinstance(module, CostThresholdAPI):
        module.set_cost_threshold(threshold)
