"""The switching rule's cost critic refitted after training at an expectile of its own (docs/paper.md, "A cost
critic for the rule alone"). Pure torch: no Ray import.

IQL's critics never read the actor: V^c is an expectile of Q^c at the dataset's actions and Q^c regresses onto
``c + γ_c V^c(s')`` (Eq. 9), so a cost pair fitted after training at expectile τ is the pair that training beside
the heads at τ would give, while the heads keep the advantages of the trained τ_c. That separates the two uses of
V^c that one τ_c serves in training: the cost head's advantage weights (Eq. 8) and the rule's feasibility check.
A low τ makes V^c an upper expectile of the cost-to-go (the costlier continuations the data show after an action);
the calibration (``calibration``) then removes the level this adds on the dataset, so what changes is where Q^c
is high. Fitted several times from different seeds, the members are read as one critic (``CostCriticEnsemble``):
their largest cost, an upper confidence bound where the fits disagree (off the data, at the heads' own actions), or
their mean, the noise of one fit averaged out.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn
from tqdm import tqdm

from rllib_caps.algorithms.caps.critic_variants import (
    FQESettings,
    check_ensemble_reading,
    check_rule_cost_expectile,
    check_rule_cost_members,
)
from rllib_caps.algorithms.caps.fqe import CriticInput
from rllib_caps.algorithms.caps.shared_losses import cost_signal
from rllib_caps.core.losses import critic_pair_losses
from rllib_caps.core.nets import TwinQ, mlp
from rllib_caps.core.optim import adam, step_with_targets
from rllib_caps.core.time_limit import episode_ends
from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import ACTIONS, COSTS, NEXT_OBS, OBS, T


def fit_cost_critic(critic_input: CriticInput, dataset: TransitionDataset, *, hidden: list[int], cost_gamma: float,
                    time_limit: str, expectile: float, maximize: bool, settings: FQESettings,
                    progress: bool = True) -> TwinQ:
    """A twin Q^c fitted by IQL (``core.losses.critic_pair_losses``, with Polyak targets) on ``dataset`` at V^c
    expectile ``expectile``: trained on −c where ``maximize`` (the authors' code), else on +c; ``critic_input(obs,
    step)`` builds the critics' state input and ``time_limit`` decides where the bootstrap stops, as for the offline
    critics. The networks start from ``settings.seed``, and the global generator is left as it was."""
    check_rule_cost_expectile(expectile)
    settings = settings.limited()
    tensors = dataset.tensors
    device = tensors[OBS].device
    critic_obs_dim = critic_input(tensors[OBS][:1].float(), tensors[T][:1]).shape[-1]
    with torch.random.fork_rng(devices=[]):  # the CPU stream only: the nets start on the CPU, CUDA's is untouched
        torch.default_generator.manual_seed(settings.seed)
        q = TwinQ(critic_obs_dim, tensors[ACTIONS].shape[-1], hidden).to(device)
        value = mlp(critic_obs_dim, hidden, 1).to(device)
    target = copy.deepcopy(q).requires_grad_(False)
    optimizer = adam([*q.parameters(), *value.parameters()], settings.lr)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    for _ in tqdm(range(settings.steps), desc=f"Q^c at expectile {expectile:g}", unit="step",
                  disable=not progress, mininterval=1.0):
        idx = torch.randint(len(dataset), (settings.batch_size,), generator=generator, device=device)
        batch = {name: t[idx] for name, t in tensors.items()}
        x = critic_input(batch[OBS].float(), batch[T])
        actions = batch[ACTIONS].float()
        q1, q2 = q(x, actions)
        with torch.no_grad():
            q1_target, q2_target = target(x, actions)
            v_next = value(critic_input(batch[NEXT_OBS].float(), batch[T] + 1)).squeeze(-1)
        losses = critic_pair_losses(
            q1=q1, q2=q2, q1_target=q1_target, q2_target=q2_target, v=value(x).squeeze(-1), v_next=v_next,
            signal=cost_signal(batch[COSTS].float(), maximize), terminateds=episode_ends(batch, time_limit),
            gamma=cost_gamma, expectile=expectile, maximize=maximize)
        loss = losses.q_loss + losses.v_loss
        step_with_targets(optimizer, loss, q, target, settings.tau)
    if not math.isfinite(loss.item()):
        raise FloatingPointError(f"the rule's cost critic diverged (loss {loss.item()}); lower the learning rate")
    return q.eval()


def read_members(values: torch.Tensor, cost_sign: float, reading: str) -> torch.Tensor:
    """One critic's values from its members' ``values`` (members first, in the critics' sign: ``cost_sign`` −1
    where they are fitted on −c): ``"max"`` the largest cost, ``"mean"`` the mean."""
    if check_ensemble_reading(reading) == "mean":
        return values.mean(0)
    return cost_sign * (cost_sign * values).amax(0)


class CostCriticEnsemble(nn.Module):
    """Twin Q^c critics fitted apart, read as one twin pair (``read_members`` per twin): with ``"max"`` the rule's
    larger-twin Q^c becomes the largest cost of any member's twin."""

    def __init__(self, members: Sequence[nn.Module], cost_sign: float, reading: str) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.cost_sign, self.reading = cost_sign, check_ensemble_reading(reading)

    @property
    def fused(self) -> bool:
        """Whether the members are fused pairs (``core.nets.MLPPair``), as a refit of this module's Q^c asks."""
        return self.members[0].fused

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        twins = [torch.stack(values) for values in zip(*(member(obs, actions) for member in self.members),
                                                       strict=True)]
        return tuple(read_members(values, self.cost_sign, self.reading) for values in twins)


