"""Behaviour-cloning losses as small pure torch functions (no Ray import), shared by the RLlib learner and the
plain-PyTorch benchmark loop (docs/baselines.md, "BC")."""

from __future__ import annotations

import math

import torch

POLICIES = ("deterministic", "gaussian")


def deterministic_bc_loss(predicted: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """OSRL's BC loss: the mean squared error between π(s) and the dataset action, averaged over the batch and
    the action dimensions (``F.mse_loss``), i.e. min E‖π(s) − a‖² / |A|."""
    return (predicted - actions).pow(2).mean()


def gaussian_bc_loss(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Maximum likelihood under a diagonal Gaussian N(mean, exp(log_std)²): −E[log π(a | s)], the log-density
    summed over action dimensions and averaged over the batch."""
    var = (2.0 * log_std).exp()
    log_prob = -0.5 * ((actions - mean).pow(2) / var + 2.0 * log_std + math.log(2.0 * math.pi))
    return -log_prob.sum(-1).mean()


def bc_loss(policy: str, mean: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor) -> torch.Tensor:
    """The BC loss of the configured ``policy`` ("deterministic": MSE; "gaussian": negative log-likelihood)."""
    if policy == "deterministic":
        return deterministic_bc_loss(mean, actions)
    if policy == "gaussian":
        if log_std is None:
            raise ValueError("the gaussian BC loss needs the policy's log_std")
        return gaussian_bc_loss(mean, log_std, actions)
    raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
