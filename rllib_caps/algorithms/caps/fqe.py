"""Fitted Q evaluation (Le et al., 2019) of every CAPS head on the training dataset: the paper's FQE ablation
(Sec. "Ablation Studies", "Off-policy evaluation"; Appendix "Results for FQE Variants of CAPS").

After training, each head π_k (the deterministic mean action the switching rule uses) gets its own twin
critic Q̂^r_k, and with a cost variant also Q̂^c_k, fitted on the same dataset by TD regression onto
``signal + γ (1 − end) Q̂'_k(s', π_k(s'))`` with Polyak-averaged targets. The switching rule then reads these
in place of the offline critics through ``head_values(..., critics=...)`` of the CAPS module: ``"fqe-reward"``,
Q̂^r with the offline Q^c; ``"fqe-both"``, Q̂^r and Q̂^c; ``"fqe-fallback"``, the offline Q^r and, for every head k,
the cost head's Q̂^c_{K−1}(s, π_k(s)): the cost of acting with head k once and with the fallback ever after. Choices
are documented in docs/paper.md, "FQE ablation". Pure torch: no Ray import.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from rllib_caps.algorithms.caps.critic_variants import CRITICS, FQE_VARIANTS, FQESettings
from rllib_caps.core.nets import TwinQ
from rllib_caps.core.optim import adam, step_with_targets
from rllib_caps.core.rollout import evaluate_policy
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import ACTIONS, COSTS, NEXT_OBS, OBS, REWARDS, T
from rllib_caps.envs import TaskSpec

ACTION_CHUNK = 65_536  # dataset rows per actor call when precomputing the heads' next actions

Actor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (obs (B, D), step (B,)) -> head actions (B, K, A)
CriticInput = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]  # (obs, step) -> critic input


def fqe_loss(q1: torch.Tensor, q2: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor,
             signal: torch.Tensor, ends: torch.Tensor, gamma: float) -> torch.Tensor:
    """FQE's TD regression for one twin critic: each twin i regresses onto
    ``signal + γ (1 − end) Q̂'_i(s', π(s'))`` from its own target (no min/max: FQE estimates Q^π itself, the
    switching rule applies the pessimistic twin afterwards). ``ends``: 1.0 where the bootstrap stops."""
    keep = gamma * (1.0 - ends.float())
    y1, y2 = (signal + keep * next_q1).detach(), (signal + keep * next_q2).detach()
    return 0.5 * ((q1 - y1).pow(2).mean() + (q2 - y2).pow(2).mean())


def fitted_heads(variants: Sequence[str], num_heads: int) -> tuple[list[int], list[int]]:
    """The heads whose Q̂^r and whose Q̂^c the critic ``variants`` (among ``FQE_VARIANTS``) read, ``(reward, cost)``:
    every head's Q̂^r for "fqe-reward" and "fqe-both", every head's Q̂^c for "fqe-both", the cost head's alone for
    "fqe-fallback"."""
    unknown = [v for v in variants if v not in FQE_VARIANTS]
    if unknown:
        raise ValueError(f"critic must be one of {FQE_VARIANTS}, got {unknown}")
    every = set(range(num_heads))
    reward = every if {"fqe-reward", "fqe-both"} & set(variants) else set()
    cost = every if "fqe-both" in variants else {num_heads - 1} if "fqe-fallback" in variants else set()
    return sorted(reward), sorted(cost)


class FQECritics(nn.Module):
    """Per-head FQE critics for the critic ``variants`` they are fitted for: ``reward[str(k)]`` holds Q̂^r_k (raw
    reward units) and ``cost[str(k)]`` Q̂^c_k (cost units, trained on +c), for the heads those variants read
    (``fitted_heads``). Which of them ``replace`` reads is one variant's (``variant``); a fit reads them as the
    first of ``variants``."""

    def __init__(self, critic_obs_dim: int, act_dim: int, hidden: list[int], num_heads: int,
                 variants: Sequence[str]) -> None:
        super().__init__()
        self.num_heads = num_heads
        reward_heads, cost_heads = fitted_heads(variants, num_heads)
        self.reward = nn.ModuleDict({str(k): TwinQ(critic_obs_dim, act_dim, hidden) for k in reward_heads})
        self.cost = nn.ModuleDict({str(k): TwinQ(critic_obs_dim, act_dim, hidden) for k in cost_heads})
        self.critic = variants[0]  # the variant ``replace`` reads

    def variant(self, critic: str) -> FQECritics:
        """The same fitted critics read as the variant ``critic`` (one of ``FQE_VARIANTS``, among those fitted for):
        a view that shares the networks."""
        reward_heads, cost_heads = fitted_heads([critic], self.num_heads)
        if not (set(map(str, reward_heads)) <= self.reward.keys() and set(map(str, cost_heads)) <= self.cost.keys()):
            raise ValueError(f"critic {critic!r} reads FQE critics this fit left out: fit it with {critic!r} among "
                             "the variants")
        view = copy.copy(self)
        view.critic = critic
        return view

    def replace(self, critic_obs: torch.Tensor, head_actions: torch.Tensor, q_reward: torch.Tensor,
                q_cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The switching rule's ``(Q^r, Q^c)``, each ``(B, K)``, with the fitted values the variant reads in place
        of the offline ones: Q̂^r_k(s, π_k(s)) as the min twin ("fqe-reward", "fqe-both"); for head k, Q̂^c_j(s,
        π_k(s)) as the max twin (as for the offline critics), with j = k for "fqe-both" and j = K−1 for
        "fqe-fallback"."""
        if self.critic != "fqe-fallback":
            q_reward = torch.stack([torch.min(*self.reward[str(k)](critic_obs, head_actions[:, k]))
                                    for k in range(self.num_heads)], dim=1)
        if self.critic != "fqe-reward":
            readers = [self.num_heads - 1] * self.num_heads if self.critic == "fqe-fallback" else range(self.num_heads)
            q_cost = torch.stack([torch.max(*self.cost[str(j)](critic_obs, head_actions[:, k]))
                                  for k, j in enumerate(readers)], dim=1)
        return q_reward, q_cost


