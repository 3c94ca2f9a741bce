"""Per-threshold results: one schema for RLlib evaluation and the Ray-free evaluator, one table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from rllib_caps.core.scoring import ThresholdResult, average_over_thresholds

THRESHOLD_COLUMNS = {f.name for f in fields(ThresholdResult)}  # every algorithm's results; the rest are extras


def results_dict(summaries: Sequence[ThresholdResult]) -> dict[str, Any]:
    """``{"thresholds": {"κ": {...}}, "mean": {...}}``: what ``evaluation/dsrl`` holds in RLlib results."""
    return {
        "thresholds": {f"{s.threshold:g}": s.to_dict() for s in summaries},
        "mean": average_over_thresholds(summaries),
    }


def format_results_table(results: dict[str, Any], title: str = "") -> str:
    """A Markdown table of raw and normalised reward/cost per threshold, plus the average row; the extra results of
    the algorithm (e.g. CAPS's head usage) follow as one column each, a dict's values side by side."""
    rows = sorted(results["thresholds"].items(), key=lambda kv: float(kv[0]))
    extras = [key for key in rows[0][1] if key not in THRESHOLD_COLUMNS] if rows else []
    lines = [f"### {title}", ""] if title else []
    lines += ["| κ | episodes | reward | cost | norm. reward | norm. cost | safe |"
              + "".join(f" {key.replace('_', ' ')} |" for key in extras),
              "|---:|---:|---:|---:|---:|---:|:---:|" + "|".join(":---" for _ in extras) + ("|" if extras else "")]
    for key, r in rows:
        lines.append(f"| {key} | {int(r['episodes'])} | {r['reward']:.2f} | {r['cost']:.2f} | "
                     f"{r['normalized_reward']:.3f} | {r['normalized_cost']:.3f} | {'yes' if r['safe'] else 'NO'} |"
                     + "".join(f" {_cell(r.get(extra))} |" for extra in extras))
    mean = results["mean"]
    lines.append(f"| mean | | | | {mean['normalized_reward']:.3f} | {mean['normalized_cost']:.3f} | "
                 f"{'yes' if mean['safe'] else 'NO'} |" + " |" * len(extras))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    """An extra result as a table cell: a number to two decimals, a dict's numbers side by side in key order."""
    if isinstance(value, Mapping):
        return " ".join(f"{float(v):.2f}" for _, v in sorted(value.items(), key=lambda kv: float(kv[0])))
    return "" if value is None else f"{float(value):.2f}"
