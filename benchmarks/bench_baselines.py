"""Gradient steps/s of the BC RLlib learner vs a plain PyTorch loop of the same module and loss (BC-All and
BC-Safe share the learner; BC-Safe only filters the data first), measured the way ``rllib_caps.bench``
measures CAPS: the same synthetic dataset, ``rllib_learner_step`` and ``measure``, interleaved repetitions.

    .venv/bin/python benchmarks/bench_baselines.py --hidden 256 --batch 512 --steps 128 --repetitions 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from rllib_caps.algorithms.bc.losses import bc_loss
from rllib_caps.bench import measure, rllib_learner_step, write_synthetic_dataset
from rllib_caps.core.optim import adam
from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import ACTIONS


class PlainBCLoop:
    """The BC module, loss and Adam of ``BCTorchLearner`` in a bare PyTorch loop, one fresh minibatch a step."""

    def __init__(self, config: Any, device: str = "cpu", seed: int = 0) -> None:
        self.config = config
        self.module = config.get_rl_module_spec().build().to(device)
        self.optimizer = adam(self.module.parameters(), config.actor_lr)
        self.dataset = TransitionDataset.from_parquet(config.input_, device=device)
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, n: int) -> None:
        for _ in range(n):
            batch = self.dataset.sample(self.config.train_batch_size_per_learner, self.generator)
            out = self.module.forward_train(batch)
            loss = bc_loss(self.config.policy, out["bc_means"], out["bc_log_std"], batch[ACTIONS])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, nargs="+", default=[256], help="hidden widths (2 layers)")
    p.add_argument("--policy", choices=("deterministic", "gaussian"), default="deterministic")
    p.add_argument("--batch", type=int, default=512, help="minibatch size (OSRL: 512)")
    p.add_argument("--steps", type=int, default=128, help="gradient steps per measurement")
    p.add_argument("--repetitions", type=int, default=5, help="interleaved measurements per loop")
    p.add_argument("--warmup", type=int, default=16, help="steps before measuring")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args(argv)
    if min(args.hidden + [args.batch, args.steps, args.repetitions]) < 1:
        print("error: --hidden/--batch/--steps/--repetitions must be >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    from rllib_caps.algorithms.registry import build_config

    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}, {args.steps} steps × {args.repetitions} repetitions, batch {args.batch}")
    print("| hidden | policy | RLlib steps/s (min / median / max) | plain steps/s (min / median / max) "
          "| RLlib ÷ plain |")
    print("|---:|:---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2)
        for hidden in args.hidden:
            config = build_config("bc-all", "BallCircle", data, steps=args.steps, hidden=[hidden] * 2,
                                  batch_size=args.batch, eval_episodes=0, policy=args.policy)
            config.validate()
            loops = {"rllib": rllib_learner_step(config), "plain": PlainBCLoop(config)}
            speeds: dict[str, list[float]] = {name: [] for name in loops}
            for loop in loops.values():
                loop(args.warmup)
            for _ in range(args.repetitions):
                for name, loop in loops.items():
                    speeds[name].append(measure(loop, args.steps, "cpu"))
            cells = [" / ".join(f"{f(v):.0f}" for f in (min, statistics.median, max)) for v in speeds.values()]
            ratio = statistics.median(speeds["rllib"]) / statistics.median(speeds["plain"])
            print(f"| {hidden} | {args.policy} | {cells[0]} | {cells[1]} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