@torch.no_grad()
def head_actions(actor: Actor, obs: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Every head's action at every row of ``obs`` (at step ``step``), ``(N, K, A)``, in chunks (the actor is
    fixed during FQE)."""
    return torch.cat([actor(obs[i:i + ACTION_CHUNK], step[i:i + ACTION_CHUNK])
                      for i in range(0, obs.shape[0], ACTION_CHUNK)])


def fit_fqe(actor: Actor, critic_input: CriticInput, dataset: TransitionDataset, *, hidden: list[int],
            gamma: float, cost_gamma: float, time_limit: str, variants: Sequence[str], settings: FQESettings,
            progress: bool = True) -> FQECritics:
    """Fits the Q̂^r_k and Q̂^c_k that the critic ``variants`` read (``fitted_heads``) for the heads of ``actor`` on
    ``dataset``, read as the first of them.

    ``critic_input(obs, step)`` builds the critics' state input (with ``time_limit="time_aware"`` it appends the
    remaining time); ``time_limit`` decides where the bootstrap stops (``rllib_caps.core.time_limit``), as for
    the offline critics; Q̂^c is discounted by ``cost_gamma``, as the module's Q^c is. Rewards are not scaled
    (only Q^r's order across heads matters to the switching rule); costs are in the env's units, as the threshold
    is.
    """
    settings = settings.limited()
    tensors = dataset.tensors
    next_actions = head_actions(actor, tensors[NEXT_OBS].float(), tensors[T] + 1)
    num_heads, act_dim = next_actions.shape[1], next_actions.shape[2]
    critic_obs_dim = critic_input(tensors[OBS][:1].float(), tensors[T][:1]).shape[-1]
    critics = FQECritics(critic_obs_dim, act_dim, hidden, num_heads, variants).to(next_actions.device)
    targets = FQECritics(critic_obs_dim, act_dim, hidden, num_heads, variants).to(next_actions.device)
    targets.load_state_dict(critics.state_dict())
    targets.requires_grad_(False)
    optimizer = adam(critics.parameters(), settings.lr)
    generator = torch.Generator(device=next_actions.device).manual_seed(settings.seed)
    sides = [(critics.reward, targets.reward, REWARDS, gamma), (critics.cost, targets.cost, COSTS, cost_gamma)]
    for _ in tqdm(range(settings.steps), desc="FQE", unit="step", disable=not progress, mininterval=1.0):
        idx = torch.randint(len(dataset), (settings.batch_size,), generator=generator, device=next_actions.device)
        batch = {name: t[idx] for name, t in tensors.items()}
        x = critic_input(batch[OBS].float(), batch[T])
        x_next = critic_input(batch[NEXT_OBS].float(), batch[T] + 1)
        ends = episode_ends(batch, time_limit)
        loss = torch.zeros((), device=x.device)
        for online, target, column, discount in sides:
            for head, critic in online.items():
                with torch.no_grad():
                    next_q1, next_q2 = target[head](x_next, next_actions[idx, int(head)])
                q1, q2 = critic(x, batch[ACTIONS])
                loss = loss + fqe_loss(q1, q2, next_q1, next_q2, batch[column].float(), ends, discount)
        step_with_targets(optimizer, loss, critics, targets, settings.tau)
    if not math.isfinite(loss.item()):
        raise FloatingPointError(f"FQE diverged (loss {loss.item()}); lower the learning rate or tau")
    return critics.eval()


def fit_module_fqe(module: nn.Module, dataset: TransitionDataset, variants: Sequence[str], settings: FQESettings,
                   progress: bool = True) -> FQECritics:
    """FQE fitted for a CAPS module's heads with its hidden sizes, discounts and time-limit handling: the critics
    that the ``variants`` (among ``FQE_VARIANTS``) read, read as the first of them (``FQECritics.variant`` reads
    them as another)."""
    cfg = module.model_config
    fitted_heads(variants, cfg["num_heads"])  # refuses an unknown variant before any work
    device = next(module.parameters()).device
    dataset = TransitionDataset({k: v.to(device) for k, v in dataset.tensors.items()})
    return fit_fqe(module.head_means, module.critic_input, dataset, hidden=list(cfg["hidden"]),
                   gamma=module.gamma, cost_gamma=module.cost_gamma, time_limit=cfg.get("time_limit", "bootstrap"),
                   variants=variants, settings=settings, progress=progress)


def evaluate_critics(policy: Any, dataset: TransitionDataset, task: TaskSpec, thresholds: Sequence[float],
                     episodes: int, critics: Sequence[str], settings: FQESettings, *, seed: int = 0,
                     progress: bool = True) -> dict[str, dict[str, Any]]:
    """Critic variant -> the results schema of ``policy`` (a ``CAPSPolicy``) rolled out with that variant's
    critics. One FQE fit serves every FQE variant: it fits the critics they read (``fitted_heads``), and each
    variant reads the fit its way (``FQECritics.variant``). Every variant sees the same episode seeds."""
    unknown = [c for c in critics if c not in CRITICS]
    if unknown:
        raise ValueError(f"critics must be among {CRITICS}, got {unknown}")
    fitted = None
    if fqe := [c for c in critics if c != "offline"]:
        fitted = fit_module_fqe(policy.module, dataset, fqe, settings, progress=progress)
    results = {}
    for critic in critics:
        policy.critics = None if critic == "offline" else fitted.variant(critic)
        results[critic] = evaluate_policy(policy, task, thresholds, episodes, seed=seed, progress=progress)
    policy.critics = None
    return results
