"""Benchmark: `python -m data_conversion.fetch --source DIR` on several synthetic tasks, one at a time
(``--jobs 1``) against in parallel (as many as Ray's CPUs and memory allow), and the peak memory of one
conversion of the largest task (AntCircle, 2.9 M rows).

Synthetic DSRL files (random values, each task's real observation and action sizes, 500-step episodes) are
written once under DSRL's file names. Each fetch run is a fresh subprocess that starts its own local Ray; its
peak RSS is the largest sum over the whole process tree (driver, Ray's services and workers), sampled every
0.2 s.

    python -m benchmarks.bench_fetch [--tasks AntRun,DroneCircle,DroneRun,CarCircle] [--rows 500000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from benchmarks.bench_conversion import generate, machine, measure
from data_conversion.fetch import conversion_memory
from rllib_caps.envs.compat.dsrl import dataset_file_name
from rllib_caps.envs.tasks import get_task, select_tasks


def tree_rss(root: psutil.Process) -> int:
    """Resident bytes of ``root`` and all its descendants."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_fetch(source: Path, out: Path, tasks: str, jobs: int | None) -> tuple[float, int, str]:
    """Wall seconds, peak process-tree RSS and the output table of one fetch run into an empty ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "data_conversion.fetch", "--tasks", tasks, "--source", str(source), "--out",
               str(out), *(["--jobs", str(jobs)] if jobs else [])]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(root))
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {proc.returncode}")
    return seconds, peak, proc.stdout.read()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="AntRun,DroneCircle,DroneRun,CarCircle", help="tasks to fetch")
    parser.add_argument("--rows", type=int, default=500_000, help="rows of each synthetic file")
    parser.add_argument("--largest-rows", type=int, default=2_900_000, help="rows of the AntCircle file (0: skip)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rllib-caps-bench-fetch"), help="files and output")
    args = parser.parse_args(argv)

    source = args.workdir / "dsrl"
    tasks = select_tasks(args.tasks)
    for task in tasks:
        generate(source / dataset_file_name(task.name), args.rows, obs_dim=task.obs_dim, act_dim=task.act_dim)
    size = sum((source / dataset_file_name(t.name)).stat().st_size for t in tasks) / 2**20
    print(f"{len(tasks)} synthetic files of {args.rows} rows ({size:.0f} MiB) in {source}")
    print(f"machine: {machine()}\n")
    for label, jobs in (("one at a time (--jobs 1)", 1), ("parallel", None)):
        seconds, peak, table = run_fetch(source, args.workdir / "out", args.tasks, jobs)
        print(f"{label:<26} wall {seconds:6.1f} s   peak RSS (process tree) {peak / 2**20:6.0f} MiB")
    print(f"\nlast table:\n{table}")
    if args.largest_rows:
        ant = get_task("AntCircle")
        h5 = args.workdir / "largest" / dataset_file_name(ant.name)
        generate(h5, args.largest_rows, obs_dim=ant.obs_dim, act_dim=ant.act_dim)
        figures = measure("convert", h5, args.workdir / "largest-out")
        reserved = conversion_memory(args.largest_rows, ant.obs_dim, ant.act_dim)
        print(f"largest task: AntCircle, {args.largest_rows} rows ({h5.stat().st_size / 2**20:.0f} MiB): one "
              f"conversion {figures['seconds']:.1f} s, peak RSS {figures['peak_rss_mib']:.0f} MiB; fetch reserves "
              f"{reserved / 2**20:.0f} MiB of Ray memory for it")


if __name__ == "__main__":
    main()
