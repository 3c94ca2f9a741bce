"""DSRL scoring (``rllib_caps/scoring.py``): normalisation, the safe flag, and threshold summaries."""

from __future__ import annotations

import pytest

from rllib_caps.algorithms.caps.extension import CAPSExtension
from rllib_caps.core.scoring import (
    EpisodeOutcome,
    ThresholdResult,
    average_over_thresholds,
    best_safe_episode,
    normalized_cost,
    normalized_reward,
    summarize,
)


def test_normalized_reward() -> None:
    assert normalized_reward(50.0, 0.0, 100.0) == pytest.approx(0.5)
    assert normalized_reward(-20.0, -20.0, 380.0) == pytest.approx(0.0)
    assert normalized_reward(380.0, -20.0, 380.0) == pytest.approx(1.0)
    assert normalized_reward(480.0, -20.0, 380.0) == pytest.approx(1.25)  # not clipped
    assert normalized_reward(-60.0, -20.0, 380.0) == pytest.approx(-0.1)


def test_normalized_cost_epsilon_only_at_zero_threshold() -> None:
    assert normalized_cost(10.0, 20.0) == pytest.approx(0.5)  # ε = 0: C / κ
    assert normalized_cost(0.0, 20.0) == 0.0
    assert normalized_cost(30.0, 20.0) == pytest.approx(1.5)
    assert normalized_cost(0.5, 1.0) == pytest.approx(0.5)  # a small κ > 0 still has ε = 0
    assert normalized_cost(0.0, 0.0) == pytest.approx(1.0)  # κ = 0: (C + 1) / 1
    assert normalized_cost(3.0, 0) == pytest.approx(4.0)
    assert normalized_cost(0.0, 0.0) <= 1.0  # zero cost under a zero budget counts as safe


def _caps_metrics(counts: tuple[int, ...], predicted: float = 0.0) -> dict[str, object]:
    return {"head_counts": counts, "predicted_cost": predicted, "discounted_cost": predicted / 2}


def _outcomes() -> list[EpisodeOutcome]:
    return [
        EpisodeOutcome(reward=100.0, cost=8.0, length=200, metrics=_caps_metrics((150, 50), 3.0)),
        EpisodeOutcome(reward=200.0, cost=12.0, length=100, metrics=_caps_metrics((30, 70), 6.0)),
        EpisodeOutcome(reward=300.0, cost=10.0, length=150, metrics=_caps_metrics((100, 50), 9.0)),
    ]


def test_summarize_means() -> None:
    res = summarize(_outcomes(), threshold=20.0, min_reward=0.0, max_reward=400.0)
    assert res.threshold == 20.0 and res.episodes == 3
    assert res.reward == pytest.approx(200.0)
    assert res.cost == pytest.approx(10.0)
    assert res.normalized_reward == pytest.approx(0.5)
    assert res.normalized_cost == pytest.approx(0.5)  # normalised from the mean cost
    assert res.safe is True
    assert res.mean_length == pytest.approx(150.0)
    assert res.extras == {}  # without an extension: no extra results


def test_summarize_with_the_caps_extension_pools_head_usage() -> None:
    res = summarize(_outcomes(), threshold=20.0, min_reward=0.0, max_reward=400.0, extension=CAPSExtension())
    usage = res.extras["head_usage"]
    assert [usage["0"], usage["1"]] == pytest.approx([280 / 450, 170 / 450])  # pooled steps, not per-episode means
    assert res.extras["predicted_cost"] == pytest.approx(6.0) and res.extras["discounted_cost"] == pytest.approx(3.0)


def test_summarize_safe_boundary() -> None:
    # Mean cost exactly κ: normalised cost 1.0 is safe; a bit more is not.
    assert summarize(_outcomes(), threshold=10.0, min_reward=0.0, max_reward=400.0).safe is True
    assert summarize(_outcomes(), threshold=10.0, min_reward=0.0, max_reward=400.0).normalized_cost == 1.0
    assert summarize(_outcomes(), threshold=9.99, min_reward=0.0, max_reward=400.0).safe is False
    # κ = 0 with zero cost: (0 + 1) / (0 + 1) = 1 → safe; any cost → unsafe.
    zero = [EpisodeOutcome(reward=1.0, cost=0.0, length=5)]
    assert summarize(zero, threshold=0.0, min_reward=0.0, max_reward=10.0).safe is True
    one = [EpisodeOutcome(reward=1.0, cost=1.0, length=5)]
    assert summarize(one, threshold=0.0, min_reward=0.0, max_reward=10.0).normalized_cost == pytest.approx(2.0)
    assert summarize(one, threshold=0.0, min_reward=0.0, max_reward=10.0).safe is False


