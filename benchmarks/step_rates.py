"""Record each algorithm's gradient steps/s at its default sizes on this machine's CPU, one thread, by CPU time, into
``rllib_caps/sweeps/step_rates.json`` (``tune --dry-run``'s projection reads it; ``rllib_caps.sweeps.projection``).

    python -m benchmarks.step_rates --steps 20

The GPU figures in that file come from ``bench --device cuda --project-grid`` (docs/performance.md), the evaluation
figures from ``benchmarks/bench_eval_rollouts.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step_rates", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed gradient steps per algorithm (after 2 warm-up steps)")
    p.add_argument("--out", type=Path, default=Path("rllib_caps/sweeps/step_rates.json"))
    args = p.parse_args(argv)
    import torch

    from rllib_caps.algorithms.registry import ALGORITHMS, build_config, get_algorithm, trained_per_threshold
    from rllib_caps.bench import measure, rllib_learner_step, write_synthetic_dataset
    from rllib_caps.envs import get_task
    from rllib_caps.utils.atomic import atomic_file

    torch.set_num_threads(1)
    task = get_task("BallCircle")
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = write_synthetic_dataset(Path(tmp), 4000, task.obs_dim, task.act_dim)
        for name in ALGORITHMS:
            settings = {"cost_limit": 20} if trained_per_threshold(get_algorithm(name)) else {}
            config = build_config(name, task.name, data, eval_episodes=0, **settings)
            config.validate()
            step = rllib_learner_step(config)
            step(2)
            rates[name] = round(measure(step, args.steps, "cpu", clock="cpu"), 2)
            print(name, rates[name], "steps/s", flush=True)
    recorded = json.loads(args.out.read_text()) if args.out.is_file() else {}
    recorded["cpu"] = {"steps_per_s": rates, "per": "one trial on one CPU thread, each algorithm's default sizes",
                       "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or 'cpu'}",
                       "torch": torch.__version__, "date": datetime.date.today().isoformat(),
                       "command": f"python -m benchmarks.step_rates --steps {args.steps}"}
    with atomic_file(args.out) as tmp:
        tmp.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
