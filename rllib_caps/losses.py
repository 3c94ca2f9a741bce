"""CAPS(IQL) losses as small pure torch functions (paper Sec. "IQL Instantiation", Eq. 8-9).

Everything here works on plain tensors, so it is unit-tested without Ray and shared by the RLlib
learner and the plain-PyTorch benchmark loop.

Sign convention. A critic pair is trained on a signal it either maximises (reward; or cost in the
authors' code, which trains on −c) or minimises (cost in the paper's equations, trained on +c).
"Goodness" advantages are always oriented so that larger is better: ``A^r`` for reward and
``−A^c`` (= ``A^{−c}``) for cost, so the head weights read the same in both conventions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rllib_caps.caps import keys as m


def default_lambdas(num_heads: int) -> list[float]:
    """λ_k = k / ((K − 1) / 2) for the K − 2 middle heads k = 1 … K − 2 (paper, hyperparameter table)."""
    if num_heads < 2:
        raise ValueError(f"num_heads must be >= 2, got {num_heads}")
    return [k / ((num_heads - 1) / 2) for k in range(1, num_heads - 1)]


def head_coefficients(lambdas: list[float]) -> tuple[list[float], list[float]]:
    """Per-head (reward, cost) advantage coefficients: head 0 uses A^r only, head K−1 uses −A^c only,
    middle head k uses A^r − λ_k A^c (paper, text after Eq. 9)."""
    reward = [1.0] + [1.0] * len(lambdas) + [0.0]
    cost = [0.0] + list(lambdas) + [1.0]
    return reward, cost


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
    - Q: TD regression ``L_Q = E[(signal + γ (1 − terminated) V(s') − Q_i(s,a))²]`` for both twins.
      Truncated (time-out) transitions bootstrap: only ``terminateds`` stops it.
    """
    sign = 1.0 if maximize else -1.0
    pessimistic_target = torch.min(q1_target, q2_target) if maximize else torch.max(q1_target, q2_target)
    pessimistic_target = pessimistic_target.detach()
    v_loss = expectile_loss(sign * (pessimistic_target - v), expectile)
    td_target = (signal + gamma * (1.0 - terminateds.float()) * v_next).detach()
    q_loss = 0.5 * ((q1 - td_target).pow(2).mean() + (q2 - td_target).pow(2).mean())
    advantage = (sign * (pessimistic_target - v)).detach()
    return CriticPairLosses(q_loss=q_loss, v_loss=v_loss, advantage=advantage)


