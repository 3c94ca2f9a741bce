"""Where one gradient step's time goes on CUDA: ``torch.profiler`` over the plain PyTorch loop, the RLlib learner
eager and the RLlib learner with its step captured (CAPS(IQL), hidden 512, batch 512, K = 2 by default).

    python benchmarks/gpu/profile_step.py --steps 64 --json profile.json

Per step it reports: wall time, the host's time in PyTorch ops (CPU self time of the profiled ops), CUDA kernels
launched, device syncs (cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize and device-to-host
copies), the GPU's busy time (the union of its kernels' intervals) and the idle share of the wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from rllib_caps.algorithms.caps.plain_loop import PlainLoop
from rllib_caps.bench import rllib_learner_step, write_synthetic_dataset

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def busy_time_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` (microseconds)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def profile_loop(step: Any, steps: int) -> dict[str, float]:
    step(16)  # warm-up (a captured step records its graph here)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        begin = time.perf_counter()
        step(steps)
        torch.cuda.synchronize()
        wall = time.perf_counter() - begin
    events = prof.events()
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    runtime = [e for e in events if e.device_type == DeviceType.CPU]
    syncs = sum(e.name in SYNCS for e in runtime) + sum("DtoH" in e.name or "Device -> Host" in e.name
                                                        for e in kernels)
    launches = sum(e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC") for e in runtime)
    busy = busy_time_us([(e.time_range.start, e.time_range.end) for e in kernels]) / 1e6
    host_ops = sum(e.self_cpu_time_total for e in runtime if not e.name.startswith("cuda")) / 1e6
    return {"steps_per_s": steps / wall, "wall_ms_per_step": 1e3 * wall / steps,
            "host_op_ms_per_step": 1e3 * host_ops / steps, "kernels_per_step": len(kernels) / steps,
            "launch_calls_per_step": launches / steps, "graph_launches_per_step":
                sum(e.name == "cudaGraphLaunch" for e in runtime) / steps,
            "syncs_per_step": syncs / steps, "gpu_busy_ms_per_step": 1e3 * busy / steps,
            "gpu_idle_share": max(0.0, 1 - busy / wall)}


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.algorithms.registry import build_config

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--steps", type=int, default=64, help="profiled gradient steps per loop")
    p.add_argument("--precision", default="highest", choices=("highest", "high"))
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2)
        for name, captured in (("plain", False), ("rllib", False), ("captured", True)):
            config = build_config("caps", "BallCircle", data, steps=args.steps, heads=args.heads,
                                  hidden=[args.hidden] * 2, batch_size=args.batch, eval_episodes=0,
                                  captured_step=captured, matmul_precision=args.precision, num_gpus_per_learner=1)
            config.validate()
            step = PlainLoop(config, device="cuda") if name == "plain" else rllib_learner_step(config)
            rows[name] = profile_loop(step, args.steps)
    keys = list(rows["plain"])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CAPS(IQL) hidden {args.hidden}, batch "
          f"{args.batch}, K {args.heads}, precision {args.precision}, {args.steps} profiled steps")
    print("| loop | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.3g}" for k in keys) + " |")
    if args.json:
        args.json.write_text(json.dumps({"setup": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
