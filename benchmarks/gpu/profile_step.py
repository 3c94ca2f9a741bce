"""Where one gradient step's time goes on CUDA: ``torch.profiler`` over the plain PyTorch loop, the RLlib learner
eager and the RLlib learner with its step captured, with its forward pass and losses eager and compiled as one
program (``torch_compile_learner``; with separate and fused critics) (CAPS(IQL), hidden 512, batch 512, K = 2 by
default); with ``--population P``, over a population of P such trials, captured, with its
losses eager and compiled.

    python benchmarks/gpu/profile_step.py --steps 64 --json profile.json
    python benchmarks/gpu/profile_step.py --population 32 --precision high --json population.json

Per step it reports: wall time, the host's time in PyTorch ops (CPU self time of the profiled ops), CUDA kernels
launched, device syncs (cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize and device-to-host
copies), the GPU's busy time (the union of its kernels' intervals) and the idle share of the wall time; then the
kernels that took the most GPU time per step, and the share of matrix-product kernels (GEMMs).
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
from rllib_caps.bench import local_learner, rllib_learner_step, write_synthetic_dataset
from rllib_caps.core.population import Population
from rllib_caps.core.precision import MATMUL_PRECISIONS

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
GEMM_MARKS = ("gemm", "sm90_", "cutlass", "xmma", "cublas")  # names of cuBLAS/CUTLASS matrix-product kernels


def busy_time_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` (microseconds)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def top_kernels(kernels: list[Any], steps: int, top: int) -> tuple[float, list[tuple[str, float, float]]]:
    """The GEMM share of the kernels' GPU time, and the ``top`` kernel names by GPU time: (name, µs per step,
    launches per step)."""
    per_name: dict[str, list[float]] = {}
    for e in kernels:
        per_name.setdefault(e.name, []).append(e.time_range.end - e.time_range.start)
    total = sum(sum(v) for v in per_name.values()) or 1.0
    gemm = sum(sum(v) for name, v in per_name.items() if any(m in name.lower() for m in GEMM_MARKS))
    ranked = sorted(per_name.items(), key=lambda item: -sum(item[1]))[:top]
    return gemm / total, [(name[:90], sum(v) / steps, len(v) / steps) for name, v in ranked]


def profile_loop(step: Any, steps: int, top: int = 0) -> dict[str, Any]:
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
    gemm_share, ranked = top_kernels(kernels, steps, top)
    busy = busy_time_us([(e.time_range.start, e.time_range.end) for e in kernels]) / 1e6
    host_ops = sum(e.self_cpu_time_total for e in runtime if not e.name.startswith("cuda")) / 1e6
    return {"steps_per_s": steps / wall, "wall_ms_per_step": 1e3 * wall / steps,
            "host_op_ms_per_step": 1e3 * host_ops / steps, "kernels_per_step": len(kernels) / steps,
            "launch_calls_per_step": launches / steps, "graph_launches_per_step":
                sum(e.name == "cudaGraphLaunch" for e in runtime) / steps,
            "syncs_per_step": syncs / steps, "gpu_busy_ms_per_step": 1e3 * busy / steps,
            "gpu_idle_share": max(0.0, 1 - busy / wall), "gemm_share": gemm_share,
            **({"top_kernels": ranked} if top else {})}


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.algorithms.registry import build_config

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--steps", type=int, default=64, help="profiled gradient steps per loop")
    p.add_argument("--precision", default="highest", choices=MATMUL_PRECISIONS)
    p.add_argument("--population", type=int, metavar="P",
                   help="profile a population of P trials (captured; losses eager and compiled) instead")
    p.add_argument("--top", type=int, default=8, help="list this many kernels by GPU time per loop")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2)
        def config(captured: bool, seed: int = 0, compiled: bool = False, fused: bool = False) -> Any:
            config = build_config("caps", "BallCircle", data, steps=args.steps, heads=args.heads,
                                  hidden=[args.hidden] * 2, batch_size=args.batch, eval_episodes=0, seed=seed,
                                  captured_step=captured, matmul_precision=args.precision, num_gpus_per_learner=1,
                                  compile=compiled, fused_critics=fused)
            config.validate()
            return config

        if args.population:
            loops = {f"population {args.population}{' compiled' if compiled else ''}{' fused' if fused else ''}":
                     lambda compiled=compiled, fused=fused: Population.of_learners(
                         [local_learner(config(True, seed, compiled, fused)) for seed in range(args.population)],
                         captured=True)
                     for compiled, fused in ((False, False), (True, False), (True, True))}
        else:
            loops = {"plain": lambda: PlainLoop(config(False), device="cuda"),
                     "rllib": lambda: rllib_learner_step(config(False)),
                     "captured": lambda: rllib_learner_step(config(True)),
                     "captured compiled": lambda: rllib_learner_step(config(True, compiled=True)),
                     "captured compiled fused": lambda: rllib_learner_step(config(True, compiled=True, fused=True))}
        for name, build in loops.items():
            rows[name] = profile_loop(build(), args.steps, args.top)
            torch.cuda.empty_cache()
    keys = [k for k in next(iter(rows.values())) if k != "top_kernels"]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CAPS(IQL) hidden {args.hidden}, batch "
          f"{args.batch}, K {args.heads}, precision {args.precision}, {args.steps} profiled steps")
    print("| loop | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.3g}" for k in keys) + " |")
    for name, row in rows.items():
        print(f"\n{name}: the kernels that took the most GPU time (µs per step, launches per step)")
        for kernel, us, launches in row.get("top_kernels", []):
            print(f"  {us:9.1f} µs  {launches:6.1f}  {kernel}")
    if args.json:
        args.json.write_text(json.dumps({"setup": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
