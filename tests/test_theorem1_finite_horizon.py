"""Theorem 1 with a time limit and a discounted cost critic (γ < 1), checked exactly on random finite CMDPs.

Setting: the CMDPs of ``tests/cmdp.py`` cut after T steps (no terminal cost: an episode costs
``c_0 + … + c_{T−1}``) and a critic trained with discount γ, here exact: the finite-horizon
``Q^γ_t(s, a) = c(s, a) + γ E V^γ_{t+1}(s')``, ``V^γ_T = 0``. CAPS acts on ``(t, s, c_<t)`` with the
production ``remaining_budget_threshold`` and ``select_heads``; with ``B = max(κ − c_<t, 0)`` and
``n = T − t`` the threshold is ``thr_t = B g(n)``, ``g(n) = (1 − γ^n)/((1 − γ) n)``: the discounted value of
spending B at the uniform rate B/n.

What holds (each checked below, exactly up to float round-off):

- the conversion is exact at a constant per-step cost rate (``Q^γ < thr_t`` iff the undiscounted cost
  ``< B``), conservative for non-increasing cost profiles and optimistic for non-decreasing ones;
- κ-admissibility in discounted units: ``Q^γ_t(s, π) <= max{V^γ_t(s), thr_t}`` at every ``(t, s, c_<t)``;
- the discounted Theorem 1 in deterministic CMDPs, for trajectories that spend on rate (every step cost
  ``x <= B/n`` or ``x >= B``): ``V^{π,γ}_t(s; c_<t) <= max{V^γ_t(s), thr_t}``. Off rate it can fail, because
  ``thr_{t+1}(c_<t + x) − (thr_t − x)/γ = (1 − γ g(n − 1))/γ · (x − B/n)``;
- γ → 1 recovers Theorem 1 (same feasible heads as the γ = 1 rule, same undiscounted bound).

What does not: Theorem 1's undiscounted bound ``max{V^c_t(s), κ − c_<t}`` at γ < 1, even in deterministic
CMDPs: discounting underweights late costs, so a back-loaded head passes the check (explicit instance).

An infinite-horizon critic ``Q^∞ >= Q^γ_t`` is more conservative: fewer heads pass the same threshold, and
at a constant rate it needs ``1/(1 − γ^{T−t})`` times the budget (1.15 at t = 0 for T = 200, γ = 0.99).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from cmdp import CMDP, cost_optimal_policy, optimal_cost, policy_cost, random_cmdp, reachable, twin_spread

from rllib_caps.algorithms.caps.calibration import calibration_shift
from rllib_caps.algorithms.caps.switching import HEAD_SELECTIONS, select_heads
from rllib_caps.core.budget import remaining_budget_threshold

KAPPAS = (0.0, 1.0, 2.5, 4.0, 6.0, 9.0)
GAMMAS = (0.9, 0.99)
TOL = 1e-9


# ------------------------------------------------------------------------------------------------ helpers
def time_limited(m: CMDP) -> CMDP:
    """The same CMDP cut after T steps: no cost in the state reached at T."""
    return dataclasses.replace(m, terminal_cost=np.zeros_like(m.terminal_cost))


def discounted_cost(m: CMDP, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact finite-horizon discounted cost-optimal ``Q^γ`` (T, S, A) and ``V^γ`` (T + 1, S), ``V^γ_T = 0``."""
    q = np.zeros((m.horizon, m.n_states, m.n_actions))
    v = np.zeros((m.horizon + 1, m.n_states))
    for t in reversed(range(m.horizon)):
        q[t] = m.step_cost + gamma * (m.transitions @ v[t + 1])
        v[t] = q[t].min(axis=1)
    return q, v


