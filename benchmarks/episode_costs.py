"""Issue 43: how much one (seed, κ) safety verdict from 20 episodes can say. Rolls out a checkpoint on ``train``'s
evaluation episodes at one κ (``threshold_episodes``, as ``evaluate_policy`` runs them) and writes each episode's
cost with their mean, standard error and the 95 % interval of the mean in units of κ.

    .venv/bin/python benchmarks/episode_costs.py --checkpoint CKPT --threshold 20 --out C.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def cost_spread(costs: Sequence[float], threshold: float) -> dict[str, Any]:
    """The episodes' costs, their mean, sample standard deviation, standard error of the mean, the share of episodes
    that cost nothing, and the normal 95 % interval of the mean cost divided by κ (``threshold``)."""
    costs = np.asarray(costs, dtype=float)
    if costs.size < 2:
        raise ValueError(f"need at least 2 episodes for a spread, got {costs.size}")
    mean, std = float(costs.mean()), float(costs.std(ddof=1))
    sem = std / np.sqrt(costs.size)
    return {"threshold": threshold, "costs": costs.tolist(), "mean": mean, "std": std, "sem": float(sem),
            "zero_cost_share": float(np.mean(costs == 0)),
            "normalized_cost_ci95": [(mean - 1.96 * sem) / threshold, (mean + 1.96 * sem) / threshold]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint with a deployable policy")
    parser.add_argument("--threshold", type=float, required=True, help="the cost threshold κ")
    parser.add_argument("--episodes", type=int, default=20, help="episodes [20]")
    parser.add_argument("--out", type=Path, required=True, help="JSON to write")
    args = parser.parse_args(argv)

    import torch

    from rllib_caps.algorithms.registry import load_policy
    from rllib_caps.core.extension import module_extension
    from rllib_caps.core.rollout import episode_seed, evaluation_runners, runner_shares, threshold_episodes
    from rllib_caps.envs import make_env
    from rllib_caps.envs.tasks import get_task
    from rllib_caps.utils.atomic import atomic_file

    torch.set_num_threads(1)
    policy = load_policy(args.checkpoint)
    env, extension = make_env(get_task(policy.task)), module_extension(type(policy.module))
    shares = runner_shares(args.episodes, evaluation_runners(policy))
    outcomes = threshold_episodes(policy, env, args.threshold, shares, episode_seed(policy), extension)
    env.close()
    with atomic_file(args.out) as tmp:
        tmp.write_text(json.dumps(cost_spread([o.cost for o in outcomes], args.threshold), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