def fit_rule_cost_critics(module: nn.Module, dataset: TransitionDataset, expectile: float, settings: FQESettings,
                          members: int = 1, progress: bool = True) -> list[TwinQ]:
    """``members`` cost critics for ``module``'s switching rule (``fit_cost_critic`` with the module's hidden sizes,
    cost discount, critic input, time limit and cost sign), from seeds ``settings.seed``, ``settings.seed + 1``, …;
    each in the module's layout (fused where its Q^c is)."""
    check_rule_cost_members(members)
    cfg = module.model_config
    device = next(module.parameters()).device
    dataset = TransitionDataset({k: v.to(device) for k, v in dataset.tensors.items()})
    fitted = [fit_cost_critic(module.critic_input, dataset, hidden=list(cfg["hidden"]), cost_gamma=module.cost_gamma,
                              time_limit=cfg.get("time_limit", "bootstrap"), expectile=expectile,
                              maximize=module.cost_sign < 0, settings=replace(settings, seed=settings.seed + i),
                              progress=progress)
              for i in range(members)]
    return [q.fused_copy() if module.qc.fused else q for q in fitted]


def install_rule_cost_critic(module: nn.Module, members: Sequence[TwinQ], reading: str = "max") -> None:
    """Makes ``members`` (``fit_rule_cost_critics``), read by ``reading``, the Q^c that ``module``'s switching rule
    reads, and zeroes its Q^c shift: a calibration fitted for the old critic does not hold for the new one. The heads
    are unchanged."""
    module.qc = CostCriticEnsemble([copy.deepcopy(q) for q in members], module.cost_sign, reading)
    module.set_cost_shift(0.0)


def refit_rule_cost_critic(module: nn.Module, dataset: TransitionDataset, expectile: float, settings: FQESettings,
                           members: int = 1, reading: str = "max", progress: bool = True) -> None:
    """Replaces ``module``'s Q^c, which the switching rule reads, by ``members`` critics fitted at ``expectile``
    and read by ``reading`` (``fit_rule_cost_critics``, ``install_rule_cost_critic``)."""
    install_rule_cost_critic(module, fit_rule_cost_critics(module, dataset, expectile, settings, members, progress),
                             reading)
