"""DSRL scoring: normalised reward and cost, the safe flag, and per-threshold summaries (pure Python)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def normalized_reward(episode_return: float, min_reward: float, max_reward: float) -> float:
    """(R − R_min) / (R_max − R_min), DSRL's reward normalisation."""
    return (episode_return - min_reward) / (max_reward - min_reward)


def normalized_cost(episode_cost: float, threshold: float) -> float:
    """(C + ε) / (κ + ε) with ε = 1 only when κ = 0 (DSRL); ≤ 1 means safe."""
    eps = 1.0 if threshold == 0 else 0.0
    return (episode_cost + eps) / (threshold + eps)


@dataclass(frozen=True)
class EpisodeOutcome:
    """What one evaluation episode produced: undiscounted return and cost, and steps per head; for a policy with a
    cost critic also its Q^c at the first state and action, and the cost discounted by that critic's γ_c."""

    reward: float
    cost: float
    length: int
    head_counts: tuple[int, ...]
    predicted_cost: float | None = None  # Q^c(s₀, a₀) of the action taken, in cost units
    discounted_cost: float | None = None  # Σ_t γ_c^t c_t: what Q^c(s₀, a₀) predicts


@dataclass(frozen=True)
class ThresholdResult:
    """Episode averages at one cost threshold κ, raw and DSRL-normalised."""

    threshold: float
    episodes: int
    reward: float
    cost: float
    normalized_reward: float
    normalized_cost: float
    safe: bool
    head_usage: tuple[float, ...]  # fraction of steps each head acted
    mean_length: float
    predicted_cost: float | None = None  # mean Q^c at the episodes' first step (policies with a cost critic)
    discounted_cost: float | None = None  # mean realised cost discounted by the critic's γ_c

    def to_dict(self) -> dict[str, float | dict[str, float]]:
        """Numbers only (the safe flag as 0/1, head usage keyed by head index), as RLlib metrics need; the
        episode-start prediction only where there is one."""
        d = {k: v for k, v in asdict(self).items() if v is not None}
        d["safe"] = float(self.safe)
        d["head_usage"] = {str(k): u for k, u in enumerate(self.head_usage)}
        return d


def summarize(outcomes: Sequence[EpisodeOutcome], threshold: float, min_reward: float,
              max_reward: float) -> ThresholdResult:
    """Averages episodes at one threshold; safe when the mean normalised cost is ≤ 1."""
    if not outcomes:
        raise ValueError(f"no evaluation episodes at threshold {threshold}")
    reward = float(np.mean([o.reward for o in outcomes]))
    cost = float(np.mean([o.cost for o in outcomes]))
    counts = np.sum([o.head_counts for o in outcomes], axis=0).astype(float)
    norm_cost = normalized_cost(cost, threshold)
    predicted = [o.predicted_cost for o in outcomes]
    predicts = all(p is not None for p in predicted)
    return ThresholdResult(
        threshold=float(threshold), episodes=len(outcomes), reward=reward, cost=cost,
        normalized_reward=normalized_reward(reward, min_reward, max_reward),
        normalized_cost=norm_cost, safe=norm_cost <= 1.0,
        head_usage=tuple(float(x) for x in counts / max(counts.sum(), 1.0)),
        mean_length=float(np.mean([o.length for o in outcomes])),
        predicted_cost=float(np.mean(predicted)) if predicts else None,
        discounted_cost=float(np.mean([o.discounted_cost for o in outcomes])) if predicts else None,
    )


def average_over_thresholds(results: Sequence[ThresholdResult]) -> dict[str, float]:
    """The paper's per-task score: normalised reward and cost averaged over thresholds; safe if ≤ 1."""
    if not results:
        raise ValueError("no threshold results to average")
    norm_reward = float(np.mean([r.normalized_reward for r in results]))
    norm_cost = float(np.mean([r.normalized_cost for r in results]))
    return {"normalized_reward": norm_reward, "normalized_cost": norm_cost, "safe": float(norm_cost <= 1.0)}


def best_safe_episode(returns: Sequence[float], costs: Sequence[float], threshold: float, min_reward: float,
                      max_reward: float) -> float | None:
    """The normalised reward of the best episode with cost ≤ κ in a dataset: what a policy that reproduced that
    one behaviour episode from every start would score; ``None`` when no episode is within κ."""
    returns, costs = np.asarray(returns, dtype=float), np.asarray(costs, dtype=float)
    if returns.shape != costs.shape:
        raise ValueError(f"returns and costs differ in shape: {returns.shape} vs {costs.shape}")
    safe = returns[costs <= threshold]
    return normalized_reward(float(safe.max()), min_reward, max_reward) if safe.size else None
