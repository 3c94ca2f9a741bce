"""Losses shared by the offline algorithms with critics, as small pure torch functions (no Ray import).

Sign convention. A critic pair is trained on a signal it either maximises (reward; or cost in the
authors' code, which trains on −c) or minimises (cost in the paper's equations, trained on +c).
"Goodness" advantages are always oriented so that larger is better: ``A^r`` for reward and
``−A^c`` (= ``A^{−c}``) for cost, so the callers read the same in both conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from rllib_caps.core.ray_internals import foreach_lerp_


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """IQL's asymmetric L2: ``|τ − 1(u < 0)| u²`` averaged over the batch."""
    weight = torch.where(diff > 0, torch.full_like(diff, expectile), torch.full_like(diff, 1.0 - expectile))
    return (weight * diff.pow(2)).mean()


@dataclass
class CriticPairLosses:
    """Losses of one (twin Q, V) pair and the goodness advantage it hands to the actor."""

    q_loss: torch.Tensor
    v_loss: torch.Tensor
    advantage: torch.Tensor  # detached, larger = better, shape (B,)


def critic_pair_losses(
    *,
    q1: torch.Tensor,
    q2: torch.Tensor,
    q1_target: torch.Tensor,
    q2_target: torch.Tensor,
    v: torch.Tensor,
    v_next: torch.Tensor,
    signal: torch.Tensor,
    terminateds: torch.Tensor,
    gamma: float,
    expectile: float,
    maximize: bool,
) -> CriticPairLosses:
    """IQL for one critic pair (Kostrikov et al. 2022; CAPS trains one for reward, one for cost).

    - V: expectile regression onto the pessimistic target twin (min when maximising, max when
      minimising), ``L_V = E[L_τ(±(Q̂(s,a) − V(s)))]``;
    - Q: TD regression ``L_Q = E[(signal + γ (1 − terminated) V(s') − Q_i(s,a))²]`` for both twins,
      where ``terminateds`` marks the transitions that stop the bootstrap (``rllib_caps.core.time_limit``).
    """
    sign = 1.0 if maximize else -1.0
    pessimistic_target = pessimistic_twin(q1_target, q2_target, maximize=maximize).detach()
    v_loss = expectile_loss(sign * (pessimistic_target - v), expectile)
    q_loss = twin_td_loss(q1, q2, td_target(signal, v_next, gamma, terminateds))
    advantage = (sign * (pessimistic_target - v)).detach()
    return CriticPairLosses(q_loss=q_loss, v_loss=v_loss, advantage=advantage)


def pessimistic_twin(q1: torch.Tensor, q2: torch.Tensor, *, maximize: bool) -> torch.Tensor:
    """The pessimistic one of two twin estimates: the min for a maximised signal, the max for a minimised one."""
    return torch.min(q1, q2) if maximize else torch.max(q1, q2)


def twin_td_loss(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """½ (MSE(Q_1, y) + MSE(Q_2, y)): both twins regress onto the same (detached) TD target."""
    return 0.5 * ((q1 - target).pow(2).mean() + (q2 - target).pow(2).mean())


def polyak_update(online: torch.nn.Module, target: torch.nn.Module, tau: float) -> None:
    """θ' ← τ θ + (1 − τ) θ' for every parameter (in place, no grad; one fused kernel per device on GPUs)."""
    online_params, target_params = list(online.parameters()), list(target.parameters())
    if len(online_params) != len(target_params):
        raise ValueError(f"online and target nets differ: {len(online_params)} vs {len(target_params)} parameters")
    with torch.no_grad():
        foreach_lerp_(target_params, online_params, tau)


def td_target(signal: torch.Tensor, next_value: torch.Tensor, gamma: float,
              ends: torch.Tensor | None) -> torch.Tensor:
    """``signal + γ (1 − end) next_value`` (detached); ``ends`` broadcasts against ``next_value``; ``ends=None``
    bootstraps everywhere (OSRL's cost targets)."""
    mask = 1.0 if ends is None else 1.0 - ends.float()
    return (signal + gamma * mask * next_value).detach()


def ensemble_mse(predictions: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Σ over the ensemble's nets of ``E[(Q_i − y)²]``: every net regresses to the same target (OSRL's critic
    losses). ``predictions`` has shape ``(..., B)``, ``target`` ``(B,)``."""
    errors = (predictions - target).pow(2)
    return errors.reshape(-1, errors.shape[-1]).mean(-1).sum()


def total_loss(terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The sum of the loss terms that carry a gradient; the detached ones are metrics, logged beside them."""
    trained = [term for term in terms.values() if term.requires_grad]
    if not trained:
        raise ValueError(f"no loss term carries a gradient (terms: {', '.join(terms)})")
    return sum(trained[1:], trained[0])
