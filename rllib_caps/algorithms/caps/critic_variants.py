"""CAPS's critic variants: the switching policy can be evaluated with critics fitted after training (FQE) in place
of its offline ones (the paper's FQE ablation; ``fqe.evaluate_critics``, reached through ``CAPSExtension``: the
evaluate CLI's ``--critic`` and the sweep's critics). The variants' names and the FQE settings. No Ray import."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rllib_caps.utils.smoke import smoke_test

# The critics the switching rule reads: the offline ones, FQE Q̂^r with the offline Q^c, FQE Q̂^r and Q̂^c, and the
# offline Q^r with the fallback's Q̂^c_{K−1} at every head's action (the cost of acting with the head once, then with
# the cost head; docs/paper.md, "FQE ablation").
FQE_VARIANTS = ("fqe-reward", "fqe-both", "fqe-fallback")
CRITICS = ("offline", *FQE_VARIANTS)
# How the switching rule reads several refit cost critics (``rule_critic.read_members``).
ENSEMBLE_READINGS = ("max", "mean")


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


def check_rule_cost_expectile(expectile: float) -> float:
    """``expectile`` if it is a V^c expectile for the rule's refit cost critic (``rule_critic``), in (0, 1); a
    ``ValueError`` otherwise (the evaluate CLI asks before loading any data)."""
    if not 0.0 < expectile < 1.0:
        raise ValueError(f"the rule's cost expectile must be in (0, 1), got {expectile} (--rule-cost-expectile)")
    return expectile


def check_ensemble_reading(reading: str) -> str:
    """``reading`` if it is one of ``ENSEMBLE_READINGS``; a ``ValueError`` otherwise."""
    if reading not in ENSEMBLE_READINGS:
        raise ValueError(f"an ensemble is read by one of {ENSEMBLE_READINGS}, got {reading!r} (--rule-cost-reading)")
    return reading


def check_rule_cost_members(members: int) -> int:
    """``members`` if the rule's refit cost critic can have that many (at least 1); a ``ValueError`` otherwise (the
    evaluate CLI asks before loading any data)."""
    if members < 1:
        raise ValueError(f"--rule-cost-members must be >= 1: the rule's cost critic needs at least 1 member, got "
                         f"{members}")
    return members
