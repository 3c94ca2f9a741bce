"""Benchmark: gradient steps/s of the CAPS RLlib learner vs the same networks and losses in a plain
PyTorch loop, measured in one run. ``python -m rllib_caps.bench [--hidden 512] [--batch 512] [--heads 2 8]``.

Both sides use the same ``DefaultCAPSTorchRLModule``, the same ``caps_iql_losses``, one Adam per
network group and a Polyak step after every update; only the surrounding machinery differs
(RLlib's ``Learner.update`` with its batch conversion, metrics and hooks vs a bare loop).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from rllib_caps.algorithms.caps.losses import caps_iql_losses
from rllib_caps.core.losses import polyak_update
from rllib_caps.data import TransitionDataset, schema


def write_synthetic_dataset(directory: Path, rows: int, obs_dim: int, act_dim: int, seed: int = 0) -> Path:
    """A Parquet dataset in the converter's schema with random transitions (speed only, not learning)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(rows, obs_dim))
    table = schema.arrow_table({
        schema.OBS: obs, schema.ACTIONS: rng.uniform(-1, 1, (rows, act_dim)), schema.REWARDS: rng.normal(size=rows),
        schema.COSTS: rng.random(rows) < 0.1, schema.NEXT_OBS: obs, schema.TERMINATEDS: np.zeros(rows, bool),
        schema.TRUNCATEDS: np.arange(rows) % 200 == 199, schema.EPS_ID: np.arange(rows) // 200,
        schema.T: np.arange(rows) % 200,
    })
    schema.write_parquet_parts([table], directory / schema.DATA_DIR, part_rows=rows)
    return directory


def rllib_learner_step(config) -> Callable[[int], None]:
    """``n`` gradient steps through ``OfflineSafeLearner.update_from_dataset`` (a local learner, no Ray actors)."""
    spaces = {"__env__": (config.observation_space, config.action_space),
              "default_policy": (config.observation_space, config.action_space)}
    learner_group = config.build_learner_group(
        rl_module_spec=config.get_multi_rl_module_spec(spaces=spaces, inference_only=False))
    learner = learner_group._learner
    return lambda n: learner.update_from_dataset(num_updates=n)


def plain_torch_step(config) -> Callable[[int], None]:
    """The same module, losses, optimisers and Polyak step in a bare PyTorch loop."""
    module = config.get_rl_module_spec().build()
    module.make_target_networks()
    dataset = TransitionDataset.from_parquet(config.input_)
    generator = torch.Generator().manual_seed(0)
    nets = {"actor": (module.actor, config.actor_lr), "qr": (module.qr, config.critic_lr),
            "qc": (module.qc, config.critic_lr), "vr": (module.vr, config.value_lr), "vc": (module.vc, config.value_lr)}
    optimizers = [torch.optim.Adam(net.parameters(), lr=lr) for net, lr in nets.values()]
    settings = config.loss_settings()

    def run(n: int) -> None:
        for _ in range(n):
            batch = dataset.sample(config.train_batch_size_per_learner, generator)
            losses = caps_iql_losses(module.forward_train(batch), batch, settings)
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            for optimizer in optimizers:
                optimizer.step()
            for online, target in module.get_target_network_pairs():
                polyak_update(online, target, config.tau)

    return run


def measure(step: Callable[[int], None], steps: int) -> float:
    start = time.perf_counter()
    step(steps)
    return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.algorithms.registry import build_config

    p = argparse.ArgumentParser(prog="python -m rllib_caps.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--heads", type=int, nargs="+", default=[2, 8])
    p.add_argument("--steps", type=int, default=30, help="gradient steps per measurement")
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2)
        for heads in args.heads:
            config = build_config("caps", "BallCircle", data, steps=args.steps, heads=heads, hidden=[args.hidden] * 2,
                                  batch_size=args.batch, eval_episodes=0)
            config.validate()
            runners = {"rllib": rllib_learner_step(config), "plain": plain_torch_step(config)}
            speeds: dict[str, list[float]] = {name: [] for name in runners}
            for run in runners.values():
                run(args.warmup)
            for _ in range(args.repetitions):  # interleaved, so drift hits both sides alike
                for name, run in runners.items():
                    speeds[name].append(measure(run, args.steps))
            rows.append((heads, speeds))

    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print(f"setup: hidden {args.hidden}x2, batch {args.batch}, {args.steps} steps per measurement, "
          f"{args.repetitions} repetitions (interleaved), {args.warmup} warm-up steps")
    print("| K | loop | min steps/s | median | max | ratio rllib/plain (medians) |")
    print("|---:|:---|---:|---:|---:|---:|")
    for heads, speeds in rows:
        ratio = statistics.median(speeds["rllib"]) / statistics.median(speeds["plain"])
        for name, values in speeds.items():
            print(f"| {heads} | {name} | {min(values):.2f} | {statistics.median(values):.2f} | {max(values):.2f} | "
                  f"{ratio:.3f} |")
    print(f"peak RSS of the process: {peak_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
