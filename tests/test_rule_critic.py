"""The switching rule's refit cost critic (``rllib_caps.algorithms.caps.rule_critic``): the fitted Q^c against the
exact expectile fixed point of a small finite CMDP, and the refit of a module's Q^c."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cmdp import random_cmdp
from test_caps_module import ACT, OBS, make_module
from test_fqe import cmdp_dataset

from rllib_caps.algorithms.caps.critic_variants import FQESettings
from rllib_caps.algorithms.caps.rule_critic import (
    fit_cost_critic,
    fit_rule_cost_critics,
    install_rule_cost_critic,
    read_members,
    refit_rule_cost_critic,
)
from rllib_caps.core.time_limit import remaining_time
from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import ACTIONS, COSTS, DTYPES, EPS_ID, NEXT_OBS, REWARDS, TERMINATEDS, TRUNCATEDS, T
from rllib_caps.data.schema import OBS as OBS_COLUMN


def cost_expectile(values: np.ndarray, expectile: float, iterations: int = 200) -> np.ndarray:
    """The V^c that IQL's cost loss fixes over equally likely actions, per row of ``values`` (..., A): the v where
    ``Σ_a w_a (v − Q_a) = 0`` with ``w_a = τ`` for ``Q_a < v`` and ``1 − τ`` otherwise (iteratively reweighted)."""
    v = values.mean(-1)
    for _ in range(iterations):
        w = np.where(values < v[..., None], expectile, 1.0 - expectile)
        v = (w * values).sum(-1) / w.sum(-1)
    return v


def exact_expectile_q(transitions: np.ndarray, cost: np.ndarray, horizon: int, expectile: float) -> np.ndarray:
    """Q^c_t(s, a) = c(s, a) + Σ_{s'} P(s, a, s') V_{t+1}(s'), V_t = ``cost_expectile`` of Q_t over the actions,
    V_T = 0 (no discount; the episodes end at the time-out): (T, S, A)."""
    q = np.zeros((horizon, *cost.shape))
    v_next = np.zeros(cost.shape[0])
    for t in range(horizon - 1, -1, -1):
        q[t] = cost + transitions @ v_next
        v_next = cost_expectile(q[t], expectile)
    return q


@pytest.mark.slow  # ~30 s of pure-torch IQL fits on a loaded 2-core machine
def test_the_fit_recovers_the_exact_expectile_q_on_a_finite_cmdp() -> None:
    rng = np.random.default_rng(5)
    m = random_cmdp(rng, n_states=5, n_actions=3, horizon=4, stochastic=True, state_cost=False, max_cost=3)
    data = cmdp_dataset(m, np.zeros((m.n_states, m.n_actions)), episodes=3000, rng=rng)  # uniform behaviour

    def critic_input(obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        return torch.cat([obs, remaining_time(step, m.horizon)], dim=-1)

    t, s, a = (g.ravel() for g in np.meshgrid(np.arange(m.horizon), np.arange(m.n_states), np.arange(m.n_actions),
                                              indexing="ij"))
    x, actions = critic_input(torch.eye(m.n_states)[s], torch.from_numpy(t)), torch.eye(m.n_actions)[a]
    truths = {tau: exact_expectile_q(m.transitions, m.step_cost, m.horizon, tau)[t, s, a] for tau in (0.1, 0.9)}
    spread = max(np.ptp(truth) for truth in truths.values())
    assert np.abs(truths[0.1] - truths[0.9]).max() > 0.3 * spread  # the expectiles differ on this CMDP
    for tau, truth in truths.items():
        for maximize in (False, True):  # the paper's +c, the authors' −c: the same Q^c in cost units
            q = fit_cost_critic(critic_input, data, hidden=[64, 64], cost_gamma=1.0, time_limit="time_aware",
                                expectile=tau, maximize=maximize,
                                settings=FQESettings(steps=2000, batch_size=256, lr=1e-3, tau=0.05), progress=False)
            with torch.no_grad():
                q1, q2 = q(x, actions)
            sign = -1.0 if maximize else 1.0
            error = max(np.abs(sign * q1.numpy() - truth).max(), np.abs(sign * q2.numpy() - truth).max())
            assert error < 0.08 * spread, (tau, maximize, error / spread)


def random_dataset(rows: int, seed: int = 0) -> TransitionDataset:
    """Rows of random transitions in ``make_module``'s spaces, episodes of 10 steps cut by a time-out."""
    g = torch.Generator().manual_seed(seed)
    step = torch.arange(rows) % 10
    columns = {OBS_COLUMN: torch.randn(rows, OBS, generator=g), NEXT_OBS: torch.randn(rows, OBS, generator=g),
               ACTIONS: torch.rand(rows, ACT, generator=g) * 4 - 2, REWARDS: torch.rand(rows, generator=g),
               COSTS: (torch.rand(rows, generator=g) < 0.3).float(), TERMINATEDS: torch.zeros(rows, dtype=torch.bool),
               TRUNCATEDS: step == 9, EPS_ID: torch.arange(rows) // 10, T: step}
    return TransitionDataset({name: column.to(getattr(torch, np.dtype(DTYPES[name]).name))
                              for name, column in columns.items()})


def rule_cost(module, rows: int = 64) -> torch.Tensor:
    """The Q^c the module's switching rule reads at random states and actions."""
    g = torch.Generator().manual_seed(1)
    obs, actions = torch.randn(rows, OBS, generator=g), torch.rand(rows, ACT, generator=g) * 2 - 1
    with torch.no_grad():
        return module.cost_q(module.critic_input(obs, None), actions, torch.zeros(rows))


def test_refit_replaces_only_the_rule_cost_critic_and_its_shift() -> None:
    module = make_module(num_heads=2)
    module.set_cost_shift(3.0)
    before = {name: p.clone() for name, p in module.named_parameters() if not name.startswith("qc.")}
    old_cost = rule_cost(module)
    state = torch.random.get_rng_state()
    settings = FQESettings(steps=30, batch_size=32, seed=7)
    refit_rule_cost_critic(module, random_dataset(200), 0.1, settings, progress=False)
    assert torch.equal(torch.random.get_rng_state(), state)  # seeded from the settings, the global stream untouched
    after = dict(module.named_parameters())
    assert all(torch.equal(after[name], p) for name, p in before.items())  # the heads and Q^r are unchanged
    assert not torch.allclose(rule_cost(module), old_cost)
    assert module.cost_shift == 0.0  # the old critic's calibration does not hold for the new one
    again = make_module(num_heads=2)
    refit_rule_cost_critic(again, random_dataset(200), 0.1, settings, progress=False)
    assert torch.equal(rule_cost(module), rule_cost(again))  # deterministic
    # One member is the critic fit_cost_critic gives, read as it is: the rule reads its larger twin.
    single = fit_rule_cost_critics(make_module(num_heads=2), random_dataset(200), 0.1, settings, progress=False)
    bare = make_module(num_heads=2)
    bare.qc.load_state_dict(single[0].state_dict())
    assert torch.equal(rule_cost(bare), rule_cost(module))


@pytest.mark.parametrize("implementation", ["paper", "code"])  # critics on +c, and on −c (the authors' code)
def test_an_ensemble_is_read_by_its_largest_cost_or_its_mean(implementation: str) -> None:
    module = make_module(num_heads=2, implementation=implementation)
    members = fit_rule_cost_critics(module, random_dataset(200), 0.1, FQESettings(steps=30, batch_size=32, seed=3),
                                    members=3, progress=False)
    alone = []
    for member in members:
        install_rule_cost_critic(module, [member])
        alone.append(rule_cost(module))
    alone = torch.stack(alone)
    assert not torch.allclose(alone[0], alone[1])  # the members start from different seeds
    install_rule_cost_critic(module, members, "max")
    assert torch.allclose(rule_cost(module), alone.amax(0))  # the largest cost of any member's twins
    install_rule_cost_critic(module, members, "mean")
    mean = rule_cost(module)
    assert (mean <= alone.amax(0) + 1e-6).all() and (mean >= alone.amin(0) - 1e-6).all()
    refitted = fit_rule_cost_critics(module, random_dataset(50), 0.1, FQESettings(steps=1), progress=False)
    assert len(refitted) == 1  # a module whose Q^c is an ensemble can be refitted again


def test_read_members_is_in_cost_units_whatever_the_critics_sign() -> None:
    costs = torch.tensor([[1.0, 5.0], [3.0, 2.0]])  # two members, two states
    assert torch.equal(read_members(costs, 1.0, "max"), torch.tensor([3.0, 5.0]))
    assert torch.equal(read_members(-costs, -1.0, "max"), -torch.tensor([3.0, 5.0]))  # critics fitted on −c
    assert torch.equal(read_members(costs, 1.0, "mean"), torch.tensor([2.0, 3.5]))
    with pytest.raises(ValueError, match="one of \\('max', 'mean'\\), got 'median'"):
        read_members(costs, 1.0, "median")
    with pytest.raises(ValueError, match="at least 1 member, got 0"):
        fit_rule_cost_critics(make_module(num_heads=2), random_dataset(20), 0.1, FQESettings(steps=1), members=0)


def test_an_expectile_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match=r"expectile must be in \(0, 1\), got 1.0"):
        refit_rule_cost_critic(make_module(num_heads=2), random_dataset(20), 1.0, FQESettings(steps=1))
