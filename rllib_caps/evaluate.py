"""Evaluate a CAPS checkpoint at any thresholds without retraining (and without Ray).

    python -m rllib_caps.evaluate --checkpoint CKPT --thresholds 5 10 20 40 --episodes 20
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from rllib_caps.core.results import format_results_table
from rllib_caps.core.rollout import episode_seed, evaluate_policy
from rllib_caps.envs import get_task

logger = logging.getLogger("rllib_caps.evaluate")


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
        policy.reset(threshold=0.0, fixed_head=args.head)
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
