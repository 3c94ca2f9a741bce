"""Evaluation's cost per environment step, per suite: a CAPS policy (untrained, at the paper's size: hidden 512,
K = 2) acting through ``CAPSPolicy`` in one task of each suite, one thread, on this machine's CPU. The figures feed
the evaluation part of ``python -m rllib_caps.bench --project-grid --eval-costs FILE`` (a GPU machine has no
simulators to measure them on).

    python benchmarks/bench_eval_rollouts.py --out benchmarks/eval_rollouts.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from rllib_caps import CAPSPolicy
from rllib_caps.algorithms.registry import build_config
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import get_task
from rllib_caps.utils.atomic import atomic_file

SUITE_TASKS = {"bullet": "BallCircle", "safetygym": "PointGoal1", "velocity": "AntVelocity", "metadrive": "easysparse"}


def ms_per_step(task: str, steps: int, data: Path) -> float:
    """Wall milliseconds per step of ``steps`` steps (episodes restarted as needed) of ``task``."""
    spec = get_task(task)
    config = build_config("caps", spec.name, data, heads=2, hidden=[512, 512], eval_episodes=0)
    config.observation_space = config.action_space = None  # the task's own spaces, not the dataset's task
    config.validate()
    policy, env = CAPSPolicy(config.get_rl_module_spec().build()), make_env(spec.name)
    policy.reset(threshold=float(spec.thresholds[1]))
    obs, _ = env.reset(seed=0)
    cost, begin = 0.0, time.perf_counter()
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(policy.act(obs, cost))
        cost = info["cost"]
        if terminated or truncated:
            policy.reset(threshold=float(spec.thresholds[1]))
            (obs, _), cost = env.reset(), 0.0
    return 1e3 * (time.perf_counter() - begin) / steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="environment steps timed per suite")
    p.add_argument("--data", type=Path, default=Path("datasets/BallCircle"), help="any converted dataset (its "
                   "path only configures the module)")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    costs = {suite: ms_per_step(task, args.steps, args.data) for suite, task in SUITE_TASKS.items()}
    result = {"ms_per_step": costs, "tasks": SUITE_TASKS, "steps": args.steps,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "load_average": os.getloadavg(),
              "torch": torch.__version__}
    for suite, ms in costs.items():
        print(f"{suite} ({SUITE_TASKS[suite]}): {ms:.2f} ms per step")
    if args.out:
        with atomic_file(args.out) as tmp:
            tmp.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
