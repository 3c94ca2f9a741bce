"""Training time of CDT (OSRL's sizes) against CAPS(IQL) (the paper's sizes), per gradient step and per short
trial, on the bundled BallCircle, in one process (interleaved, so drift on a shared machine hits both alike).
The paper reports 154 min for CDT and 24 min for CAPS(IQL), K = 2, on one A40 (HalfCheetah, 100k steps): a
ratio of 6.4.

    python -m benchmarks.bench_cdt --steps 2 --repetitions 3 --trial-steps 4

Per step: both RLlib learners (``update_from_dataset``, local, no Ray actors), CDT with embedding 128, 3 layers,
8 heads, L = 10, batch 2048; CAPS(IQL) with K = 2, hidden [512, 512], batch 512. Per trial: ``build_algo`` and
``train()`` for ``--trial-steps`` gradient steps with a 1-episode evaluation at each of the task's three κ, on a
local Ray, then the per-step median extrapolated to 100k steps plus that trial's fixed cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rllib_caps.bench import measure, rllib_learner_step

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
SETTINGS: dict[str, dict[str, Any]] = {  # each algorithm at its reference sizes
    "cdt": {},  # CDTConfig's defaults are OSRL's
    "caps": {"heads": 2, "hidden": [512, 512], "batch_size": 512},  # the paper's (docs/paper.md)
}
PAPER_MINUTES = {"cdt": 154.0, "caps": 24.0}  # one A40, HalfCheetah, 100k steps


def per_step_seconds(steps: int, repetitions: int) -> dict[str, list[float]]:
    """Seconds per gradient step of each learner, ``repetitions`` interleaved measurements of ``steps`` steps."""
    from rllib_caps.algorithms.registry import build_config

    loops = {}
    for algo, settings in SETTINGS.items():
        config = build_config(algo, "BallCircle", BUNDLED, steps=steps, eval_episodes=0, **settings)
        config.validate()
        loops[algo] = rllib_learner_step(config)
        loops[algo](1)  # warm-up
    seconds: dict[str, list[float]] = {algo: [] for algo in loops}
    for _ in range(repetitions):
        for algo, loop in loops.items():
            seconds[algo].append(1.0 / measure(loop, steps, "cpu"))
    return seconds


def trial_seconds(algo: str, steps: int) -> float:
    """Wall time of a short trial: build, ``steps`` gradient steps, evaluation at the three κ (1 episode each)."""
    from rllib_caps.algorithms.registry import build_config

    start = time.perf_counter()
    config = build_config(algo, "BallCircle", BUNDLED, steps=steps, updates_per_iteration=steps, eval_episodes=1,
                          **SETTINGS[algo])
    algo_instance = config.build_algo()
    try:
        algo_instance.train()
    finally:
        algo_instance.stop()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2, help="gradient steps per measurement [2]")
    p.add_argument("--repetitions", type=int, default=3, help="interleaved measurements per learner [3]")
    p.add_argument("--trial-steps", type=int, default=4, help="gradient steps of the short trials (0: none) [4]")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads [1]")
    args = p.parse_args(argv)
    if min(args.steps, args.repetitions, args.threads) < 1 or args.trial_steps < 0:
        print("error: --steps/--repetitions/--threads must be >= 1, --trial-steps >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}, {args.steps} steps × {args.repetitions} repetitions")
    seconds = per_step_seconds(args.steps, args.repetitions)
    median = {algo: statistics.median(v) for algo, v in seconds.items()}
    print("| algorithm | s / step (min / median / max) | 100k steps (h) | paper (min, A40) |")
    print("|:---|---:|---:|---:|")
    for algo, values in seconds.items():
        cells = " / ".join(f"{f(values):.3f}" for f in (min, statistics.median, max))
        print(f"| {algo} | {cells} | {median[algo] * 100_000 / 3600:.1f} | {PAPER_MINUTES[algo]:.0f} |")
    print(f"\nper-step ratio CDT / CAPS(IQL): {median['cdt'] / median['caps']:.1f} "
          f"(paper, per trial: {PAPER_MINUTES['cdt'] / PAPER_MINUTES['caps']:.1f})")
    if args.trial_steps:
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            trials = {algo: trial_seconds(algo, args.trial_steps) for algo in SETTINGS}
        finally:
            ray.shutdown()
        fixed = {algo: trials[algo] - args.trial_steps * median[algo] for algo in trials}
        for algo, total in trials.items():
            print(f"short trial {algo}: {total:.1f} s for {args.trial_steps} steps (fixed part ≈ {fixed[algo]:.1f} s)")
        full = {algo: fixed[algo] + 100_000 * median[algo] for algo in trials}
        print(f"extrapolated 100k-step trial ratio CDT / CAPS(IQL): {full['cdt'] / full['caps']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
