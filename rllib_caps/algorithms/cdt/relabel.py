"""CDT's data augmentation by Pareto-frontier relabelling and its episode sampling weights (Liu et al., 2023, §4.3,
as OSRL implements them), as pure numpy functions of the episodes' (C, R) points; no Ray, no torch.

An augmented episode is an existing episode whose whole return-to-go is shifted by R̃ − R and cost-to-go by
C̃ − C, so that it starts at a (C̃, R̃) above the data's reward-cost Pareto frontier; its states, actions,
rewards and costs are unchanged (docs/baselines.md "CDT").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AugmentationSettings:
    """OSRL's augmentation settings; ``deg``, ``max_reward`` and ``max_rew_decrease`` are per task
    (``cdt.targets``), the rest fixed in OSRL's code."""

    fraction: float = 0.2  # augmented episodes per grid-filtered episode (OSRL's augment_percent)
    deg: int = 2  # degree of the polynomial fitted to the Pareto frontier
    max_reward: float = 1000.0  # R̃ is drawn up to this (raw return units)
    min_reward: float = 1.0  # R̃ is drawn from at least f(C̃) + this
    max_rew_decrease: float = 100.0  # a duplicate's substitute may return this much less than the nearest episode
    beta: float = 1.0  # substitutes are drawn with probability ∝ 1 / (distance + beta)
    cost_bins: int = 10  # the outlier grid filter: bins over C
    reward_bins: int = 50  # ... and over R
    max_per_bin: int = 10  # at most this many episodes kept per bin (a random subset)
    min_per_bin: int = 2  # bins with this many episodes or fewer are dropped


def grid_filter(costs: np.ndarray, rewards: np.ndarray, s: AugmentationSettings, rng: np.random.Generator,
                ) -> np.ndarray:
    """Indices of the episodes kept by OSRL's outlier filter: a ``cost_bins`` × ``reward_bins`` grid over the
    points' range (bin = ⌊(x − min)/step⌋, so the maximum gets a bin of its own), at most ``max_per_bin`` per bin
    (a random subset), bins with ≤ ``min_per_bin`` points dropped. Sorted."""
    def bins(x: np.ndarray, count: int) -> np.ndarray:
        step = (x.max() - x.min()) / count
        return np.zeros(len(x), np.int64) if step == 0 else np.floor((x - x.min()) / step).astype(np.int64)

    keys = bins(costs, s.cost_bins) * (s.reward_bins + 1) + bins(rewards, s.reward_bins)
    kept = []
    for key in np.unique(keys):
        members = np.flatnonzero(keys == key)
        if len(members) > s.max_per_bin:
            kept.append(rng.choice(members, s.max_per_bin, replace=False))
        elif len(members) > s.min_per_bin:
            kept.append(members)
    return np.sort(np.concatenate(kept)) if kept else np.zeros(0, np.int64)


def pareto_front(costs: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """Indices of the points no other point dominates (lower or equal cost and higher or equal reward, one of
    them strictly); equal points are all kept. Sorted."""
    no_worse = (costs[None, :] <= costs[:, None]) & (rewards[None, :] >= rewards[:, None])
    better = (costs[None, :] < costs[:, None]) | (rewards[None, :] > rewards[:, None])
    return np.flatnonzero(~(no_worse & better).any(axis=1))


def nearest_sources(costs: np.ndarray, rewards: np.ndarray, targets: np.ndarray, s: AugmentationSettings,
                    rng: np.random.Generator) -> np.ndarray:
    """For each target point (C̃, R̃): the nearest (Euclidean in (C, R)) episode with C ≤ C̃. When several targets
    share one nearest episode, the first keeps it and each other gets a random episode with C ≤ C_near and
    R ≥ R_near − ``max_rew_decrease``, drawn with probability ∝ 1/(distance to the nearest one + ``beta``).

    OSRL appends those substitutes after all first choices, pairing them with targets out of order; here each
    target gets its own (docs/baselines.md "CDT")."""
    points = np.stack([costs, rewards], axis=1)
    sources = np.empty(len(targets), np.int64)
    for i, (cost, reward) in enumerate(targets):
        candidates = np.flatnonzero(costs <= cost)
        sources[i] = candidates[np.argmin(np.hypot(costs[candidates] - cost, rewards[candidates] - reward))]
    seen: set[int] = set()
    for i, source in enumerate(sources.tolist()):
        if source not in seen:
            seen.add(source)
            continue
        near = points[source]
        candidates = np.flatnonzero((costs <= near[0]) & (rewards >= near[1] - s.max_rew_decrease))
        weights = 1.0 / (np.hypot(*(points[candidates] - near).T) + s.beta)
        sources[i] = rng.choice(candidates, p=weights / weights.sum())
    return sources


@dataclass(frozen=True)
class Relabelling:
    """The augmented episodes: each is episode ``sources[i]`` relabelled to start at (``costs[i]``,
    ``returns[i]``); ``frontier`` are the polynomial's coefficients (highest power first)."""

    sources: np.ndarray
    costs: np.ndarray
    returns: np.ndarray
    frontier: np.ndarray


def relabel(costs: np.ndarray, rewards: np.ndarray, s: AugmentationSettings, rng: np.random.Generator,
            ) -> Relabelling:
    """OSRL's augmentation on the episodes' costs C and returns R (raw units):

    1. ``grid_filter`` the points;
    2. fit a degree-``deg`` polynomial f to their ``pareto_front`` (the degree is lowered to the number of front
       points − 1 when the front is smaller);
    3. place ⌊``fraction`` × kept⌋ cost points C̃ evenly over [min C, max C] of the kept episodes and draw each
       R̃ ~ U(f(C̃) + ``min_reward``, ``max_reward``);
    4. pair each (C̃, R̃) with a kept episode (``nearest_sources``).
    """
    costs, rewards = np.asarray(costs, np.float64), np.asarray(rewards, np.float64)
    kept = grid_filter(costs, rewards, s, rng)
    count = int(s.fraction * len(kept))
    if count == 0:
        return Relabelling(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(1))
    kept_costs, kept_rewards = costs[kept], rewards[kept]
    front = pareto_front(kept_costs, kept_rewards)
    frontier = np.polyfit(kept_costs[front], kept_rewards[front], deg=min(s.deg, len(front) - 1))
    target_costs = np.linspace(kept_costs.min(), kept_costs.max(), count)
    low = np.polyval(frontier, target_costs) + s.min_reward
    target_returns = low + rng.random(count) * (s.max_reward - low)  # numpy's uniform, also when low > max
    targets = np.stack([target_costs, target_returns], axis=1)
    sources = kept[nearest_sources(kept_costs, kept_rewards, targets, s, rng)]
    return Relabelling(sources=sources, costs=target_costs, returns=target_returns, frontier=frontier)


def episode_weights(costs: np.ndarray, cost_cap: float = 70.0) -> np.ndarray:
    """OSRL's episode sampling weights max(0, cap − C) (its ``cost_sample`` with the linear transform, cap 70):
    episodes that cost ``cost_cap`` or more are never sampled. Not normalised."""
    return np.maximum(cost_cap - np.asarray(costs, np.float64), 0.0)
