"""Benchmark: DSRL HDF5 -> Parquet conversion speed and peak memory on an AntCircle-sized file.

Generates a synthetic 2.9 M-row DSRL file once (obs 34, act 8, 500-step episodes, as AntCircle),
then converts it `--reps` times, each in a fresh subprocess so the peak RSS is the converter's own.
Baseline, measured in the same run: dsrl's ``OfflineEnv.get_dataset`` loading the same file into
memory (what OSRL-style code does before training).

    python -m benchmarks.bench_conversion [--rows 2900000] [--reps 3] [--workdir /tmp/rllib-caps-bench]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from data_conversion.dsrl_format import READ_CHUNK_ROWS, DsrlFormatError, DsrlReader, DsrlWriter

TASK = "AntCircle"
OBS_DIM, ACT_DIM, EPISODE_STEPS = 34, 8, 500


def generate(path: Path, rows: int, seed: int = 0, obs_dim: int = OBS_DIM, act_dim: int = ACT_DIM) -> None:
    """Write a synthetic DSRL file of `rows` rows in chunks, unless a matching one is already there."""
    with contextlib.suppress(DsrlFormatError), DsrlReader(path) as reader:
        if (reader.rows, reader.obs_dim, reader.act_dim) == (rows, obs_dim, act_dim):
            return
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with DsrlWriter(path, obs_dim, act_dim) as writer:
        for start in range(0, rows, READ_CHUNK_ROWS):
            n = min(READ_CHUNK_ROWS, rows - start)
            step = np.arange(start, start + n) % EPISODE_STEPS
            writer.append(
                {
                    "observations": rng.standard_normal((n, obs_dim), np.float32),
                    "next_observations": rng.standard_normal((n, obs_dim), np.float32),
                    "actions": rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
                    "rewards": rng.standard_normal(n, np.float32),
                    "costs": (rng.random(n) < 0.1).astype(np.float32),
                    "terminals": np.zeros(n, bool),
                    "timeouts": step == EPISODE_STEPS - 1,
                }
            )


def _child(kind: str, h5: Path, out: Path) -> None:
    """Run one measured job in this (fresh) process and print its figures as JSON."""
    start = time.perf_counter()
    if kind == "convert":
        from data_conversion.dsrl_to_parquet import convert

        rows = convert(TASK, h5, out, force=True).rows
    else:
        import gymnasium as gym

        with contextlib.redirect_stderr(io.StringIO()):  # dsrl's simulator-import warning and tqdm bar
            from dsrl.offline_env import OfflineEnv

            class Env(OfflineEnv):
                observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
                action_space = gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32)

            rows = len(Env().get_dataset(h5path=str(h5))["rewards"])
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)  # whole process, imports included
    figures = {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "rows": rows}
    print(json.dumps({**figures, "peak_rss_mib": usage.ru_maxrss / 1024}))  # ru_maxrss is in KiB on Linux


def measure(kind: str, h5: Path, out: Path) -> dict[str, float]:
    """One run of `kind` in a subprocess; its wall time, rows and peak RSS."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_conversion", "--child", kind, "--h5", str(h5), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, Python {platform.python_version()}, load {load}"


def _span(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_conversion", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_900_000, help="rows of the synthetic file")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each measurement")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rllib-caps-bench"), help="file cache and output")
    parser.add_argument("--child", choices=("convert", "dsrl_load"), help=argparse.SUPPRESS)
    parser.add_argument("--h5", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.h5, args.out)
        return

    h5 = args.workdir / f"synthetic-{TASK}-{args.rows}.hdf5"
    start = time.perf_counter()
    generate(h5, args.rows)
    print(f"synthetic file {h5} ({h5.stat().st_size / 2**20:.0f} MiB) ready in {time.perf_counter() - start:.0f} s")
    results: dict[str, list[dict[str, float]]] = {"dsrl get_dataset (baseline)": [], "convert to Parquet": []}
    for _ in range(args.reps):  # interleaved, so background load hits both alike
        results["dsrl get_dataset (baseline)"].append(measure("dsrl_load", h5, args.workdir / "out"))
        results["convert to Parquet"].append(measure("convert", h5, args.workdir / "out"))

    print(
        f"\nsetup:   {args.rows} rows, obs {OBS_DIM}, act {ACT_DIM}, {EPISODE_STEPS}-step episodes, gzip HDF5 "
        f"({TASK}-sized); each run in a fresh subprocess"
    )
    print(f"machine: {machine()}")
    print(f"reps:    {args.reps}; figures are min / median / max\n")
    header = f"{'job':<28} {'wall s':>22} {'CPU s':>22} {'rows/s (M, wall)':>22} {'peak RSS MiB':>22}"
    print(header + "\n" + "-" * len(header))
    for job, runs in results.items():
        cells = [
            _span([r["seconds"] for r in runs], ".1f"),
            _span([r["cpu_seconds"] for r in runs], ".1f"),
            _span([r["rows"] / r["seconds"] / 1e6 for r in runs], ".3f"),
            _span([r["peak_rss_mib"] for r in runs], ".0f"),
        ]
        print(f"{job:<28} " + " ".join(f"{cell:>22}" for cell in cells))
    base, conv = results.values()
    ratios = {
        key: statistics.median(r[key] for r in conv) / statistics.median(r[key] for r in base)
        for key in ("seconds", "cpu_seconds", "peak_rss_mib")
    }
    print(
        f"\nconvert / baseline (medians): wall x{ratios['seconds']:.2f}, CPU x{ratios['cpu_seconds']:.2f}, "
        f"peak RSS x{ratios['peak_rss_mib']:.2f}"
    )


if __name__ == "__main__":
    main()
