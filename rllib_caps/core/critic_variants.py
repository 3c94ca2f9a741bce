"""Critic variants of a deployed policy: a policy that switches with critics (CAPS) can be evaluated with
critics fitted after training (FQE) in place of its offline ones. ``CriticVariantsAPI`` is what the evaluate
CLI and the sweep's trials call; the variants' names and the FQE settings live here so neither names an
algorithm. No Ray import."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rllib_caps.utils.smoke import smoke_test

# The critics the switching rule reads: the offline ones, FQE Q̂^r with the offline Q^c, FQE Q̂^r and Q̂^c.
CRITICS = ("offline", "fqe-reward", "fqe-both")


@dataclass(frozen=True)
class FQESettings:
    """FQE hyperparameters; the network sizes and γ come from the evaluated module."""

    steps: int = 20_000
    batch_size: int = 512
    lr: float = 3e-4
    tau: float = 0.005  # Polyak coefficient of the target critics, applied after every step
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"FQE {name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and 0 < self.tau <= 1):
            raise ValueError(f"FQE needs lr > 0 and 0 < tau <= 1, got lr={self.lr}, tau={self.tau}")

    def limited(self) -> FQESettings:
        """Under ``RLLIB_CAPS_SMOKE_TEST``: at most 20 steps of batches of at most 32; otherwise unchanged."""
        if not smoke_test():
            return self
        return replace(self, steps=min(self.steps, 20), batch_size=min(self.batch_size, 32))


class CriticVariantsAPI(abc.ABC):
    """Implemented by a deployable policy that can act with each of ``CRITICS``."""

    @abc.abstractmethod
    def evaluate_critics(self, dataset: Any, task: Any, thresholds: Sequence[float], episodes: int,
                         critics: Sequence[str], settings: FQESettings, *, seed: int = 0,
                         progress: bool = True) -> dict[str, dict[str, Any]]:
        """Critic variant -> the results schema of this policy rolled out with that variant's critics, the
        FQE ones fitted on ``dataset``; every variant sees the same episode seeds."""
