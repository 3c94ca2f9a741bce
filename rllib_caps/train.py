"""Train one CAPS run and save its checkpoint: ``python -m rllib_caps.train --task T --data DIR --out CKPT``."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from rllib_caps.checkpoints import OutputExistsError, atomic_directory
from rllib_caps.data import DatasetError, parquet_files
from rllib_caps.results import format_results_table
from rllib_caps.tasks import get_task

logger = logging.getLogger("rllib_caps.train")


def build_config(task: str, data: str | Path, *, steps: int = 100_000, heads: int = 2, seed: int = 0,
                 implementation: str = "paper",
                 hidden: list[int] | None = None, batch_size: int = 512, updates_per_iteration: int = 1000,
                 eval_episodes: int = 20, eval_runners: int = 0, thresholds: list[float] | None = None,
                 num_learners: int = 0, num_gpus_per_learner: float = 0.0, **training: Any):
    """A ``CAPSConfig`` for one task and dataset; ``training`` overrides any other CAPS setting.

    ``steps`` gradient steps make ``ceil(steps / updates_per_iteration)`` iterations; the last one ends
    with the evaluation at every threshold (``eval_episodes`` each, 0 = none) on ``eval_runners`` remote
    EnvRunners (0: in the driver process).
    """
    from rllib_caps.caps.caps import CAPSConfig

    spec = get_task(task)
    updates_per_iteration = min(updates_per_iteration, steps)
    iterations = math.ceil(steps / updates_per_iteration)
    return (
        CAPSConfig()
        .environment(spec.name)
        .offline_data(input_=str(parquet_files(data)))
        .training(num_heads=heads, implementation=implementation, hidden=hidden or [512, 512],
                  train_batch_size_per_learner=batch_size, updates_per_iteration=updates_per_iteration, **training)
        .learners(num_learners=num_learners, num_gpus_per_learner=num_gpus_per_learner)
        .evaluation(evaluation_interval=iterations if eval_episodes > 0 else None,
                    evaluation_num_env_runners=eval_runners,
                    evaluation_duration=max(eval_episodes, 1), evaluation_thresholds=thresholds)
        .debugging(seed=seed)
    )


def train(config: Any, steps: int, *, progress: bool = True) -> tuple[Any, dict[str, Any]]:
    """Builds the algorithm, runs ``steps`` gradient steps (whole iterations); returns it and the last result."""
    algo = config.build_algo()
    iterations = math.ceil(steps / config.updates_per_iteration)
    with tqdm(total=iterations * config.updates_per_iteration, desc=f"CAPS {config.env}", unit="step",
              disable=not progress) as bar:
        for _ in range(iterations):
            result = algo.train()
            losses = result["learners"]["default_policy"]
            bar.set_postfix(actor=f"{losses['actor_loss']:.3g}", qr=f"{losses['qr_loss']:.3g}",
                            qc=f"{losses['qc_loss']:.3g}")
            bar.update(config.updates_per_iteration)
    return algo, result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.train",
        description="Train CAPS(IQL) on one converted dataset, evaluate the switching policy at the task's "
                    "thresholds on the real simulator, and save an RLlib checkpoint.",
    )
    p.add_argument("--task", required=True, help="task short name or DSRL id, e.g. BallCircle")
    p.add_argument("--data", required=True, help="converted dataset directory (from data_conversion.dsrl_to_parquet)")
    p.add_argument("--out", required=True, help="checkpoint directory to write (atomically)")
    p.add_argument("--heads", type=int, default=2, help="number of policy heads K >= 2 (default 2)")
    p.add_argument("--steps", type=int, default=100_000, help="gradient steps (default 100000, the paper's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--implementation", choices=("paper", "code"), default="paper",
                   help="the paper's equations or the authors' code behaviour (see README)")
    p.add_argument("--hidden", type=int, nargs="+", default=[512, 512], help="hidden layer sizes")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--updates-per-iteration", type=int, default=1000, help="gradient steps per RLlib iteration")
    p.add_argument("--eval-episodes", type=int, default=20, help="episodes per threshold (0: skip evaluation)")
    p.add_argument("--eval-runners", type=int, default=0, help="remote evaluation EnvRunners (0: in-process)")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPUs for the learner (fractions allowed)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--json", action="store_true", help="print the evaluation results as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        spec = get_task(args.task)
        if Path(args.out).exists() and not args.force:
            raise OutputExistsError(f"{Path(args.out).resolve()}: already exists (use --force to overwrite)")
        config = build_config(spec.name, args.data, steps=args.steps, heads=args.heads, seed=args.seed,
                              implementation=args.implementation, hidden=args.hidden, batch_size=args.batch_size,
                              updates_per_iteration=args.updates_per_iteration,
                              eval_episodes=args.eval_episodes, eval_runners=args.eval_runners,
                              num_gpus_per_learner=args.num_gpus)
    except (ValueError, DatasetError, OutputExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import ray

    ray.init(num_cpus=None, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    logger.info("training CAPS on %s from %s: K=%d, %d steps, seed %d", spec.name, args.data, args.heads,
                args.steps, args.seed)
    if args.eval_episodes > 0:
        logger.info("the last iteration evaluates the switching policy at thresholds %s, %d episodes each",
                    config.thresholds, args.eval_episodes)
    algo, result = train(config, args.steps)
    with atomic_directory(args.out, force=args.force) as tmp:
        algo.save_to_path(tmp)
    algo.stop()
    logger.info("checkpoint saved to %s", Path(args.out).resolve())
    if args.eval_episodes > 0:
        results = result["evaluation"]["caps"]
        print(json.dumps(results, indent=2) if args.json else format_results_table(results, title=spec.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
