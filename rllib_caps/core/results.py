"""Per-threshold results: one schema for RLlib evaluation and the Ray-free evaluator, one table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from rllib_caps.core.scoring import ThresholdResult, average_over_thresholds
from rllib_caps.envs.tasks import TaskSpec

THRESHOLD_COLUMNS = {f.name for f in fields(ThresholdResult)}  # every algorithm's results; the rest are extras
SCALE_KEY = "scale"  # how the written results' rewards are scored (``reward_scale``)


def results_dict(summaries: Sequence[ThresholdResult]) -> dict[str, Any]:
    """``{"thresholds": {"κ": {...}}, "mean": {...}}``: what ``evaluation/dsrl`` holds in RLlib results."""
    return {
        "thresholds": {f"{s.threshold:g}": s.to_dict() for s in summaries},
        "mean": average_over_thresholds(summaries),
    }


def reward_scale(task: TaskSpec | None) -> dict[str, Any]:
    """How a task's rewards are scored, for the results a command writes: ``normalised`` with the range and its source
    (``TaskSpec.range_source``) where its reward range is known, else ``raw``."""
    if task is None or not task.has_reward_range:
        return {"reward": "raw", "range_source": None}
    return {"reward": "normalised", "range_source": task.range_source,
            "reward_range": [task.min_reward, task.max_reward], "cost_range": [task.min_cost, task.max_cost]}


def labelled_results(results: Mapping[str, Any], task: TaskSpec | None) -> dict[str, Any]:
    """``results`` with how their rewards are scored (``reward_scale``) under ``"scale"``: what ``train`` and
    ``evaluate`` write (RLlib's metrics hold numbers only)."""
    return {**results, SCALE_KEY: reward_scale(task)}


def format_results_table(results: dict[str, Any], title: str = "") -> str:
    """A Markdown table of raw and normalised reward/cost per threshold, plus the average row; the extra results of
    the algorithm (e.g. CAPS's head usage) follow as one column each, a dict's values side by side. Without a reward
    range the normalised reward column says ``raw`` and the title says why."""
    rows = sorted(results["thresholds"].items(), key=lambda kv: float(kv[0]))
    extras = [key for key in rows[0][1] if key not in THRESHOLD_COLUMNS] if rows else []
    raw = "normalized_reward" not in results["mean"]
    scale = results.get(SCALE_KEY) or {}
    if title:
        title += (" (reward raw: the task has no reward range)" if raw else
                  f" (reward normalised by the {scale['range_source']} range)"
                  if scale.get("range_source") not in (None, "dsrl") else "")
    lines = [f"### {title}", ""] if title else []
    lines += ["| κ | episodes | reward | cost | norm. reward | norm. cost | safe |"
              + "".join(f" {key.replace('_', ' ')} |" for key in extras),
              "|---:|---:|---:|---:|---:|---:|:---:|" + "|".join(":---" for _ in extras) + ("|" if extras else "")]
    for key, r in rows:
        lines.append(f"| {key} | {int(r['episodes'])} | {r['reward']:.2f} | {r['cost']:.2f} | "
                     f"{'raw' if raw else format(r['normalized_reward'], '.3f')} | {r['normalized_cost']:.3f} | "
                     f"{'yes' if r['safe'] else 'NO'} |" + "".join(f" {_cell(r.get(extra))} |" for extra in extras))
    mean = results["mean"]
    mean_reward = f"{mean['reward']:.2f} | | raw" if raw else f"| | {mean['normalized_reward']:.3f}"
    lines.append(f"| mean | | {mean_reward} | {mean['normalized_cost']:.3f} | "
                 f"{'yes' if mean['safe'] else 'NO'} |" + " |" * len(extras))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    """An extra result as a table cell: a number to two decimals, a dict's numbers side by side in key order."""
    if isinstance(value, Mapping):
        return " ".join(f"{float(v):.2f}" for _, v in sorted(value.items(), key=lambda kv: float(kv[0])))
    return "" if value is None else f"{float(value):.2f}"
