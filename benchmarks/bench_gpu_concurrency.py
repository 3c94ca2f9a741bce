"""How many trials one GPU sustains: N processes, each training the RLlib learner of ``--algo`` (CAPS at the paper's
sizes, hidden 512, batch 512; another algorithm at its defaults), or with ``--members P`` a population of P, as a
packed Tune trial does, on the same GPU at once,
for N = 1, 2, 4, ...; prints each N's per-process member-steps/s and its ratio to N = 1 (a trial's slowdown), the
aggregate, and for N > 1 one process training a single population of all N × P members instead: fractional GPUs
against one larger population, measured in one call.

    python benchmarks/bench_gpu_concurrency.py --concurrency 1 2 4 8 --heads 2 --steps 2000
    python benchmarks/bench_gpu_concurrency.py --concurrency 1 3 9 --members 3 --steps 256 --figures FILE
    python benchmarks/bench_gpu_concurrency.py --algo cdt --concurrency 1 2 4 --steps 32

The largest N whose ratio stays >= 0.8 is how many trials (``--gpus-per-trial 1/N``) a GPU takes before each
trial slows by more than 20%. ``--figures`` adds CAPS's aggregates to a GPU figures file (``sharing``), which
``tune --dry-run --gpu-figures`` reads. An algorithm that forms no population (CDT) runs one learner per process and
shows no population. Learner only: a sweep's trials also spend CPU time on evaluation rollouts.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from rllib_caps.algorithms.registry import ALGORITHMS
from rllib_caps.bench import bench_config, local_learner, run_one_after_another, write_synthetic_dataset
from rllib_caps.sweeps.gpu_figures import write_figures
from rllib_caps.sweeps.packing import packable


def _worker(data: str, algo: str, sizes: dict, steps: int, members: int, start, queue) -> None:
    from rllib_caps.core.population import Population

    torch.set_num_threads(1)

    def learner(seed: int):
        config = bench_config(algo, Path(data), seed, steps=steps, device="cuda", **sizes)
        config.validate()
        return local_learner(config)

    if members > 1:
        step = Population.of_learners([learner(seed) for seed in range(members)], captured=True)
    else:
        one = learner(0)
        step = functools.partial(run_one_after_another, [one])
    step(64)  # warm-up: CUDA context, kernels, allocator, the captured graph
    torch.cuda.synchronize()
    start.wait()  # every process starts measuring together
    begin = time.perf_counter()
    step(steps)
    torch.cuda.synchronize()
    queue.put(members * steps / (time.perf_counter() - begin))


def _processes(args: argparse.Namespace, data: Path, n: int, members: int) -> list[float]:
    """Member-steps/s of each of ``n`` processes training ``members`` members each on the GPU at once."""
    ctx = mp.get_context("spawn")
    start, queue = ctx.Barrier(n), ctx.Queue()
    sizes = {"hidden": [args.hidden] * 2, "batch_size": args.batch, "heads": args.heads,
             "fused_critics": args.fused} if args.algo == "caps" else {}
    procs = [ctx.Process(target=_worker, args=(str(data), args.algo, sizes, args.steps, members, start, queue))
             for _ in range(n)]
    for p in procs:
        p.start()
    speeds = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return speeds


def run(args: argparse.Namespace, data: Path) -> list[dict]:
    rows = []
    for n in args.concurrency:
        speeds = _processes(args, data, n, args.members)
        merged = sum(speeds) if n == 1 else _processes(args, data, 1, n * args.members)[0] if packable(args.algo) \
            else None  # a learner's population_blocker (rllib_caps.core.population)
        rows.append({"processes": n, "members": args.members, "per_process_median": statistics.median(speeds),
                     "per_process_min": min(speeds), "aggregate": sum(speeds), "one_population": merged})
        together = "none (no population)" if merged is None else f"{merged:.1f}"
        print(f"N={n}: per-process member-steps/s median {rows[-1]['per_process_median']:.1f} (min {min(speeds):.1f}), "
              f"aggregate {sum(speeds):.1f}; one population of {n * args.members}: {together}", flush=True)
    for row in rows:
        row["ratio_to_one"] = row["per_process_median"] / rows[0]["per_process_median"]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=sorted(ALGORITHMS), default="caps",
                   help="the algorithm each process trains (CAPS at --hidden, --batch, --heads; others at defaults)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8], help="numbers of processes")
    p.add_argument("--hidden", type=int, default=512, help="CAPS's hidden width")
    p.add_argument("--batch", type=int, default=512, help="CAPS's batch size")
    p.add_argument("--heads", type=int, default=2, help="CAPS's number of heads K")
    p.add_argument("--steps", type=int, default=2000, help="measured gradient steps per process")
    p.add_argument("--fused", action="store_true", help="CAPS's fused critics (rllib_caps.core.nets)")
    p.add_argument("--members", type=int, default=1, help="members of each process's population (1: one learner)")
    p.add_argument("--figures", type=Path, metavar="JSON",
                   help="also write the aggregates into this GPU figures file (rllib_caps.sweeps.gpu_figures)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.members < 1 or min(args.concurrency) < 1:
        print("error: --members and --concurrency must be >= 1", file=sys.stderr)
        return 2
    if args.members > 1 and not packable(args.algo):
        print(f"error: --members {args.members}: {args.algo} forms no populations; leave --members out",
              file=sys.stderr)
        return 2
    if args.figures and args.algo != "caps":
        print("error: --figures records CAPS's sharing (the dry run's model); leave it out with --algo "
              f"{args.algo}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; this benchmark measures GPU sharing", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args, write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2))
    setup = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **vars(args)}
    if args.figures:
        write_figures(args.figures, {"device": setup["gpu"], "sharing": {
            "members": args.members, "command": " ".join(["python", *sys.argv]),
            "processes": {str(r["processes"]): round(r["aggregate"], 1) for r in rows},
            "one_population": {str(r["processes"] * args.members): round(r["one_population"], 1) for r in rows
                               if r["one_population"] is not None}}})
    if args.json:
        print(json.dumps({"setup": setup, "rows": rows}, indent=1))
    else:
        print(setup)
        print("| processes | members each | per-process member-steps/s (median) | ÷ one process | aggregate | "
              "one population of them all |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            together = "—" if r["one_population"] is None else f"{r['one_population']:.1f}"
            print(f"| {r['processes']} | {r['members']} | {r['per_process_median']:.1f} | {r['ratio_to_one']:.3f} | "
                  f"{r['aggregate']:.1f} | {together} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
