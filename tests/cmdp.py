"""Small finite-horizon CMDPs with exact dynamic programming, for checking the paper's Theorem 1.

Time indexing follows the paper's proof (appendix): states ``s_0 … s_T``, actions ``a_0 … a_{T−1}``,
and a cost is paid in every visited state, the last one included, so an episode costs
``Σ_{t=0}^{T} c_t``. With a step cost ``c(s, a)`` (``c(s)`` when it does not depend on ``a``) and a
terminal cost ``c_T(s)``:

- ``V^c_T(s) = c_T(s)``;
- ``Q^c_t(s, a) = c(s, a) + Σ_{s'} P(s, a, s') V^c_{t+1}(s')`` for ``t < T`` (includes the current cost);
- ``V^c_t(s) = min_a Q^c_t(s, a)``.

A switching policy acts on ``(t, s, c_<t)``; its exact expected cost-to-go ``V^{π,c}_t(s; c_<t)`` (current
cost included) is computed by backward recursion over the augmented state ``(t, s, c_<t)``. Costs are
small integers, so ``c_<t`` lives on the finite grid ``0 … max_cost · T``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# act(t, states, spent) -> actions: states and spent are flat int arrays of equal length.
SwitchingPolicy = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class CMDP:
    """A finite-horizon CMDP with integer, nonnegative costs."""

    transitions: np.ndarray  # P(s, a, s'), shape (S, A, S), rows sum to 1
    step_cost: np.ndarray  # c(s, a), shape (S, A), integers >= 0
    terminal_cost: np.ndarray  # c_T(s), shape (S,), integers >= 0
    horizon: int  # T
    max_cost: int  # upper bound on every single cost

    @property
    def n_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def n_actions(self) -> int:
        return self.transitions.shape[1]

    @property
    def spent_grid(self) -> int:
        """Number of values c_<t can take: 0 … max_cost · T."""
        return self.max_cost * self.horizon + 1


def random_cmdp(rng: np.random.Generator, *, n_states: int, n_actions: int, horizon: int, stochastic: bool,
                state_cost: bool = True, max_cost: int = 2, max_support: int = 3) -> CMDP:
    """A random CMDP: deterministic (one successor per (s, a)) or stochastic (1 … max_support successors,
    probabilities in multiples of 1/8).

    With ``state_cost`` the cost is the paper's ``c(s)`` (the same for every action, and ``c_T = c``);
    otherwise an action-dependent ``c(s, a)`` with an independent terminal cost.
    """
    transitions = np.zeros((n_states, n_actions, n_states))
    for s in range(n_states):
        for a in range(n_actions):
            support_size = int(rng.integers(1, max_support + 1)) if stochastic else 1
            support = rng.choice(n_states, size=support_size, replace=False)
            # Probabilities are positive multiples of 1/8: every DP value is then an exact dyadic
            # rational, so comparisons such as ``Q^c < κ − c_<t`` are free of round-off.
            cuts = np.sort(rng.choice(np.arange(1, 8), size=support_size - 1, replace=False))
            transitions[s, a, support] = np.diff(np.concatenate(([0], cuts, [8]))) / 8.0
    if state_cost:
        c = rng.integers(0, max_cost + 1, size=n_states)
        step_cost, terminal_cost = np.repeat(c[:, None], n_actions, axis=1), c.copy()
    else:
        step_cost = rng.integers(0, max_cost + 1, size=(n_states, n_actions))
        terminal_cost = rng.integers(0, max_cost + 1, size=n_states)
    return CMDP(transitions, step_cost.astype(np.int64), terminal_cost.astype(np.int64), horizon, max_cost)


def optimal_cost(m: CMDP) -> tuple[np.ndarray, np.ndarray]:
    """Exact cost-optimal ``Q^c`` (shape (T, S, A)) and ``V^c`` (shape (T + 1, S)), undiscounted."""
    q = np.zeros((m.horizon, m.n_states, m.n_actions))
    v = np.zeros((m.horizon + 1, m.n_states))
    v[m.horizon] = m.terminal_cost
    for t in reversed(range(m.horizon)):
        q[t] = m.step_cost + m.transitions @ v[t + 1]
        v[t] = q[t].min(axis=1)
    return q, v


def cost_variation(m: CMDP, v: np.ndarray) -> float:
    """The optimal-cost variation ε (paper, Assumption 2) as the proof uses it: the largest spread of
    ``V^c_{t+1}`` over the possible successors ``N(s, a)`` of any ``(s, a)`` taken at any ``t < T``."""
    eps = 0.0
    support = m.transitions > 0
    for t in range(m.horizon):
        successor_v = np.where(support, v[t + 1][None, None, :], np.nan)
        spread = np.nanmax(successor_v, axis=2) - np.nanmin(successor_v, axis=2)
        eps = max(eps, float(spread.max()))
    return eps


def cost_optimal_policy(q: np.ndarray) -> np.ndarray:
    """π^c_t(s) = argmin_a Q^c_t(s, a), shape (T, S)."""
    return q.argmin(axis=2)


def policy_cost(m: CMDP, act: SwitchingPolicy) -> np.ndarray:
    """Exact ``V^{π,c}_t(s; c_<t)`` of a switching policy, shape (T + 1, S, spent_grid).

    Entry ``[t, s, c]`` is the expected cost from ``t`` on (current cost included) when in ``s`` at
    ``t`` having already paid ``c``. Only ``c <= max_cost · t`` is reachable; successors of unreachable
    grid points are clipped to the grid and their values must not be relied on.
    """
    n_spent = m.spent_grid
    values = np.zeros((m.horizon + 1, m.n_states, n_spent))
    values[m.horizon] = m.terminal_cost[:, None]
    states, spent = np.meshgrid(np.arange(m.n_states), np.arange(n_spent), indexing="ij")
    states, spent = states.ravel(), spent.ravel()
    for t in reversed(range(m.horizon)):
        actions = np.asarray(act(t, states, spent))
        step = m.step_cost[states, actions]
        spent_next = np.minimum(spent + step, n_spent - 1)
        future = m.transitions[states, actions] @ values[t + 1]  # (N, spent_grid): E over s'
        expected_next = future[np.arange(len(states)), spent_next]
        values[t] = (step + expected_next).reshape(m.n_states, n_spent)
    return values


def reachable(m: CMDP, t: int) -> np.ndarray:
    """Mask over the spent grid of the values c_<t can take at step t, shape (spent_grid,)."""
    return np.arange(m.spent_grid) <= m.max_cost * t


def twin_spread(q_reward: torch.Tensor) -> torch.Tensor:
    """A twin reward critics' disagreement |Q^r_1 − Q^r_2| for "q_trust" to read: pseudo-random in [0, 3), a fixed
    function of Q^r (so a policy acts the same at the same (t, s, c_<t)). Theorem 1 holds for any ranking of the
    feasible heads, hence for any spread; against Q^r's scale of 3 some gaps are trusted and some are not."""
    return (q_reward * 7.0).remainder(3.0)
