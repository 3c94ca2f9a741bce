"""What Ray Tune costs: N small CAPS trials as a Tune sweep vs the same trials back to back in one process
with ``rllib_caps.train`` (build_config + train + checkpoint), in the same run and Ray instance.

    .venv/bin/python benchmarks/bench_tune_overhead.py --data-root datasets --trials 4 --repetitions 3

Rows: the direct baseline; Tune with one trial at a time (its per-trial overhead: result logging, checkpoints,
building the trial's algorithm in a reused actor); Tune packing trials onto the CPUs (what a sweep gets); and both
again with ``--fresh-actors`` (a new actor process per trial, with its imports: the sweep's default before actor
reuse). Prints one table with wall time and CPU seconds (this process and every process under it: Ray's raylet,
workers and trial actors, so the figure holds up on a shared machine where wall time does not).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rllib_caps.sweeps.options import SweepOptions
from rllib_caps.sweeps.runner import run_sweep
from rllib_caps.sweeps.trials import dataset_dir
from rllib_caps.utils.atomic import atomic_directory


def _tree_cpu_seconds() -> dict[int, float]:
    """pid -> own user + system CPU seconds, for this process and all its descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # exited meanwhile
                continue
            cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in cpu:
            tree[pid] = cpu[pid]
        todo += children.get(pid, [])
    return tree


class CpuMeter:
    """CPU seconds used by this process tree (driver, raylet, Ray workers, trial actors) while active. Sampled
    every ``interval`` s, because Ray reaps exited workers without adding their time to its own."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.seconds = 0.0

    def __enter__(self) -> CpuMeter:
        self._start = _tree_cpu_seconds()
        self._last = dict(self._start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._last.update(_tree_cpu_seconds())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._last.update(_tree_cpu_seconds())
        self.seconds = sum(t - self._start.get(pid, 0.0) for pid, t in self._last.items())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", default="datasets", help="data root with ROOT/<task>/ (default: datasets)")
    p.add_argument("--task", default="BallCircle")
    p.add_argument("--trials", type=int, default=4, help="trials per run: seeds 0..N-1 (default 4)")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--steps", type=int, default=400, help="gradient steps per trial (default 400)")
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--eval-episodes", type=int, default=2, help="per threshold (default 2)")
    return p.parse_args(argv)


def training(args: argparse.Namespace) -> dict:
    return {"steps": args.steps, "updates_per_iteration": max(1, args.steps // 2), "hidden": args.hidden,
            "batch_size": args.batch_size, "eval_episodes": args.eval_episodes}


def run_direct(args: argparse.Namespace, out: Path) -> None:
    """The trials one after another in this process, each built, trained, evaluated and checkpointed, with one
    torch thread like a 1-CPU Tune trial (Ray sets OMP_NUM_THREADS to an actor's CPUs)."""
    import torch

    from rllib_caps.envs.tasks import get_task

    torch.set_num_threads(1)
    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.train import train

    settings = training(args)
    steps = settings.pop("steps")
    data = dataset_dir(args.data_root, get_task(args.task))
    for seed in range(args.trials):
        config = build_config("caps", args.task, data, steps=steps, heads=2, seed=seed, **settings)
        algo, _ = train(config, progress=False)
        with atomic_directory(out / f"seed{seed}", command="benchmarks.bench_tune_overhead") as tmp:
            algo.save_to_path(tmp)
        algo.stop()


def run_tune(args: argparse.Namespace, out: Path, concurrent: int | None, reuse_actors: bool) -> None:
    run_sweep(SweepOptions(tasks=args.task, seeds=list(range(args.trials)), heads=[2], data_root=args.data_root,
                           storage=str(out), name="sweep", training=training(args), max_concurrent=concurrent,
                           cpus_per_trial=1.0, checkpoint_every=1000, reuse_actors=reuse_actors))


def main(argv: list[str] | None = None) -> int:
    import logging

    import ray
    import torch

    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cpus = os.cpu_count() or 1
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    packed = f"packed ({min(cpus, args.trials)} at a time)"
    runners: dict[str, Callable[[Path], None]] = {
        "direct: rllib_caps.train, back to back (1 torch thread)": lambda out: run_direct(args, out),
        "Tune, 1 trial at a time": lambda out: run_tune(args, out, 1, True),
        f"Tune, {packed}": lambda out: run_tune(args, out, None, True),
        "Tune, 1 trial at a time, --fresh-actors": lambda out: run_tune(args, out, 1, False),
        f"Tune, {packed}, --fresh-actors": lambda out: run_tune(args, out, None, False),
    }
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in runners}
    cpu: dict[str, list[float]] = {name: [] for name in runners}
    for rep in range(args.repetitions):
        order = list(runners) if rep % 2 == 0 else list(reversed(runners))  # alternate against drift
        for name in order:
            with tempfile.TemporaryDirectory(prefix="bench_tune_") as tmp, CpuMeter() as meter:
                start = time.perf_counter()
                runners[name](Path(tmp))
                times[name].append(time.perf_counter() - start)
            cpu[name].append(meter.seconds)
            print(f"  repetition {rep + 1}: {name}: {times[name][-1]:.1f} s wall, {cpu[name][-1]:.1f} CPU s",
                  file=sys.stderr, flush=True)
    ray.shutdown()

    baseline = statistics.median(times[next(iter(runners))])
    cpu_baseline = statistics.median(cpu[next(iter(runners))])
    print(f"\nTune overhead: {args.trials} CAPS trials ({args.task}, K=2, {args.steps} gradient steps, hidden "
          f"{args.hidden}, batch {args.batch_size}, {args.eval_episodes} evaluation episodes x 3 thresholds, "
          "checkpoint at the end)")
    print(f"machine: {platform.system()} {platform.machine()}, {cpus} CPUs, load average {load:.1f} at start "
          f"-> {os.getloadavg()[0]:.1f} at end; Python {platform.python_version()}, Ray {ray.__version__}, "
          f"torch {torch.__version__}, 1 torch thread per trial")
    print(f"repetitions: {args.repetitions} (order alternated); time for the whole set of trials\n")
    print("| runner | wall min s | wall median s | wall max s | wall median / direct | CPU median s | "
          "CPU median / direct |")
    print("|:---|---:|---:|---:|---:|---:|---:|")
    for name, values in times.items():
        median_cpu = statistics.median(cpu[name])
        print(f"| {name} | {min(values):.1f} | {statistics.median(values):.1f} | {max(values):.1f} | "
              f"{statistics.median(values) / baseline:.2f} | {median_cpu:.1f} | {median_cpu / cpu_baseline:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
