"""Evaluate a CAPS checkpoint at any thresholds without retraining (and without Ray).

    python -m rllib_caps.evaluate --checkpoint CKPT --thresholds 5 10 20 40 --episodes 20
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from rllib_caps.core.results import format_results_table
from rllib_caps.core.rollout import episode_seed, evaluate_policy
from rllib_caps.envs import TaskSpec, get_task

logger = logging.getLogger("rllib_caps.evaluate")


def check_task_fits(policy: Any, task: TaskSpec, checkpoint: str, *, allow_mismatch: bool) -> None:
    """The env must match the observations the bundle was trained on; another task of the same sizes needs
    ``--allow-task-mismatch`` (as in ``train``)."""
    trained_on = f"trained on {policy.task}" if policy.task else "trained on a custom env"
    if tuple(policy.module.observation_space.shape) != (task.obs_dim,):
        raise ValueError(f"{checkpoint}: {trained_on} with {policy.module.observation_space.shape[0]} observation "
                         f"values; --task {task.name} has {task.obs_dim}")
    if policy.task and policy.task != task.name and not allow_mismatch:
        raise ValueError(f"{checkpoint}: {trained_on}, not {task.name}; pass --allow-task-mismatch to evaluate it "
                         "there anyway")


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
    p.add_argument("--seed", type=int, help="seed of the first episode [1000 × the training seed, so checkpoints of "
                   "different seeds meet different start states]")
    p.add_argument("--head", type=int, help="act with this head alone instead of switching (ablation)")
    p.add_argument("--allow-task-mismatch", action="store_true",
                   help="evaluate on --task although the checkpoint was trained on another task of the same sizes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.algorithms.caps.policy import CAPSPolicy

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    bad = [k for k in args.thresholds or [] if not k >= 0]
    if args.episodes < 1 or bad:
        print(f"error: --thresholds must be >= 0 (got {bad})" if bad else "error: --episodes must be >= 1",
              file=sys.stderr)
        return 2
    try:
        policy = CAPSPolicy.from_checkpoint(args.checkpoint)
        if not (args.task or policy.task):
            raise ValueError(f"{args.checkpoint}: trained on a custom env; pass --task")
        task = get_task(args.task or policy.task)
        check_task_fits(policy, task, args.checkpoint, allow_mismatch=args.allow_task_mismatch)
        if args.head is not None and not 0 <= args.head < policy.num_heads:
            raise ValueError(f"--head {args.head}: the checkpoint has heads 0 to {policy.num_heads - 1}")
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    thresholds = args.thresholds or [float(k) for k in task.thresholds]
    seed = args.seed if args.seed is not None else episode_seed(policy)
    results = evaluate_policy(policy, task, thresholds, args.episodes, seed=seed, fixed_head=args.head)
    print(json.dumps(results, indent=2) if args.json else format_results_table(results, title=task.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
