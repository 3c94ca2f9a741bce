"""Theorem 1 end to end through the budget bookkeeping (``BudgetTracker``) and the γ conversion
(``remaining_budget_threshold``), checked exactly on the random finite-horizon CMDPs of ``tests/cmdp.py``.

``tests/test_theorem1.py`` and ``tests/test_theorem1_finite_horizon.py`` build the switching policy directly
from the DP's augmented state ``(t, s, c_<t)``. Here the rule runs the way deployment runs it: an agent loop
whose only knowledge of ``c_<t`` and ``t`` is a ``BudgetTracker``. ``BookkeptCAPS.act`` keeps the order of
``CAPSPolicy.act`` exactly (the tracker is driven directly, since ``CAPSPolicy`` needs a neural module):

1. ``budget.record(cost, mask=acted)``: the cost the env reported for the previous step, recorded only for
   envs that already acted in this episode (the first call of an episode ignores it);
2. read ``spent`` (c_<t) and ``step`` (t) from the tracker, convert ``κ`` with ``remaining_budget_threshold``
   for the given γ and T, and pick heads with ``select_heads`` using the exact critic of the CMDP
   (the observation is ``s``; the critic's time index is the tracker's ``t``);
3. ``acted[:] = True``; a new episode calls ``reset_envs`` (``budget.restart(mask)``, ``acted[mask] = False``).

Every trajectory is enumerated as its own env of one batched tracker: env ``i`` starts in ``s_0 = i // B^T``
and at step ``t`` goes to the ``b_t``-th successor of ``(s_t, a_t)``, ``b_t`` the ``t``-th base-``B`` digit
of ``i`` (a digit past the support gives a path of probability 0, ignored). Paths sharing the prefix up to
``t`` form a contiguous block, so conditional expectations given the node ``(t, s_t, c_<t)`` are block
averages: exact, like the DP (probabilities are multiples of 1/8). Each rollout runs two episodes back to
back, the second after ``reset_envs``, so ``restart`` is exercised; the checks use the second.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import test_theorem1_finite_horizon as fh
import torch
from cmdp import CMDP, cost_variation, policy_cost
from test_theorem1 import KAPPAS, TOL, Instance, caps_policy, make_instances

from rllib_caps.algorithms.caps.switching import DEFAULT_HEAD_SELECTION, select_heads
from rllib_caps.core.budget import BudgetTracker, remaining_budget_threshold

NEAR_ONE = 1.0 - 1e-9
OFF_GRID_KAPPAS = (0.3, 1.7, 2.3, 4.7, 6.1, 8.9)
BUGS = ("t_from_one", "current_cost", "stale_cost_after_restart")


class BookkeptCAPS:
    """``CAPSPolicy``'s act/record order around the exact critic of a finite CMDP (see the module docstring).

    ``bug`` injects an off-by-one for the negative control: ``"t_from_one"`` records on every call, the first
    of an episode included (``step`` = t + 1); ``"stale_cost_after_restart"`` restarts the tracker but
    forgets to clear ``acted``, so the previous episode's last cost leaks into the new one. (The third bug,
    ``"current_cost"``, lives in the env loop: it passes the cost of the current state instead of the
    previous step's.)
    """

    def __init__(self, heads: np.ndarray, q_cost: np.ndarray, q_reward: np.ndarray, kappa: float, gamma: float,
                 n_envs: int, bug: str | None = None) -> None:
        self.heads, self.q_cost, self.q_reward = heads, q_cost, q_reward
        self.kappa, self.gamma, self.horizon, self.bug = kappa, gamma, q_cost.shape[0], bug
        self.budget = BudgetTracker(n_envs)
        self._acted = np.zeros(n_envs, dtype=bool)
        self.seen_spent = self.seen_step = None

    def reset_envs(self, mask: np.ndarray) -> None:
        self.budget.restart(mask)
        if self.bug != "stale_cost_after_restart":
            self._acted[mask] = False

    def act(self, states: np.ndarray, cost: np.ndarray) -> np.ndarray:
        self.budget.record(cost, mask=None if self.bug == "t_from_one" else self._acted)
        spent, step = self.budget.spent.copy(), self.budget.step.copy()
        thr = remaining_budget_threshold(self.kappa, torch.from_numpy(spent), torch.from_numpy(step.astype(np.float64)),
                                         self.horizon, self.gamma)
        if self.bug is None:
            assert np.all(step < self.horizon)
        t = np.minimum(step, self.horizon - 1)  # only a buggy tracker runs past the last step
        head_actions = self.heads[:, t, states].T  # (N, K)
        q_cost = torch.from_numpy(self.q_cost[t[:, None], states[:, None], head_actions])
        q_rew = torch.from_numpy(self.q_reward[t[:, None], states[:, None], head_actions])
        chosen = select_heads(q_rew, q_cost, thr).numpy()
        self._acted[:] = True
        self.seen_spent, self.seen_step = spent, step
        return head_actions[np.arange(len(states)), chosen]


@dataclasses.dataclass(frozen=True)
class Rollout:
    """Every trajectory of one episode, path-major: index ``[t, i]`` is step ``t`` of path ``i``."""

    states: np.ndarray  # s_t, (T + 1, N)
    spent: np.ndarray  # c_<t summed by the harness from the env's costs, not by the tracker, (T + 1, N)
    actions: np.ndarray  # (T, N)
    costs: np.ndarray  # c_t, (T, N)
    tracker_spent: np.ndarray  # what the agent read from its tracker, (T, N)
    tracker_step: np.ndarray  # (T, N)
    weight: np.ndarray  # the path's probability, (N,)
    n_branch: int

    @property
    def live(self) -> np.ndarray:
        return self.weight > 0

    def node_mean(self, t: int, per_path: np.ndarray) -> np.ndarray:
        """E[per_path | the node (t, s_t, c_<t) of each path], broadcast back to the paths (NaN where dead)."""
        block = self.n_branch ** (self.actions.shape[0] - t)
        w = self.weight.reshape(-1, block)
        total = w.sum(axis=1)
        mean = np.divide((w * per_path.reshape(-1, block)).sum(axis=1), total, out=np.full(total.shape, np.nan),
                         where=total > 0)
        return np.repeat(mean, block)


def successor_tables(m: CMDP) -> tuple[np.ndarray, np.ndarray, int]:
    """The support of P(s, a, ·) listed per (s, a), padded with probability 0: (S, A, B) states and probs."""
    n_branch = int((m.transitions > 0).sum(axis=2).max())
    succ = np.zeros((m.n_states, m.n_actions, n_branch), dtype=np.int64)
    prob = np.zeros((m.n_states, m.n_actions, n_branch))
    for s in range(m.n_states):
        for a in range(m.n_actions):
            support = np.flatnonzero(m.transitions[s, a] > 0)
            succ[s, a] = support[0]
            succ[s, a, :len(support)] = support
            prob[s, a, :len(support)] = m.transitions[s, a, support]
    return succ, prob, n_branch


def run_episodes(m: CMDP, agent: BookkeptCAPS, bug: str | None = None, episodes: int = 2) -> Rollout:
    """The deployment loop over every trajectory, ``episodes`` times back to back; the last episode returned."""
    succ, prob, n_branch = successor_tables(m)
    horizon = m.horizon
    paths = np.arange(m.n_states * n_branch**horizon)
    # The first call of an episode gets whatever the loop holds (the last cost of the previous episode from
    # the second episode on): act must ignore it.
    cost = np.zeros(len(paths))
    for _ in range(episodes):
        agent.reset_envs(np.ones(len(paths), dtype=bool))
        s = paths // n_branch**horizon
        weight = np.ones(len(paths))
        states, spent = np.zeros((horizon + 1, len(paths)), dtype=np.int64), np.zeros((horizon + 1, len(paths)))
        actions, costs = np.zeros((horizon, len(paths)), dtype=np.int64), np.zeros((horizon, len(paths)))
        tracker_spent, tracker_step = np.zeros((horizon, len(paths))), np.zeros((horizon, len(paths)), dtype=np.int64)
        for t in range(horizon):
            states[t] = s
            if bug == "current_cost":
                cost = m.step_cost[s, 0].astype(np.float64)  # c(s_t), known on arrival in a c(s) CMDP
            a = agent.act(s, cost)
            actions[t], tracker_spent[t], tracker_step[t] = a, agent.seen_spent, agent.seen_step
            costs[t] = m.step_cost[s, a]
            spent[t + 1] = spent[t] + costs[t]
            branch = (paths // n_branch ** (horizon - 1 - t)) % n_branch
            weight = weight * prob[s, a, branch]
            s = succ[s, a, branch]
            cost = costs[t]  # info["cost"] of the step just taken, passed to the next act
        states[horizon] = s
    return Rollout(states, spent, actions, costs, tracker_spent, tracker_step, weight, n_branch)


def tails(m: CMDP, roll: Rollout, gamma: float) -> np.ndarray:
    """Per path, the cost from t on (current and terminal costs included), discounted by γ: (T + 1, N)."""
    out = np.zeros(roll.states.shape)
    out[m.horizon] = m.terminal_cost[roll.states[m.horizon]]
    for t in reversed(range(m.horizon)):
        out[t] = roll.costs[t] + gamma * out[t + 1]
    return out


def undiscounted_rollout(inst: Instance, kappa: float, gamma: float, bug: str | None = None) -> Rollout:
    """The bookkept loop on a ``test_theorem1`` instance with its exact undiscounted critic ``Q^c``."""
    n_paths = inst.m.n_states * successor_tables(inst.m)[2] ** inst.m.horizon
    agent = BookkeptCAPS(inst.heads, inst.q, inst.q_reward, kappa, gamma, n_paths, bug=bug)
    return run_episodes(inst.m, agent, bug=bug)


def mismatches(inst: Instance, roll: Rollout, kappa: float) -> int:
    """Visited nodes where the bookkept action differs from ``test_theorem1.caps_policy`` at (t, s, c_<t)."""
    direct = caps_policy(inst, kappa)
    live = roll.live
    return sum(int(np.sum(roll.actions[t][live] != direct(t, roll.states[t][live], roll.spent[t][live].astype(int))))
               for t in range(inst.m.horizon))


# ----------------------------------------------------------------------------- 1. γ = 1 (and γ → 1)
@pytest.mark.parametrize(("gamma", "kappas"), [(1.0, KAPPAS), (NEAR_ONE, OFF_GRID_KAPPAS)], ids=["1", "1-1e-9"])
@pytest.mark.parametrize("state_cost", [True, False], ids=["c(s)", "c(s,a)"])
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_bookkept_policy_is_the_direct_policy_and_meets_theorem1(stochastic: bool, state_cost: bool, gamma: float,
                                                                  kappas: tuple[float, ...]) -> None:
    """At every visited ``(t, s, c_<t)``: the tracker reads exactly ``c_<t`` and ``t`` (second episode, after
    ``restart``), the bookkept action equals ``test_theorem1.caps_policy`` (γ = 1 rule, same ``Q^c``); the
    exact expected cost from the node equals the DP's ``V^{π,c}_t(s; c_<t)`` and meets Theorem 1,
    ``<= max{V^c_t(s), κ − c_<t} + (T − t) ε`` (at t = 0: ``max{V^c_0(s_0), κ} + T ε``).

    At γ = 1 − 1e-9 the conversion is used with the same undiscounted critic (this isolates the conversion
    and the bookkeeping; a discounted critic breaks fallback ties differently, see the γ < 1 test) and κ off
    the 1/8 grid, so that ``Q^c < thr`` cannot flip on the conversion's round-off.
    """
    fallback_hits = feasible_hits = 0
    for inst in make_instances(seed=21, count=10, stochastic=stochastic, state_cost=state_cost):
        m = inst.m
        eps = cost_variation(m, inst.v)
        for kappa in kappas:
            roll = undiscounted_rollout(inst, kappa, gamma)
            live = roll.live
            np.testing.assert_array_equal(roll.tracker_step[:, live], np.arange(m.horizon)[:, None]
                                          .repeat(live.sum(), axis=1))
            np.testing.assert_array_equal(roll.tracker_spent[:, live], roll.spent[:-1, live])
            assert mismatches(inst, roll, kappa) == 0
            values = policy_cost(m, caps_policy(inst, kappa))
            tail = tails(m, roll, 1.0)
            for t in range(m.horizon + 1):
                s, c = roll.states[t][live], roll.spent[t][live].astype(int)
                expected = roll.node_mean(t, tail[t])[live]
                np.testing.assert_allclose(expected, values[t][s, c], rtol=0, atol=TOL)
                bound = np.maximum(inst.v[t][s], kappa - c) + (m.horizon - t) * eps
                assert np.all(expected <= bound + TOL)
                fallback = inst.v[t][s] >= kappa - c
                fallback_hits += int(fallback.sum())
                feasible_hits += int((~fallback).sum())
            v0 = roll.node_mean(0, tail[0])[live]
            assert np.all(v0 <= np.maximum(inst.v[0][roll.states[0][live]], kappa) + m.horizon * eps + TOL)
    assert fallback_hits > 0 and feasible_hits > 0  # both branches of the rule were exercised


# ----------------------------------------------------------------------------- 2. γ < 1
@pytest.mark.parametrize("gamma", fh.GAMMAS)
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_bookkept_policy_with_discounted_critic(stochastic: bool, gamma: float) -> None:
    """Time-limited instances of ``test_theorem1_finite_horizon`` with their exact ``Q^γ_t``. At every visited
    ``(t, s, c_<t)``: the tracker reads ``c_<t`` and ``t``; the bookkept action equals the direct policy
    ``fh.caps_decisions`` (same conversion); it is κ-admissible in discounted units,
    ``Q^γ_t(s, π) <= max{V^γ_t(s), thr_t}``; the exact expected discounted cost from the node equals the DP's
    ``V^{π,γ}_t(s; c_<t)``. In deterministic CMDPs, the discounted Theorem 1 that the sibling module proves,
    ``V^{π,γ}_t(s; c_<t) <= max{V^γ_t(s), thr_t}``, holds on every node whose trajectory spends on rate
    (every step cost x has ``x (T − t) <= B`` or ``x >= B``, ``B = max(κ − c_<t, 0)``)."""
    on_hits = fallback_hits = feasible_hits = 0
    for inst in fh.make_instances(seed=22, count=10 if stochastic else 20, gamma=gamma, stochastic=stochastic):
        m = inst.m
        n_paths = m.n_states * successor_tables(m)[2] ** m.horizon
        for kappa in fh.KAPPAS:
            agent = BookkeptCAPS(inst.heads, inst.q, inst.q_reward, kappa, gamma, n_paths)
            roll = run_episodes(m, agent)
            live = roll.live
            table, _, _ = fh.caps_decisions(inst, kappa, selection=DEFAULT_HEAD_SELECTION)  # the agent's rule
            values = fh.discounted_policy_cost(m, table, gamma)
            tail = tails(m, roll, gamma)
            tail_on_rate = np.ones(live.shape, dtype=bool)
            for t in reversed(range(m.horizon)):
                s, c = roll.states[t][live], roll.spent[t][live].astype(int)
                np.testing.assert_array_equal(roll.tracker_step[t][live], t)
                np.testing.assert_array_equal(roll.tracker_spent[t][live], c)
                a = roll.actions[t][live]
                np.testing.assert_array_equal(a, table[t][s, c])
                thr = fh.threshold(kappa, c, t, m.horizon, gamma)
                assert np.all(inst.q[t][s, a] <= np.maximum(inst.v[t][s], thr) + TOL)
                fallback_hits += int(np.sum(inst.v[t][s] >= thr))
                feasible_hits += int(np.sum(inst.v[t][s] < thr))
                expected = roll.node_mean(t, tail[t])[live]
                np.testing.assert_allclose(expected, values[t][s, c], rtol=0, atol=TOL)
                budget = np.maximum(kappa - c, 0.0)
                x = roll.costs[t][live]
                tail_on_rate[live] &= (x * (m.horizon - t) <= budget) | (x >= budget)
                if not stochastic:
                    on = tail_on_rate[live]
                    assert np.all(expected[on] <= np.maximum(inst.v[t][s], thr)[on] + TOL)
                    on_hits += int(on.sum())
    assert fallback_hits > 0 and feasible_hits > 0
    assert stochastic or on_hits > 0


# ----------------------------------------------------------------------------- 3. negative control
@pytest.mark.parametrize("bug", BUGS)
def test_off_by_one_bookkeeping_is_detected(bug: str) -> None:
    """The equality of test 1 has teeth: an off-by-one in the bookkeeping (counting t from 1, passing the
    current state's cost instead of the previous step's, or a previous episode's last cost leaking through
    ``restart``) changes the action at some visited node of some instance (γ = 1, c(s) CMDPs)."""
    found = 0
    for inst in make_instances(seed=21, count=10, stochastic=False, state_cost=True):
        for kappa in KAPPAS:
            assert mismatches(inst, undiscounted_rollout(inst, kappa, 1.0), kappa) == 0
            found += mismatches(inst, undiscounted_rollout(inst, kappa, 1.0, bug=bug), kappa)
    assert found > 0