def test_summarize_head_usage_with_more_heads_and_zero_counts() -> None:
    caps = CAPSExtension()
    usage = caps.threshold_metrics([_caps_metrics((4, 0, 0, 0)), _caps_metrics((0, 0, 1, 3))])["head_usage"]
    assert usage == pytest.approx({"0": 0.5, "1": 0.0, "2": 0.125, "3": 0.375})
    assert sum(usage.values()) == pytest.approx(1.0)
    # Zero-length episodes do not divide by zero.
    assert caps.threshold_metrics([_caps_metrics((0, 0))])["head_usage"] == {"0": 0.0, "1": 0.0}


def test_summarize_rejects_no_episodes() -> None:
    with pytest.raises(ValueError, match="no evaluation episodes"):
        summarize([], threshold=20.0, min_reward=0.0, max_reward=1.0)


def test_threshold_result_to_dict() -> None:
    d = summarize(_outcomes(), threshold=20.0, min_reward=0.0, max_reward=400.0, extension=CAPSExtension()).to_dict()
    assert d["safe"] == 1.0 and isinstance(d["safe"], float)
    assert d["head_usage"] == pytest.approx({"0": 280 / 450, "1": 170 / 450})  # the extra results, merged in
    assert "extras" not in d and "head_usage" not in summarize(_outcomes(), 20.0, 0.0, 400.0).to_dict()
    assert d["threshold"] == 20.0 and d["episodes"] == 3
    unsafe = summarize(_outcomes(), threshold=5.0, min_reward=0.0, max_reward=400.0).to_dict()
    assert unsafe["safe"] == 0.0


def _result(norm_reward: float, norm_cost: float) -> ThresholdResult:
    return ThresholdResult(threshold=10.0, episodes=1, reward=0.0, cost=0.0, normalized_reward=norm_reward,
                           normalized_cost=norm_cost, safe=norm_cost <= 1.0, mean_length=1.0)


def test_average_over_thresholds() -> None:
    avg = average_over_thresholds([_result(0.2, 0.5), _result(0.4, 1.0), _result(0.9, 1.2)])
    assert avg["normalized_reward"] == pytest.approx(0.5)
    assert avg["normalized_cost"] == pytest.approx(0.9)
    assert avg["safe"] == 1.0  # safe on average although one threshold is violated (the paper's criterion)
    avg = average_over_thresholds([_result(0.2, 0.9), _result(0.4, 1.3)])
    assert avg["normalized_cost"] == pytest.approx(1.1)
    assert avg["safe"] == 0.0
    assert average_over_thresholds([_result(0.3, 1.0)])["safe"] == 1.0  # exactly 1 is safe


def test_average_over_thresholds_rejects_no_results() -> None:
    """Like ``summarize``, averaging nothing is an error, not a silent NaN score flagged unsafe."""
    with pytest.raises(ValueError):
        average_over_thresholds([])


def test_average_over_thresholds_from_summaries() -> None:
    """End to end with the paper's three Bullet thresholds {10, 20, 40}."""
    results = [summarize(_outcomes(), threshold=k, min_reward=0.0, max_reward=400.0) for k in (10.0, 20.0, 40.0)]
    avg = average_over_thresholds(results)
    assert avg["normalized_reward"] == pytest.approx(0.5)
    assert avg["normalized_cost"] == pytest.approx((1.0 + 0.5 + 0.25) / 3)
    assert avg["safe"] == 1.0


def test_best_safe_episode_is_the_highest_return_within_the_threshold() -> None:
    returns, costs = [100.0, 300.0, 200.0, 50.0], [5.0, 25.0, 10.0, 0.0]
    assert best_safe_episode(returns, costs, 10.0, 0.0, 400.0) == pytest.approx(0.5)  # 200 at cost 10: ≤ κ counts
    assert best_safe_episode(returns, costs, 40.0, 0.0, 400.0) == pytest.approx(0.75)
    assert best_safe_episode(returns, [20.0] * 4, 10.0, 0.0, 400.0) is None
    with pytest.raises(ValueError, match="differ in shape"):
        best_safe_episode(returns, costs[:3], 10.0, 0.0, 400.0)
