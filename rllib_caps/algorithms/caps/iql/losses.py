"""CAPS(IQL) losses as small pure torch functions (paper Sec. "IQL Instantiation", Eq. 8-9): expectile value
regression and TD Q regression for the reward and the cost critics, and advantage-weighted regression (AWR) of
the K heads.

Everything here works on plain tensors and floats, so it is unit-tested without Ray and shared by the RLlib
learner and the plain-PyTorch benchmark loop. The critic-pair losses are the shared ones of
``rllib_caps.core.losses``, the heads' λ-mixing CAPS's (``rllib_caps.algorithms.caps.shared_losses``);
advantages are goodness-oriented (see there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rllib_caps.algorithms.caps import keys as m
from rllib_caps.algorithms.caps.shared_losses import cost_signal, head_coefficients, head_row_weights
from rllib_caps.core.losses import CriticPairLosses, critic_pair_losses
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import schema


def awr_head_weights(
    reward_advantage: torch.Tensor,
    cost_advantage: torch.Tensor,
    *,
    beta: float,
    lambdas: Sequence[float] | torch.Tensor,
    max_weight: float = 100.0,
    mode: str = "paper",
    beta_cost: float | None = None,
) -> torch.Tensor:
    """Advantage weights of the K heads, shape ``(B, K)`` (docs/paper.md, choice 1).

    - ``"paper"``: ``w_k = min(exp(β (A^r − λ_k A^c)), max_weight)`` (Eq. 8);
    - ``"code"``: ``w_r = min(exp(β A^r), max)``, ``w_c = min(exp(β_c A^{−c}), max)``, ``w_k = w_r + λ_k w_c``,
      with the cost advantage's own ``beta_cost`` β_c (None: β), as in the authors' code.

    Both advantages are goodness-oriented (see module docstring); the coefficients come from
    ``shared_losses.head_coefficients``.
    """
    a_r = reward_advantage.unsqueeze(-1)
    a_c = cost_advantage.unsqueeze(-1)
    r, c = head_coefficients(lambdas, a_r)
    if mode == "paper":
        return torch.clamp(torch.exp(beta * (r * a_r + c * a_c)), max=max_weight)
    if mode == "code":
        w_r = torch.clamp(torch.exp(beta * a_r), max=max_weight)
        w_c = torch.clamp(torch.exp((beta if beta_cost is None else beta_cost) * a_c), max=max_weight)
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
    dist = torch.distributions.Normal(mean, log_std.exp().expand_as(mean), validate_args=False)  # no device syncs
    return dist.log_prob(actions.unsqueeze(1)).sum(-1)


def awr_actor_loss(log_probs: torch.Tensor, weights: torch.Tensor, *, mean_over_heads: bool = False) -> torch.Tensor:
    """Advantage-weighted regression for all heads at once: ``−Σ_k E[w_k log π_k(a|s)]`` (Eq. 8), or with
    ``mean_over_heads`` (the authors' code) ``−(1/K) Σ_k E[w_k log π_k(a|s)]``."""
    per_head = -(weights.detach() * log_probs).mean(0)
    return per_head.mean() if mean_over_heads else per_head.sum()


@dataclass(frozen=True)
class IQLLossSettings:
    """Hyperparameters the CAPS(IQL) loss needs; ``CAPSConfig.loss_settings()`` fills them from the config (through
    the IQL backbone, ``iql.backbone``), the one home of their defaults."""

    gamma: float
    reward_scale: float
    expectile_reward: float
    expectile_cost: float
    beta: float
    max_weight: float
    lambdas: Sequence[float] | torch.Tensor  # the K−2 middle heads' λ_k (``shared_losses.head_coefficients``)
    implementation: str
    time_limit: str
    cost_gamma: float  # the cost critics' discount (``CAPSConfig.cost_gamma``; γ unless set)
    beta_cost: float | None = None  # code mode's β of the cost advantage (None: β); paper mode has one β

    @property
    def cost_maximize(self) -> bool:
        """The authors' code trains the cost critics on −c (maximised); the paper on +c (minimised)."""
        return self.implementation == "code"

    @property
    def mean_over_heads(self) -> bool:
        """The authors' code averages the actor loss over the heads; the paper's objective (and "paper") sums."""
        return self.implementation == "code"


def caps_iql_head_weights(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                          settings: IQLLossSettings) -> tuple[torch.Tensor, CriticPairLosses, CriticPairLosses]:
    """The heads' advantage weights ``(B, K)`` (``awr_head_weights``) and the reward and cost critic pairs' losses
    they come from, for one ``_forward_train`` output: what the actor's AWR regresses with."""
    terminateds = episode_ends(batch, settings.time_limit)
    reward = critic_pair_losses(
        q1=fwd_out[m.QR_PREDS], q2=fwd_out[m.QR_TWIN_PREDS], q1_target=fwd_out[m.QR_TARGET_PREDS],
        q2_target=fwd_out[m.QR_TARGET_TWIN_PREDS], v=fwd_out[m.VR_PREDS], v_next=fwd_out[m.VR_PREDS_NEXT],
        signal=settings.reward_scale * batch[schema.REWARDS], terminateds=terminateds,
        gamma=settings.gamma, expectile=settings.expectile_reward, maximize=True,
    )
    cost = critic_pair_losses(
        q1=fwd_out[m.QC_PREDS], q2=fwd_out[m.QC_TWIN_PREDS], q1_target=fwd_out[m.QC_TARGET_PREDS],
        q2_target=fwd_out[m.QC_TARGET_TWIN_PREDS], v=fwd_out[m.VC_PREDS], v_next=fwd_out[m.VC_PREDS_NEXT],
        signal=cost_signal(batch[schema.COSTS], settings.cost_maximize), terminateds=terminateds,
        gamma=settings.cost_gamma, expectile=settings.expectile_cost, maximize=settings.cost_maximize,
    )
    weights = awr_head_weights(reward.advantage, cost.advantage, beta=settings.beta, lambdas=settings.lambdas,
                           max_weight=settings.max_weight, mode=settings.implementation, beta_cost=settings.beta_cost)
    return weights, reward, cost


def caps_iql_losses(fwd_out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                    settings: IQLLossSettings) -> dict[str, torch.Tensor]:
    """All CAPS(IQL) loss terms from one ``_forward_train`` output; their sum is the total loss.

    Every term touches a disjoint set of parameters (targets and advantage weights are detached), so
    one backward pass on the sum gives each network exactly the gradient of its own loss.
    """
    weights, reward, cost = caps_iql_head_weights(fwd_out, batch, settings)
    row_weights = head_row_weights(batch, weights.shape[-1])
    if row_weights is not None:
        weights = weights * row_weights
    log_probs = gaussian_log_prob(batch[schema.ACTIONS], fwd_out[m.HEAD_MEANS], fwd_out[m.HEAD_LOG_STD])
    return {
        "actor_loss": awr_actor_loss(log_probs, weights, mean_over_heads=settings.mean_over_heads),
        "qr_loss": reward.q_loss, "vr_loss": reward.v_loss,
        "qc_loss": cost.q_loss, "vc_loss": cost.v_loss,
    }
