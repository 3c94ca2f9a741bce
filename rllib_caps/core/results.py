"""Per-threshold results: one schema for RLlib evaluation and the Ray-free evaluator, one table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rllib_caps.core.scoring import ThresholdResult, average_over_thresholds


def results_dict(summaries: Sequence[ThresholdResult]) -> dict[str, Any]:
    """``{"thresholds": {"κ": {...}}, "mean": {...}}``: what ``evaluation/dsrl`` holds in RLlib results."""
    return {
        "thresholds": {f"{s.threshold:g}": s.to_dict() for s in summaries},
        "mean": average_over_thresholds(summaries),
    }


def format_results_table(results: dict[str, Any], title: str = "") -> str:
    """A Markdown table of raw and normalised reward/cost per threshold, plus the average row."""
    rows = sorted(results["thresholds"].items(), key=lambda kv: float(kv[0]))
    predicts = all("predicted_cost" in r for _, r in rows)  # a policy with a cost critic: Q^c at s₀ vs realised
    lines = [f"### {title}", ""] if title else []
    lines += ["| κ | episodes | reward | cost | norm. reward | norm. cost | safe | head usage |"
              + (" Q^c(s₀, a₀) | discounted cost |" if predicts else ""),
              "|---:|---:|---:|---:|---:|---:|:---:|:---|" + ("---:|---:|" if predicts else "")]
    for key, r in rows:
        usage = " ".join(f"{float(u):.2f}" for _, u in sorted(r["head_usage"].items(), key=lambda kv: int(kv[0])))
        start = f" {r['predicted_cost']:.2f} | {r['discounted_cost']:.2f} |" if predicts else ""
        lines.append(f"| {key} | {int(r['episodes'])} | {r['reward']:.2f} | {r['cost']:.2f} | "
                     f"{r['normalized_reward']:.3f} | {r['normalized_cost']:.3f} | {'yes' if r['safe'] else 'NO'} "
                     f"| {usage} |{start}")
    mean = results["mean"]
    lines.append(f"| mean | | | | {mean['normalized_reward']:.3f} | {mean['normalized_cost']:.3f} | "
                 f"{'yes' if mean['safe'] else 'NO'} | |" + (" | |" if predicts else ""))
    return "\n".join(lines)
