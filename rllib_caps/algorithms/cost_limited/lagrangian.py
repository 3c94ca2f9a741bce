"""Lagrange multipliers as small pure updates (no Ray import), and the module buffers that keep their state so it
is saved in checkpoints (OSRL keeps the PID state outside its checkpoint).

- ``pid_lagrangian``: the PID-controlled multiplier of BEAR-Lag's cost constraint (Stooke et al. 2020, as OSRL's
  ``LagrangianPIDController``);
- ``dual_log_step``: the dual ascent on log α of BEAR's MMD constraint and CPQ's OOD-inflation constraint;
- ``SoftplusMultiplier``: a multiplier learned by gradient descent on its own loss (COptiDICE's λ and τ).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class PIDGains:
    kp: float
    ki: float
    kd: float


def pid_lagrangian(error: torch.Tensor, integral: torch.Tensor, previous_error: torch.Tensor,
                   gains: PIDGains) -> tuple[torch.Tensor, torch.Tensor]:
    """One PID step on the constraint error e = mean(Q_c − q̄_c) of this batch.

    ``I ← max(0, I + e)``, ``D = max(0, e − e_prev)``, ``λ = max(0, K_P max(0, e) + K_I I + K_D D)``.
    Returns ``(λ, I)``; the caller keeps ``e`` as the next ``previous_error``.
    """
    integral = torch.relu(integral + error)
    derivative = torch.relu(error - previous_error)
    multiplier = torch.relu(gains.kp * torch.relu(error) + gains.ki * integral + gains.kd * derivative)
    return multiplier, integral


def dual_log_step(log_multiplier: torch.Tensor, violation: torch.Tensor, lr: float,
                  bound: float = 5.0) -> torch.Tensor:
    """``log α ← clamp(log α + lr · α · violation, −bound, bound)``: α grows while its constraint is violated
    (violation > 0) and shrinks otherwise (OSRL's BEAR-Lag and CPQ updates, ±5 clamp)."""
    return (log_multiplier + lr * log_multiplier.exp() * violation).clamp(-bound, bound)


class MultiplierState(nn.Module):
    """The multipliers' state as buffers (saved with the module): ``log_alpha`` (α = 1 at start), and the PID's
    ``pid_integral`` and ``pid_error`` (the previous step's error)."""

    def __init__(self) -> None:
        super().__init__()
        for name in ("log_alpha", "pid_integral", "pid_error"):
            self.register_buffer(name, torch.zeros(()))

    @torch.no_grad()
    def assign(self, **values: torch.Tensor) -> None:
        for name, value in values.items():
            getattr(self, name).copy_(value.detach())


class SoftplusMultiplier(nn.Module):
    """A non-negative multiplier softplus(ρ) with a learned raw parameter ρ, initialised at 1 (OSRL's COptiDICE
    λ and τ, each with its own Adam)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = nn.Parameter(torch.ones(()))

    def forward(self) -> torch.Tensor:
        return torch.nn.functional.softplus(self.raw)
