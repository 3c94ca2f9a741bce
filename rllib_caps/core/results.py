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
    lines = [f"### {title}", ""] if title else []
    lines += ["| κ | episodes | reward | cost | norm. reward | norm. cost | safe | head usage |",
              "|---:|---:|---:|---:|---:|---:|:---:|:---|"]
    for key, r in sorted(results["thresholds"].items(), key=lambda kv: float(kv[0])):
        usage = " ".join(f"{float(u):.2f}" for _, u in sorted(r["head_usage"].items(), key=lambda kv: int(kv[0])))
        lines.append(f"| {key} | {int(r['episodes'])} | {r['reward']:.2f} | {r['cost']:.2f} | "
                     f"{r['normalized_reward']:.3f} | {r['normalized_cost']:.3f} | {'yes' if r['safe'] else 'NO'} "
                     f"| {usage} |")
    mean = results["mean"]
    lines.append(f"| mean | | | | {mean['normalized_reward']:.3f} | {mean['normalized_cost']:.3f} | "
                 f"{'yes' if mean['safe'] else 'NO'} | |")
    return "\n".join(lines)
