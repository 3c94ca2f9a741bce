"""Framework-agnostic part of the CDT RLModule; the torch implementation is in
``torch/default_cdt_torch_rl_module.py`` (like RLlib's IQL)."""

from __future__ import annotations

import abc

from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cdt.targets import return_target
from rllib_caps.core.cost_threshold_api import CostThresholdAPI


class DefaultCDTRLModule(RLModule, CostThresholdAPI, abc.ABC):
    """The Decision Transformer and, for training, the entropy temperature; ``_forward_train`` returns what
    ``losses.cdt_losses`` consumes. κ is chosen at deployment: ``set_cost_threshold`` sets the initial targets
    that the evaluation connector (``connector.CDTContext``) and ``CDTPolicy`` start every episode from."""

    cost_threshold: float = 0.0

    @override(CostThresholdAPI)
    def set_cost_threshold(self, threshold: float) -> None:
        self.cost_threshold = float(threshold)

    def initial_targets(self) -> tuple[float, float]:
        """(R̂₀, Ĉ₀) for the current κ: the task's return target for κ (``targets.return_target``) and κ."""
        pairs = [tuple(pair) for pair in self.model_config["return_targets"]]
        return return_target(pairs, self.cost_threshold), self.cost_threshold