def infinite_horizon_cost(m: CMDP, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Discounted cost-optimal ``Q^∞`` (S, A) and ``V^∞`` (S,) of the stationary CMDP: the time-limited chain
    continued beyond T (value iteration from 0, the same float operations as ``discounted_cost``, so every
    iterate is ``>= Q^γ_t`` bit for bit) until it stops changing."""
    v = np.zeros(m.n_states)
    for _ in range(100_000):
        q = m.step_cost + gamma * (m.transitions @ v)
        if np.array_equal(q.min(axis=1), v):
            return q, v
        v = q.min(axis=1)
    raise AssertionError("value iteration did not reach a fixed point")


def threshold(kappa: float, spent: np.ndarray, t: int, horizon: int, gamma: float) -> np.ndarray:
    """Independent numpy copy of the conversion, ``max(κ − c, 0) (1 − γ^n)/((1 − γ) n)``."""
    n = horizon - t
    return np.maximum(kappa - spent, 0.0) * (1.0 - gamma**n) / ((1.0 - gamma) * n)


def production_threshold(kappa: float, spent, t, horizon: int, gamma: float) -> np.ndarray:
    spent = torch.as_tensor(np.asarray(spent, dtype=np.float64))
    step = torch.as_tensor(np.broadcast_to(np.asarray(t), spent.shape).copy())
    return remaining_budget_threshold(kappa, spent, step, horizon, gamma).numpy()


@dataclasses.dataclass(frozen=True)
class Instance:
    """A time-limited random CMDP, its exact ``Q^γ``/``V^γ``, K heads (π^c among them) and a Q^r."""

    m: CMDP
    gamma: float
    q: np.ndarray  # Q^γ_t(s, a), (T, S, A)
    v: np.ndarray  # V^γ_t(s), (T + 1, S)
    heads: np.ndarray  # head k's action at (t, s), (K, T, S)
    q_reward: np.ndarray  # an arbitrary Q^r_t(s, a), (T, S, A)


def make_instances(seed: int, count: int, gamma: float, *, stochastic: bool) -> Iterator[Instance]:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        m = time_limited(random_cmdp(rng, n_states=int(rng.integers(4, 7)), n_actions=int(rng.integers(2, 5)),
                                     horizon=int(rng.integers(4, 9)), stochastic=stochastic,
                                     state_cost=bool(rng.integers(2))))
        q, v = discounted_cost(m, gamma)
        k = int(rng.integers(2, 5))
        heads = rng.integers(0, m.n_actions, size=(k, m.horizon, m.n_states))
        heads[rng.integers(k)] = cost_optimal_policy(q)  # the discounted π^c is one of the heads
        yield Instance(m, gamma, q, v, heads, rng.normal(size=q.shape) * 3.0)


def grid(m: CMDP) -> tuple[np.ndarray, np.ndarray]:
    """Flat (state, c_<t) pairs covering the augmented grid, state-major like ``policy_cost``."""
    states, spent = np.meshgrid(np.arange(m.n_states), np.arange(m.spent_grid), indexing="ij")
    return states.ravel(), spent.ravel()


def caps_decisions(inst: Instance, kappa: float, q_critic: np.ndarray | None = None, selection: str = "q_reward"):
    """The production rule on the whole grid: actions (T, S, G), head Q^c (T, S, G, K), thresholds (T, S, G).

    ``q_critic`` is the cost critic the rule sees, (T, S, A) or stationary (S, A); ``Q^γ`` by default.
    """
    m = inst.m
    q_critic = inst.q if q_critic is None else np.broadcast_to(q_critic, inst.q.shape)
    states, spent = grid(m)
    shape = (m.horizon, m.n_states, m.spent_grid)
    actions, thresholds = np.zeros(shape, dtype=np.int64), np.zeros(shape)
    head_q = np.zeros((*shape, len(inst.heads)))
    for t in range(m.horizon):
        head_actions = inst.heads[:, t, states].T  # (N, K)
        q_cost = torch.from_numpy(q_critic[t][states[:, None], head_actions])
        q_rew = torch.from_numpy(inst.q_reward[t][states[:, None], head_actions])
        thr = torch.from_numpy(production_threshold(kappa, spent, t, m.horizon, inst.gamma))
        chosen = select_heads(q_rew, q_cost, thr, selection, twin_spread(q_rew)).numpy()
        actions[t] = head_actions[np.arange(len(states)), chosen].reshape(shape[1:])
        thresholds[t] = thr.numpy().reshape(shape[1:])
        head_q[t] = q_cost.numpy().reshape(*shape[1:], -1)
    return actions, head_q, thresholds


def as_policy(actions: np.ndarray):
    return lambda t, states, spent: actions[t][states, spent]


def discounted_policy_cost(m: CMDP, actions: np.ndarray, gamma: float) -> np.ndarray:
    """Exact discounted ``V^{π,γ}_t(s; c_<t)`` (T + 1, S, G) of a switching policy given as an action table."""
    values = np.zeros((m.horizon + 1, m.n_states, m.spent_grid))
    states, spent = grid(m)
    for t in reversed(range(m.horizon)):
        a = actions[t][states, spent]
        step = m.step_cost[states, a]
        future = m.transitions[states, a] @ values[t + 1]
        values[t] = (step + gamma * future[np.arange(len(states)), np.minimum(spent + step, m.spent_grid - 1)]
                     ).reshape(m.n_states, m.spent_grid)
    return values


def on_rate(m: CMDP, actions: np.ndarray, kappa: float) -> np.ndarray:
    """Deterministic CMDPs: (T + 1, S, G) mask of the points whose whole trajectory under π spends on rate,
    i.e. every step cost x satisfies ``x (T − t) <= B`` or ``x >= B`` (B = max(κ − c_<t, 0))."""
    flag = np.ones((m.horizon + 1, m.n_states, m.spent_grid), dtype=bool)
    states, spent = grid(m)
    for t in reversed(range(m.horizon)):
        a = actions[t][states, spent]
        x = m.step_cost[states, a]
        budget = np.maximum(kappa - spent, 0.0)
        ok = (x * (m.horizon - t) <= budget) | (x >= budget)
        successor = m.transitions[states, a].argmax(axis=1)
        flag[t] = (ok & flag[t + 1][successor, np.minimum(spent + x, m.spent_grid - 1)]).reshape(flag.shape[1:])
    return flag


# --------------------------------------------------------------------------------- 1. the conversion alone
@pytest.mark.parametrize(("horizon", "t", "factor"), [(200, 0, 1.15), (200, 150, 2.53), (200, 190, 10.46)])
def test_conversion_is_exact_at_constant_rate_and_infinite_critic_factor(horizon: int, t: int, factor: float) -> None:
    """A budget that exactly covers the remaining steps at rate c maps onto the discounted finite-horizon
    cost-to-go ``Σ_{i<T−t} γ^i c``; the infinite-horizon ``c/(1 − γ)`` exceeds it by ``1/(1 − γ^{T−t})``."""
    gamma, n = 0.99, horizon - t
    rates = np.array([0.25, 0.7, 1.0, 3.0])
    spent = np.array([0.0, 5.0, 0.7 * t, 17.5])
    finite = np.array([sum(gamma**i * c for i in range(n)) for c in rates])
    thr = production_threshold(rates * n + spent, spent, t, horizon, gamma)
    np.testing.assert_allclose(thr, finite, rtol=1e-12)
    ratio = rates / (1.0 - gamma) / thr
    np.testing.assert_allclose(ratio, 1.0 / (1.0 - gamma**n), rtol=1e-12)
    assert np.all(np.round(ratio, 2) == factor)


def test_conversion_direction_for_monotone_cost_profiles() -> None:
    """With a budget B equal to a profile's undiscounted cost, ``Σ γ^i c_i`` is ``>= thr_t`` (the head is
    rejected: conservative) for non-increasing profiles, ``<= thr_t`` (accepted: optimistic) for
    non-decreasing ones, ``== thr_t`` for constant ones; strict for non-constant profiles (Chebyshev)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        horizon, gamma = int(rng.integers(2, 60)), float(rng.choice([0.5, 0.9, 0.99]))
        t = int(rng.integers(0, horizon - 1))
        n, spent = horizon - t, float(rng.integers(0, 20))
        profile = np.sort(rng.integers(0, 5, size=n).astype(np.float64))
        if profile[0] == profile[-1]:
            profile[-1] += 1.0
        weights = gamma ** np.arange(n)
        thr = production_threshold(spent + profile.sum(), [spent], t, horizon, gamma)[0]
        assert weights @ profile[::-1] > thr * (1 + 1e-12)  # front-loaded
        assert weights @ profile < thr * (1 - 1e-12)  # back-loaded
        flat = production_threshold(spent + n * profile[0], [spent], t, horizon, gamma)[0]
        assert weights.sum() * profile[0] == pytest.approx(flat, rel=1e-12)