def head_weights(
    reward_advantage: torch.Tensor,
    cost_advantage: torch.Tensor,
    *,
    beta: float,
    reward_coef: list[float],
    cost_coef: list[float],
    max_weight: float = 100.0,
    mode: str = "paper",
) -> torch.Tensor:
    """Advantage weights of the K heads, shape ``(B, K)`` (digest, choice 1).

    - ``"paper"``: ``w_k = min(exp(β (A^r − λ_k A^c)), max_weight)`` (Eq. 8);
    - ``"code"``: ``w_r = min(exp(β A^r), max)``, ``w_c = min(exp(β A^{−c}), max)``, ``w_k = w_r + λ_k w_c``.

    Both advantages are goodness-oriented (see module docstring); the coefficients come from
    :func:`head_coefficients`.
    """
    a_r = reward_advantage.unsqueeze(-1)
    a_c = cost_advantage.unsqueeze(-1)
    r = torch.as_tensor(reward_coef, dtype=a_r.dtype, device=a_r.device)
    c = torch.as_tensor(cost_coef, dtype=a_c.dtype, device=a_c.device)
    if mode == "paper":
        return torch.clamp(torch.exp(beta * (r * a_r + c * a_c)), max=max_weight)
    if mode == "code":
        w_r = torch.clamp(torch.exp(beta * a_r), max=max_weight)
        w_c = torch.clamp(torch.exp(beta * a_c), max=max_weight)
        return r * w_r + c * w_c
    raise ValueError(f"implementation must be 'paper' or 'code', got {mode!r}")


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density of dataset actions under every head.

    Args:
        actions: ``(B, A)``; mean: ``(B, K, A)``; log_std: broadcastable to ``(B, K, A)``.

    Returns:
        ``(B, K)``. With ``log_std = 0`` (the authors' code) this is −½‖a − μ_k‖² + const, i.e. the
        advantage-weighted MSE the code optimises.
    """
    dist = torch.distributions.Normal(mean, log_std.exp().expand_as(mean))
    return dist.log_prob(actions.unsqueeze(1)).sum(-1)


def actor_loss(log_probs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Advantage-weighted regression for all heads at once: ``−Σ_k E[w_k log π_k(a|s)]`` (Eq. 8)."""
    return -(weights.detach() * log_probs).mean(0).sum()


def polyak_update(online: torch.nn.Module, target: torch.nn.Module, tau: float) -> None:
    """θ' ← τ θ + (1 − τ) θ' for every parameter (in place, no grad)."""
    with torch.no_grad():
        for p, p_target in zip(online.parameters(), target.parameters(), strict=True):
            p_target.lerp_(p, tau)


@dataclass(frozen=True)
class CAPSLossSettings:
    """Hyperparameters the CAPS(IQL) loss needs (defaults: the paper's table, digest "Training")."""

    gamma: float = 0.99
    reward_scale: float = 0.1
    expectile_reward: float = 0.7
    expectile_cost: float = 0.7
    beta: float = 3.0
    max_weight: float = 100.0
    lambdas: tuple[float, ...] = ()
    implementation: str = "paper"

    @property
    def cost_maximize(self) -> bool:
        """The authors' code trains the cost critics on −c (maximised); the paper on +c (minimised)."""
        return self.implementation == "code"


def caps_iql_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                    settings: CAPSLossSettings) -> dict[str, torch.Tensor]:
    """All CAPS(IQL) loss terms from one ``_forward_train`` output; their sum is the total loss.

    Every term touches a disjoint set of parameters (targets and advantage weights are detached), so
    one backward pass on the sum gives each network exactly the gradient of its own loss.
    """
    terminateds = batch[m.TERMINATEDS]
    reward = critic_pair_losses(
        q1=fwd_out[m.QR_PREDS], q2=fwd_out[m.QR_TWIN_PREDS], q1_target=fwd_out[m.QR_TARGET_PREDS],
        q2_target=fwd_out[m.QR_TARGET_TWIN_PREDS], v=fwd_out[m.VR_PREDS], v_next=fwd_out[m.VR_PREDS_NEXT],
        signal=settings.reward_scale * batch[m.REWARDS], terminateds=terminateds,
        gamma=settings.gamma, expectile=settings.expectile_reward, maximize=True,
    )
    cost_sign = -1.0 if settings.cost_maximize else 1.0
    cost = critic_pair_losses(
        q1=fwd_out[m.QC_PREDS], q2=fwd_out[m.QC_TWIN_PREDS], q1_target=fwd_out[m.QC_TARGET_PREDS],
        q2_target=fwd_out[m.QC_TARGET_TWIN_PREDS], v=fwd_out[m.VC_PREDS], v_next=fwd_out[m.VC_PREDS_NEXT],
        signal=cost_sign * batch[m.COSTS], terminateds=terminateds,
        gamma=settings.gamma, expectile=settings.expectile_cost, maximize=settings.cost_maximize,
    )
    reward_coef, cost_coef = head_coefficients(list(settings.lambdas))
    weights = head_weights(reward.advantage, cost.advantage, beta=settings.beta, reward_coef=reward_coef,
                           cost_coef=cost_coef, max_weight=settings.max_weight, mode=settings.implementation)
    log_probs = gaussian_log_prob(batch[m.ACTIONS], fwd_out[m.HEAD_MEANS], fwd_out[m.HEAD_LOG_STD])
    return {
        "actor_loss": actor_loss(log_probs, weights),
        "qr_loss": reward.q_loss, "vr_loss": reward.v_loss,
        "qc_loss": cost.q_loss, "vc_loss": cost.v_loss,
    }
