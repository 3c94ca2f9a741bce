"""How many CAPS learners one GPU sustains: N processes, each training the RLlib learner at the paper's sizes
(hidden 512, batch 512) on the same GPU at once, for N = 1, 2, 4, ...; prints each N's per-process steps/s and
its ratio to N = 1 (a trial's slowdown), and the aggregate steps/s.

    python benchmarks/bench_gpu_concurrency.py --concurrency 1 2 4 8 --heads 2 --steps 2000

The largest N whose ratio stays >= 0.8 is how many trials (``--gpus-per-trial 1/N``) a GPU takes before each
trial slows by more than 20%. Learner only: a sweep's trials also spend CPU time on evaluation rollouts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from rllib_caps.bench import rllib_learner_step, write_synthetic_dataset


def _worker(data: str, hidden: int, batch: int, heads: int, steps: int, fused: bool, start, queue) -> None:
    from rllib_caps.algorithms.registry import build_config

    torch.set_num_threads(1)
    config = build_config("caps", "BallCircle", data, steps=steps, heads=heads, hidden=[hidden] * 2,
                          batch_size=batch, eval_episodes=0, fused_critics=fused, num_gpus_per_learner=1)
    config.validate()
    step = rllib_learner_step(config)
    step(64)  # warm-up: CUDA context, kernels, allocator
    torch.cuda.synchronize()
    start.wait()  # every process starts measuring together
    begin = time.perf_counter()
    step(steps)
    torch.cuda.synchronize()
    queue.put(steps / (time.perf_counter() - begin))


def run(args: argparse.Namespace, data: Path) -> list[dict]:
    ctx = mp.get_context("spawn")
    rows = []
    for n in args.concurrency:
        start, queue = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(str(data), args.hidden, args.batch, args.heads, args.steps,
                                                    args.fused, start, queue)) for _ in range(n)]
        for p in procs:
            p.start()
        speeds = [queue.get() for _ in procs]
        for p in procs:
            p.join()
        rows.append({"processes": n, "per_process_median": statistics.median(speeds), "per_process_min": min(speeds),
                     "aggregate": sum(speeds)})
        print(f"N={n}: per-process steps/s median {rows[-1]['per_process_median']:.1f} (min {min(speeds):.1f}), "
              f"aggregate {sum(speeds):.1f}", flush=True)
    for row in rows:
        row["ratio_to_one"] = row["per_process_median"] / rows[0]["per_process_median"]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8], help="numbers of processes")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--steps", type=int, default=2000, help="measured gradient steps per process")
    p.add_argument("--fused", action="store_true", help="fused critics (rllib_caps.core.nets)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; this benchmark measures GPU sharing", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args, write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2))
    setup = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **vars(args)}
    if args.json:
        print(json.dumps({"setup": setup, "rows": rows}, indent=1))
    else:
        print(setup)
        print("| processes | per-process steps/s (median) | ÷ one process | aggregate steps/s |")
        print("|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['processes']} | {r['per_process_median']:.1f} | {r['ratio_to_one']:.3f} | "
                  f"{r['aggregate']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