def test_threshold_recursion_and_gamma_one_limit() -> None:
    """``thr_{t+1}(c + x) − (thr_t(c) − x)/γ = (1 − γ g(n − 1))/γ · (x − B/n)`` for ``0 <= x <= B``: the next
    threshold is within the discount-consistent budget iff the step spends at most the uniform rate. At γ = 1
    the conversion is ``max(κ − c_<t, 0)``, and it tends to it as γ → 1."""
    rng = np.random.default_rng(1)
    for gamma in (0.5, 0.9, 0.99):
        horizon = 30
        t = rng.integers(0, horizon - 1, size=500)
        n = horizon - t
        spent = rng.uniform(0, 10, size=500)
        kappa = 12.0
        budget = kappa - spent
        x = rng.uniform(0, 1, size=500) * budget
        thr_now = production_threshold(kappa, spent, t, horizon, gamma)
        thr_next = production_threshold(kappa, spent + x, t + 1, horizon, gamma)
        g_next = (1 - gamma ** (n - 1)) / ((1 - gamma) * (n - 1))
        expected = (1 - gamma * g_next) / gamma * (x - budget / n)
        np.testing.assert_allclose(thr_next - (thr_now - x) / gamma, expected, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(thr_now, threshold(kappa, spent, t, horizon, gamma), rtol=1e-12)
    spent = np.array([0.0, 1.5, 4.0, 7.0, 11.0])
    t = np.array([0, 3, 9, 20, 29])
    np.testing.assert_array_equal(production_threshold(6.0, spent, t, 30, 1.0), np.maximum(6.0 - spent, 0.0))
    np.testing.assert_allclose(production_threshold(6.0, spent, t, 30, 1.0 - 1e-7), np.maximum(6.0 - spent, 0.0),
                               rtol=1e-5)


# ------------------------------------------------------------------- 2. finite-horizon Q^γ in random CMDPs
@pytest.mark.parametrize("selection", HEAD_SELECTIONS)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_discounted_kappa_admissibility(stochastic: bool, gamma: float, selection: str) -> None:
    """At every reachable ``(t, s, c_<t)``: the threshold is the conversion; the rule falls back iff
    ``V^γ_t(s) >= thr_t`` (π^c is a head) and then takes ``Q^γ = V^γ_t(s)``, otherwise ``Q^γ < thr_t``; hence
    ``Q^γ_t(s, π) <= max{V^γ_t(s), thr_t}``, with either ranking of the feasible heads."""
    fallback_hits = feasible_hits = 0
    for inst in make_instances(seed=10, count=25, gamma=gamma, stochastic=stochastic):
        m = inst.m
        for kappa in KAPPAS:
            actions, head_q, thr = caps_decisions(inst, kappa, selection=selection)
            for t in range(m.horizon):
                ok = reachable(m, t)
                np.testing.assert_allclose(thr[t], threshold(kappa, np.arange(m.spent_grid), t, m.horizon, gamma)
                                           [None, :].repeat(m.n_states, 0), rtol=1e-12)
                v = np.broadcast_to(inst.v[t][:, None], thr[t].shape)
                q_taken = inst.q[t][np.arange(m.n_states)[:, None], actions[t]]
                fallback = (v >= thr[t])[:, ok]
                assert np.array_equal(fallback, ~(head_q[t] < thr[t][..., None]).any(-1)[:, ok])
                np.testing.assert_array_equal(q_taken[:, ok][fallback], v[:, ok][fallback])
                assert np.all(q_taken[:, ok][~fallback] < thr[t][:, ok][~fallback])
                assert np.all(q_taken[:, ok] <= np.maximum(v, thr[t])[:, ok])
                fallback_hits += int(fallback.sum())
                feasible_hits += int((~fallback).sum())
    assert fallback_hits > 0 and feasible_hits > 0


@pytest.mark.parametrize("gamma", GAMMAS)
def test_discounted_bound_on_rate_in_deterministic_cmdps(gamma: float) -> None:
    """Deterministic CMDPs: ``V^{π,γ}_t(s; c_<t) <= max{V^γ_t(s), thr_t}`` at every reachable point whose
    trajectory spends on rate (see the module docstring); off rate the bound is violated somewhere."""
    on_hits = off_violations = 0
    for inst in make_instances(seed=11, count=40, gamma=gamma, stochastic=False):
        m = inst.m
        for kappa in KAPPAS:
            actions, _, thr = caps_decisions(inst, kappa)
            values = discounted_policy_cost(m, actions, gamma)
            flag = on_rate(m, actions, kappa)
            for t in range(m.horizon):
                ok = reachable(m, t)
                excess = (values[t] - np.maximum(inst.v[t][:, None], thr[t]))[:, ok]
                on = flag[t][:, ok]
                assert np.all(excess[on] <= TOL)
                on_hits += int(on.sum())
                off_violations += int(np.sum(excess[~on] > 1e-6))
    assert on_hits > 0
    assert off_violations > 0  # the on-rate hypothesis is needed


def test_gamma_to_one_recovers_theorem1() -> None:
    """γ = 1 − 1e-6, deterministic, κ off the integer grid: every head is feasible exactly when it is under
    the γ = 1 rule (``Q^c < κ − c_<t``), and Theorem 1's bound ``max{V^c_t(s), κ − c_<t}`` holds exactly."""
    gamma = 1.0 - 1e-6
    for inst in make_instances(seed=12, count=40, gamma=gamma, stochastic=False):
        m = inst.m
        q1, v1 = optimal_cost(m)  # undiscounted, time-limited
        for kappa in (0.3, 1.7, 2.3, 4.7, 6.1):
            actions, head_q, thr = caps_decisions(inst, kappa)
            _, head_q1, _ = caps_decisions(dataclasses.replace(inst, gamma=1.0), kappa, q_critic=q1)
            values = policy_cost(m, as_policy(actions))
            spent = np.arange(m.spent_grid)
            for t in range(m.horizon + 1):
                ok = reachable(m, t)
                if t < m.horizon:
                    budget = (kappa - spent)[None, :, None]
                    assert np.array_equal((head_q[t] < thr[t][..., None])[:, ok], (head_q1[t] < budget)[:, ok])
                bound = np.maximum(v1[t][:, None], kappa - spent[None, :])
                assert np.all((values[t] - bound)[:, ok] <= TOL)


@pytest.mark.parametrize("gamma", [0.9, 1.0])
def test_undiscounted_bound_fails_for_back_loaded_costs(gamma: float) -> None:
    """A deterministic counterexample to Theorem 1's undiscounted bound at γ < 1. From s0 one action stays at
    zero cost, the other enters a chain costing 0, 0, 0, 2, 2 on the next steps (T = 6, κ = 3.5). At γ = 0.9
    its ``Q^γ = 2 (0.9^4 + 0.9^5) = 2.49 < thr_0 = 3.5 g(6) = 2.73``, so CAPS takes it and spends 4 >
    ``max{V^c_0(s0), κ} = 3.5``; at γ = 1 the same rule rejects it (Q^c = 4) and spends 0."""
    n_states, horizon, kappa = 8, 6, 3.5
    transitions = np.zeros((n_states, 2, n_states))
    transitions[0, 0, 1] = transitions[0, 1, 2] = 1.0  # 1: zero-cost absorbing; 2 … 6: the chain
    transitions[1, :, 1] = transitions[7, :, 7] = 1.0
    for s in range(2, 7):
        transitions[s, :, s + 1] = 1.0
    step_cost = np.zeros((n_states, 2), dtype=np.int64)
    step_cost[5] = step_cost[6] = 2
    m = CMDP(transitions, step_cost, np.zeros(n_states, dtype=np.int64), horizon, max_cost=2)
    q, v = discounted_cost(m, gamma)
    heads = np.stack([np.ones((horizon, n_states), dtype=np.int64), cost_optimal_policy(q)])
    q_reward = np.zeros_like(q)
    q_reward[..., 1] = 1.0  # the reward head (head 0) takes the chain
    actions, _, _ = caps_decisions(Instance(m, gamma, q, v, heads, q_reward), kappa)
    spent = policy_cost(m, as_policy(actions))[0, 0, 0]
    v_undiscounted = optimal_cost(m)[1][0, 0]
    assert v_undiscounted == 0.0
    if gamma < 1.0:
        assert q[0, 0, 1] == pytest.approx(2.0 * (0.9**4 + 0.9**5), rel=1e-12)
        assert spent == 4.0 > max(v_undiscounted, kappa)
    else:
        assert spent == 0.0


# ------------------------------------------------------------- 3. an infinite-horizon critic is stricter
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_infinite_horizon_critic_is_more_conservative(stochastic: bool, gamma: float) -> None:
    """``Q^∞ >= Q^γ_t`` everywhere, strictly at ``(T − 1, s, a)`` whenever a successor has ``V^∞ > 0``
    (there ``Q^∞ − Q^γ_{T−1} = γ E V^∞``). So at every reachable ``(t, s, c_<t)`` the heads feasible under
    ``Q^∞`` are a subset of those feasible under ``Q^γ_t`` (the ``Q^∞`` rule falls back whenever the
    ``Q^γ`` rule does), a strict subset at some points."""
    strict_q = strict_subset = fallback_fin = fallback_inf = 0
    for inst in make_instances(seed=13, count=25, gamma=gamma, stochastic=stochastic):
        m = inst.m
        q_inf, v_inf = infinite_horizon_cost(m, gamma)
        assert np.all(q_inf[None] >= inst.q)
        tail = gamma * (m.transitions @ v_inf)
        np.testing.assert_allclose(q_inf - inst.q[-1], tail, atol=1e-9)
        assert np.all((q_inf - inst.q[-1])[tail > 1e-6] > 1e-6)
        strict_q += int(np.sum(tail > 1e-6))
        for kappa in KAPPAS:
            _, head_q, thr = caps_decisions(inst, kappa)
            _, head_q_inf, thr_inf = caps_decisions(inst, kappa, q_critic=q_inf)
            np.testing.assert_array_equal(thr, thr_inf)
            for t in range(m.horizon):
                ok = reachable(m, t)
                feasible = (head_q[t] < thr[t][..., None])[:, ok]
                feasible_inf = (head_q_inf[t] < thr[t][..., None])[:, ok]
                assert not np.any(feasible_inf & ~feasible)
                strict_subset += int(np.sum((feasible & ~feasible_inf).any(-1)))
                fallback_fin += int(np.sum(~feasible.any(-1)))
                fallback_inf += int(np.sum(~feasible_inf.any(-1)))
    assert strict_q > 0 and strict_subset > 0
    assert fallback_inf > fallback_fin


@pytest.mark.parametrize(("t", "factor"), [(0, 1.15), (150, 2.53), (190, 10.46)])
def test_infinite_critic_needs_the_factor_more_budget_at_constant_rate(t: int, factor: float) -> None:
    """A stochastic CMDP with cost 1 at every step, T = 200, γ = 0.99: ``Q^∞ / Q^γ_t = 1/(1 − γ^{T−t})``.
    With the budget ``κ − c_<t`` 1% above the remaining steps every head passes under ``Q^γ_t`` and none
    under ``Q^∞``; ``Q^∞`` needs the factor more budget."""
    gamma, horizon = 0.99, 200
    m = random_cmdp(np.random.default_rng(4), n_states=5, n_actions=3, horizon=horizon, stochastic=True)
    m = time_limited(dataclasses.replace(m, step_cost=np.ones_like(m.step_cost)))
    q, _ = discounted_cost(m, gamma)
    q_inf, _ = infinite_horizon_cost(m, gamma)
    ratio = q_inf / q[t]
    np.testing.assert_allclose(ratio, 1.0 / (1.0 - gamma ** (horizon - t)), rtol=1e-10)
    assert np.all(np.round(ratio, 2) == factor)
    n, spent = horizon - t, float(t)
    for scale, finite_ok, infinite_ok in ((1.01, True, False), (1.01 * factor, True, True)):
        thr = production_threshold(spent + scale * n, [spent], t, horizon, gamma)[0]
        assert np.all(q[t] < thr) == finite_ok
        assert np.all(q_inf < thr) == infinite_ok


# ----------------------------- 4. the calibrated critic (caps/calibration.py, docs/paper.md "Calibrated Q^c")
def behaviour_bias(inst: Instance, behaviour: np.ndarray, q_critic: np.ndarray) -> float:
    """``calibrate``'s bias on an unlimited dataset of a behaviour policy β's episodes (uniform start states):
    the mean over β's occupancy of ``q_critic_t(s, β_t(s)) − Q^{β,γ}_t(s, β_t(s))``, the realised discounted
    cost-to-go in expectation. ``behaviour``: β's action at (t, s), (T, S)."""
    m, states = inst.m, np.arange(inst.m.n_states)
    q_beta, v_beta = np.zeros_like(inst.q), np.zeros(m.n_states)
    for t in reversed(range(m.horizon)):
        q_beta[t] = m.step_cost + inst.gamma * (m.transitions @ v_beta)
        v_beta = q_beta[t][states, behaviour[t]]
    occupancy, error = np.full(m.n_states, 1.0 / m.n_states), 0.0
    for t in range(m.horizon):
        a = behaviour[t]
        error += occupancy @ (q_critic[t][states, a] - q_beta[t][states, a])
        occupancy = occupancy @ m.transitions[states, a]
    return float(error / m.horizon)


def admissible(inst: Instance, kappa: float, q_critic: np.ndarray) -> bool:
    """κ-admissibility of the rule reading ``q_critic``: ``Q^γ_t(s, π) <= max{V^γ_t(s), thr_t}`` everywhere
    reachable (section 2)."""
    actions, _, thr = caps_decisions(inst, kappa, q_critic=q_critic)
    m = inst.m
    for t in range(m.horizon):
        ok = reachable(m, t)
        q_taken = inst.q[t][np.arange(m.n_states)[:, None], actions[t]]
        if np.any((q_taken - np.maximum(inst.v[t][:, None], thr[t]))[:, ok] > TOL):
            return False
    return True


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_pessimism_calibration_keeps_an_exact_critic_and_admissibility_under_constant_pessimism(
        stochastic: bool, gamma: float) -> None:
    """The exact ``Q^γ`` is cost-optimal, so on any behaviour's data its bias is <= 0 and the "pessimism" shift is 0:
    the rule, and every result above, is unchanged. A critic pessimistic by a constant δ > 0 is shifted by
    ``max(δ + bias(Q^γ), 0) <= δ`` and stays ``>= Q^γ`` with the same ranking, so the rule stays κ-admissible;
    "mean" calibration (shift ``δ + bias(Q^γ)``, maybe < 0) leaves ``Q^γ − bias(Q^γ) >= Q^γ``, admissible too.
    A critic optimistic by δ is left as trained by "pessimism" (only "mean"
    lifts it back above ``Q^γ``), and then admissibility fails somewhere: that case has no guarantee."""
    rng = np.random.default_rng(14)
    optimistic_failures = 0
    for inst in make_instances(seed=14, count=20, gamma=gamma, stochastic=stochastic):
        behaviour = rng.integers(0, inst.m.n_actions, size=(inst.m.horizon, inst.m.n_states))
        exact_bias = behaviour_bias(inst, behaviour, inst.q)
        assert exact_bias <= TOL and calibration_shift(exact_bias, "pessimism") <= TOL
        for delta in (0.5, 2.0):
            for mode in ("pessimism", "mean"):
                shift = calibration_shift(behaviour_bias(inst, behaviour, inst.q + delta), mode)
                assert shift <= delta + TOL and (shift >= 0.0 or mode == "mean")  # critic stays >= Q^γ
                assert all(admissible(inst, kappa, inst.q + delta - shift) for kappa in KAPPAS)
            optimistic = inst.q - delta
            shift = calibration_shift(behaviour_bias(inst, behaviour, optimistic), "mean")
            assert shift <= -delta + TOL and all(admissible(inst, kappa, optimistic - shift) for kappa in KAPPAS)
            assert calibration_shift(behaviour_bias(inst, behaviour, optimistic), "pessimism") == 0.0
            optimistic_failures += sum(not admissible(inst, kappa, optimistic) for kappa in KAPPAS)
    assert optimistic_failures > 0
