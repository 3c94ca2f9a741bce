"""How a DSRL-format dataset spans DSRL's reward–cost frontier: its card in figures, against the task's DSRL ranges.

A collected dataset is only useful for offline safe RL if it has good episodes near every cost limit (issue 43): this
reports, per threshold κ of the task, how many episodes cost at most κ, how many of those earn a reward inside DSRL's
reward range, and the normalised reward of the best of them (``rllib_caps.core.scoring.best_safe_episode``).

    python -m data_conversion.frontier --task CarCircle1 --h5 CarCircle1.hdf5 --json CarCircle1.summary.json

Episodes end at ``terminals | timeouts`` (DSRL's convention); a file without a final end flag counts its last rows as
one more episode, as the converter does.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from data_conversion.dsrl_format import DsrlReader, episode_totals
from rllib_caps.core.scoring import best_safe_episode
from rllib_caps.data.errors import DatasetError
from rllib_caps.envs.tasks import TaskSpec, get_task
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_file
from rllib_caps.utils.checks import check_output


def episode_returns(path: str | Path) -> dict[str, np.ndarray]:
    """Per episode of a DSRL HDF5 file: ``reward`` and ``cost`` returns (float64) and whether it ``terminated``."""
    with DsrlReader(path) as reader:
        rewards, costs = reader.read("rewards"), reader.read("costs")
        terminals, timeouts = reader.read("terminals"), reader.read("timeouts")
    ends = terminals | timeouts
    last_rows = np.flatnonzero(np.r_[ends[:-1], True])
    return {"reward": episode_totals(rewards, ends), "cost": episode_totals(costs, ends),
            "terminated": terminals[last_rows]}


def frontier(task: TaskSpec, reward: np.ndarray, cost: np.ndarray, terminated: np.ndarray) -> dict[str, Any]:
    """The card's figures from per-episode returns: ranges (min, median, max) against DSRL's, and per κ of the task
    the episodes at or below κ, those of them with a reward in DSRL's range, and the best one's (normalised) reward.
    Without a known reward range (a custom task) the DSRL columns are ``None``."""
    reward, cost = np.asarray(reward, dtype=np.float64), np.asarray(cost, dtype=np.float64)
    if reward.shape != cost.shape or reward.ndim != 1 or reward.size == 0:
        raise ValueError(f"need equal, non-empty 1-D reward and cost returns, got {reward.shape} and {cost.shape}")
    known = task.has_reward_range
    per_threshold = {}
    for kappa in task.thresholds:
        within = cost <= kappa
        in_range = within & (reward >= task.min_reward) if known else None
        per_threshold[f"{kappa:g}"] = {
            "episodes_at_or_below": int(within.sum()),
            "episodes_at_or_below_with_reward_in_dsrl_range": int(in_range.sum()) if known else None,
            "best_reward": float(reward[within].max()) if within.any() else None,
            "normalised_best": (best_safe_episode(reward, cost, kappa, task.min_reward, task.max_reward)
                                if known else None),
        }
    return {
        "task": task.name,
        "episodes": int(reward.size),
        "terminated_episodes": int(np.count_nonzero(terminated)),
        "reward_return": [float(np.min(reward)), float(np.median(reward)), float(np.max(reward))],
        "cost_return": [float(np.min(cost)), float(np.median(cost)), float(np.max(cost))],
        "dsrl_reward_range": [task.min_reward, task.max_reward] if known else None,
        "dsrl_cost_range": [task.min_cost, task.max_cost] if task.min_cost is not None else None,
        "thresholds": list(task.thresholds),
        "per_threshold": per_threshold,
    }


def render(card: dict[str, Any]) -> str:
    """The card as the Markdown table of ``datasets/sources/proxy_suites.md``."""

    def triple(values: list[float]) -> str:
        return f"{values[0]:.1f} to {values[2]:.1f} (median {values[1]:.1f})"

    def dsrl(values: list[float] | None) -> str:
        return "unknown" if values is None else f"{values[0]:.1f} to {values[1]:.1f}"

    rows = [("episodes", str(card["episodes"]), ""),
            ("reward return", triple(card["reward_return"]), dsrl(card["dsrl_reward_range"])),
            ("cost return", triple(card["cost_return"]), dsrl(card["dsrl_cost_range"]))]
    for kappa, at in card["per_threshold"].items():
        in_range = at["episodes_at_or_below_with_reward_in_dsrl_range"]
        count = f"{at['episodes_at_or_below']}" + ("" if in_range is None else f" ({in_range} in DSRL's range)")
        best = "none" if at["best_reward"] is None else f"{at['best_reward']:.1f}"
        if at["normalised_best"] is not None:
            best += f" (normalised {at['normalised_best']:.2f})"
        rows += [(f"episodes with cost ≤ {kappa}", count, ""), (f"best reward at cost ≤ {kappa}", best, "")]
    lines = [f"| {card['task']} | this dataset | DSRL |", "|---|---|---|"]
    return "\n".join([*lines, *(f"| {a} | {b} | {c} |" for a, b, c in rows)])


def _parser() -> argparse.ArgumentParser:
    from rllib_caps.task_file_flag import add_task_file_argument

    parser = argparse.ArgumentParser(
        prog="python -m data_conversion.frontier",
        description=__doc__.split("\n\n")[0],
        epilog="A bad file, task or output prints one line naming it and exits with code 2.",
    )
    parser.add_argument("--task", required=True, help="task short name or DSRL id, e.g. CarCircle1, or a --task-file's")
    add_task_file_argument(parser)
    parser.add_argument("--h5", type=Path, required=True, metavar="PATH", help="DSRL-format HDF5 file")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here (atomically)")
    parser.add_argument("--force", action="store_true", help="replace --json if it exists")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        task = get_task(args.task)
    except ValueError as err:
        print(f"error: --task: {err}", file=sys.stderr)
        return 2
    try:
        if args.json is not None:
            check_output(args.json, "--json", {"--h5": args.h5}, file=True)
        # the output is claimed (an existing one refused without --force) before the file is read
        with atomic_file(args.json, force=args.force) if args.json is not None else nullcontext() as tmp:
            card = {**frontier(task, **episode_returns(args.h5)), "file": str(args.h5)}
            if tmp is not None:
                tmp.write_text(json.dumps(card, indent=1) + "\n")
    except (DatasetError, OutputExistsError, OutputNotWritableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render(card))
    return 0


if __name__ == "__main__":
    sys.exit(main())
