"""Evaluate a CAPS checkpoint at any thresholds without retraining (and without Ray).

    python -m rllib_caps.evaluate --checkpoint CKPT --thresholds 5 10 20 40 --episodes 20
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from rllib_caps.envs import make_env
from rllib_caps.results import format_results_table, results_dict
from rllib_caps.scoring import EpisodeOutcome, summarize
from rllib_caps.tasks import TaskSpec, get_task

logger = logging.getLogger("rllib_caps.evaluate")


def run_episode(policy: Any, env: Any, threshold: float, seed: int, fixed_head: int | None = None) -> EpisodeOutcome:
    """One episode of the switching policy (or of ``fixed_head`` alone) with budget κ = ``threshold``,
    from ``reset(seed=seed)``."""
    policy.reset(threshold=threshold, fixed_head=fixed_head)
    obs, _ = env.reset(seed=seed)
    reward, cost, step_cost, length = 0.0, 0.0, 0.0, 0
    counts = np.zeros(policy.num_heads, dtype=np.int64)
    done = False
    while not done:
        action = policy.act(obs, step_cost)
        counts[policy.last_heads[0]] += 1
        obs, r, terminated, truncated, info = env.step(action)
        step_cost = float(info["cost"])
        reward, cost, length = reward + float(r), cost + step_cost, length + 1
        done = terminated or truncated
    return EpisodeOutcome(reward=reward, cost=cost, length=length, head_counts=tuple(int(c) for c in counts))


def evaluate_policy(policy: Any, task: TaskSpec, thresholds: Sequence[float], episodes: int, *, seed: int = 0,
                    fixed_head: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Every threshold sees the same episode seeds ``seed, seed+1, …``; returns the results schema."""
    env = make_env(task)
    summaries = []
    with tqdm(total=len(thresholds) * episodes, desc=f"evaluate {task.name}", unit="ep",
              disable=not progress) as bar:
        for threshold in thresholds:
            outcomes = []
            for i in range(episodes):
                outcomes.append(run_episode(policy, env, threshold, seed + i, fixed_head))
                bar.update(1)
            summaries.append(summarize(outcomes, threshold, task.min_reward, task.max_reward))
    env.close()
    return results_dict(summaries)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.evaluate",
        description="Roll out a trained CAPS policy on the real simulator at any cost thresholds (no retraining, "
                    "no Ray) and print raw and DSRL-normalised reward/cost per threshold.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint directory written by rllib_caps.train")
    p.add_argument("--task", help="task name (default: the one the checkpoint was trained on)")
    p.add_argument("--thresholds", type=float, nargs="+", help="cost thresholds κ (default: the task's three)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per threshold (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    p.add_argument("--head", type=int, help="act with this head alone instead of switching (ablation)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.policy import CAPSPolicy

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        policy = CAPSPolicy.from_checkpoint(args.checkpoint)
        if not (args.task or policy.task):
            raise ValueError(f"{args.checkpoint}: trained on a custom env; pass --task")
        task = get_task(args.task or policy.task)
        policy.reset(threshold=0.0, fixed_head=args.head)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.episodes < 1:
        print("error: --episodes must be >= 1", file=sys.stderr)
        return 2
    thresholds = args.thresholds or [float(k) for k in task.thresholds]
    results = evaluate_policy(policy, task, thresholds, args.episodes, seed=args.seed, fixed_head=args.head)
    print(json.dumps(results, indent=2) if args.json else format_results_table(results, title=task.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
