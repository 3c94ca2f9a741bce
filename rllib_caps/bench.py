"""Benchmark: gradient steps/s of an algorithm's RLlib learner (default CAPS) vs the same networks and losses in a
plain PyTorch loop (its registry entry's ``reference_loop``), over a matrix of sizes, in one run (interleaved, so
drift on a shared machine hits both sides alike).

    python -m rllib_caps.bench                                   # hidden 64, 256, 512 x K 2, 8 on CPU, 1 thread
    python -m rllib_caps.bench --hidden 256 --heads 2 --device cuda --json
    python -m rllib_caps.bench --backbone sacbc                  # CAPS(SAC+BC) instead of CAPS(IQL)
    python -m rllib_caps.bench --clock cpu                       # CPU time, not wall time: for a shared machine

For CAPS both sides use the same ``DefaultCAPSTorchRLModule``, the same backbone losses, one Adam per network group
and a Polyak step after every gradient step (``algorithms/caps/plain_loop.py``); only the machinery around them
differs (RLlib's
``Learner.update`` with its batch handling, metrics and hooks, amortised over several steps per call, vs a
bare loop).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from rllib_caps.algorithms.registry import ALGORITHMS, DEFAULT_ALGORITHM
from rllib_caps.core.precision import DEFAULT_MATMUL_PRECISION, MATMUL_PRECISIONS
from rllib_caps.sweeps.options import MAX_MEMBERS

if TYPE_CHECKING:  # torch, Ray and pyarrow are imported where the work starts, not for --help
    import torch


def write_synthetic_dataset(directory: Path, rows: int, obs_dim: int, act_dim: int, seed: int = 0) -> Path:
    """A Parquet dataset in the converter's schema with random transitions (speed only, not learning)."""
    from rllib_caps.data import schema

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


def local_learner(config: Any) -> Any:
    """The algorithm's learner built in this process (a local learner group, no Ray actors) from a validated
    config."""
    from rllib_caps.core import ray_internals

    spaces = {"default_policy": (config.observation_space, config.action_space)}
    group = config.build_learner_group(rl_module_spec=config.get_multi_rl_module_spec(spaces=spaces))
    return ray_internals.local_learner(group)


def bench_config(algo: str, data: Path, seed: int, *, steps: int, device: str, **settings: Any) -> Any:
    """The config of one trial of ``algo`` on the dataset at ``data`` for a benchmark: the algorithm's defaults but
    ``settings``, no evaluation, a per-κ algorithm at κ = 20, its learner on the GPU where ``device`` is cuda (not yet
    validated: a caller may change it first)."""
    from rllib_caps.algorithms.registry import build_config, get_algorithm, trained_per_threshold

    if trained_per_threshold(get_algorithm(algo)):
        settings = {"cost_limit": 20, **settings}
    return build_config(algo, "BallCircle", data, steps=steps, eval_episodes=0, seed=seed,
                        num_gpus_per_learner=1 if device == "cuda" else 0, **settings)


def rllib_learner_step(config: Any) -> Callable[[int], None]:
    """``n`` gradient steps through ``OfflineSafeTorchLearner.update_from_dataset`` (a local learner, no Ray actors)."""
    learner = local_learner(config)
    return lambda n: learner.update_from_dataset(num_updates=n)


def measure(step: Callable[[int], None], steps: int, device: str, clock: str = "wall") -> float:
    """Steps/s of ``step(steps)``, by wall time, or with ``clock="cpu"`` by this process's CPU time (CPU device,
    one thread): on a shared machine, time spent waiting for a core is not counted."""
    import torch

    timer = time.process_time if clock == "cpu" else time.perf_counter
    if device == "cuda":
        torch.cuda.synchronize()
    start = timer()
    step(steps)
    if device == "cuda":
        torch.cuda.synchronize()
    return steps / (timer() - start)


VARIANTS = ("unfused", "fused")  # the critics as separate MLPs, or one ensemble per pair (rllib_caps.core.nets)


def loop_names(device: str, compiled: bool = False) -> list[str]:
    """The loops one row measures: the plain loop and the RLlib learner, each with unfused and fused critics; on
    CUDA also the RLlib learner with its step captured as a CUDA graph (``captured_step``); with ``compiled``, the
    RLlib learner with its forward pass and losses compiled (``torch_compile_learner``), captured on CUDA."""
    kinds = ["plain", "rllib"] + (["captured"] if device == "cuda" else []) + (["compiled"] if compiled else [])
    return [f"{kind}_{variant}" for variant in VARIANTS for kind in kinds]


def build_loop(name: str, args: argparse.Namespace, data: Path, hidden: int, heads: int, precision: str
               ) -> Callable[[int], None]:
    """One loop of ``loop_names``, built at one size."""
    from rllib_caps.algorithms.registry import get_algorithm

    kind, variant = name.split("_")
    config = bench_config(args.algo, data, 0, steps=args.steps, device=args.device, heads=heads,
                          hidden=[hidden] * 2, batch_size=args.batch, fused_critics=variant == "fused",
                          compile=kind == "compiled", compile_backend=args.compile_backend, backbone=args.backbone,
                          captured_step=kind in ("captured", "compiled") and args.device == "cuda",
                          matmul_precision=precision)
    config.validate()
    if kind == "plain":
        return get_algorithm(args.algo).reference_loop_class(config, device=args.device)
    return rllib_learner_step(config)


def gpu_memory_mib(device: str) -> float:
    import torch

    return torch.cuda.memory_allocated() / 2**20 if device == "cuda" else 0.0


def distinct_mib(tensors: Iterable[torch.Tensor]) -> float:
    """MiB of the distinct storages behind ``tensors`` (what they hold between them, shared storage once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values()) / 2**20


def run_matrix(args: argparse.Namespace, data: Path) -> list[dict[str, Any]]:
    """One row per (precision, hidden, K): min/median/max steps/s of every loop of ``loop_names`` (measured
    interleaved, so drift hits them alike), each loop's GPU memory, and the ratios of medians: each RLlib loop
    against the plain loop with the same critics, and each fused loop against its unfused self."""
    import torch

    rows = []
    for precision in args.precision:
        for hidden in args.hidden:
            for heads in args.heads:
                loops, memory = {}, {}
                for name in loop_names(args.device, args.compile):
                    before = gpu_memory_mib(args.device)
                    loops[name] = build_loop(name, args, data, hidden, heads, precision)
                    loops[name](args.warmup)
                    memory[name] = gpu_memory_mib(args.device) - before
                speeds: dict[str, list[float]] = {name: [] for name in loops}
                for _ in range(args.repetitions):  # interleaved, so drift hits every loop alike
                    for name, loop in loops.items():
                        speeds[name].append(measure(loop, args.steps, args.device, args.clock))
                m = {name: statistics.median(v) for name, v in speeds.items()}
                row = {"precision": precision, "hidden": hidden, "heads": heads, "batch": args.batch}
                for name, v in speeds.items():
                    row |= {f"{name}_min": min(v), f"{name}_median": m[name], f"{name}_max": max(v),
                            f"{name}_memory_mib": memory[name]}
                    kind, variant = name.split("_")
                    if kind != "plain":
                        row[f"{name}_vs_plain"] = m[name] / m[f"plain_{variant}"]
                    if variant == "fused":
                        row[f"{kind}_fused_vs_unfused"] = m[name] / m[f"{kind}_unfused"]
                rows.append(row)
                del loops
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    return rows


def run_one_after_another(learners: list[Any], n: int) -> None:
    """``n`` gradient steps of each learner, one learner after another."""
    for learner in learners:
        learner.update_from_dataset(num_updates=n)


def run_populations(args: argparse.Namespace, data: Path) -> list[dict[str, Any]]:
    """One row per population size P: member-steps/s of P trials of ``--algo`` (seeds 0 … P−1) trained as one population
    (``rllib_caps.core.population``; its step captured on CUDA) and of separate RLlib learners, one after another,
    measured interleaved; GPU memory of each; and the ratio. Separate learners run one at a time, so their
    member-steps/s does not depend on P: min(P, 8) of them are measured."""
    import torch

    from rllib_caps.core.population import Population

    hidden, heads, precision = args.hidden[0], args.heads[0], args.precision[0]

    def learner(seed: int, compiled: bool = False) -> Any:
        config = bench_config(args.algo, data, seed, steps=args.steps, device=args.device, heads=heads,
                              hidden=[hidden] * 2, batch_size=args.batch, backbone=args.backbone,
                              fused_critics=args.fused_critics, matmul_precision=precision, compile=compiled,
                              compile_backend=args.compile_backend)
        if args.search_members:  # each member its own sample: every member hyperparameter scaled by 1 + seed/8
            config.training(**{name: np.multiply(value, 1 + seed / 8).tolist()
                               for name, value in config.member_hyperparameters().items()})
        config.validate()
        return local_learner(config)

    rows = []
    for size in args.population:
        before = gpu_memory_mib(args.device)
        learners = [learner(seed, args.compile) for seed in range(size)]
        datasets_mib = distinct_mib(t for one in learners for t in one.dataset.tensors.values())
        population = Population.of_learners(learners, captured=args.device == "cuda")
        del learners
        population(args.warmup)
        population_mib = gpu_memory_mib(args.device) - before
        before = gpu_memory_mib(args.device)
        separate = [learner(seed) for seed in range(min(size, 8))]
        for one in separate:
            one.update_from_dataset(num_updates=args.warmup)
        separate_mib = (gpu_memory_mib(args.device) - before) * size / len(separate)
        one_after_another = functools.partial(run_one_after_another, separate)

        speeds: dict[str, list[float]] = {"population": [], "separate": []}
        for _ in range(args.repetitions):
            speeds["population"].append(size * measure(population, args.steps, args.device, args.clock))
            speeds["separate"].append(len(separate) * measure(one_after_another, args.steps, args.device,
                                                              args.clock))
        m = {name: statistics.median(v) for name, v in speeds.items()}
        rows.append({"population": size, "hidden": hidden, "heads": heads, "batch": args.batch,
                     "precision": precision, "fused_critics": args.fused_critics, "compiled": args.compile,
                     "search_members": args.search_members,
                     **{f"{name}_{stat}": f(v) for name, v in speeds.items()
                        for stat, f in (("min", min), ("median", statistics.median), ("max", max))},
                     "population_memory_mib": population_mib, "separate_memory_mib": separate_mib,
                     "datasets_mib": datasets_mib, "ratio_population_separate": m["population"] / m["separate"]})
        del population, separate
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return rows


def print_populations(rows: list[dict[str, Any]]) -> None:
    print("| P | hidden | K | batch | precision | critics | losses | members differ in | population member-steps/s "
          "| separate learners member-steps/s "
          "| population ÷ separate | population MiB | P separate MiB | datasets MiB |")
    print("|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [f"{r[f'{n}_median']:.1f} [{r[f'{n}_min']:.0f}-{r[f'{n}_max']:.0f}]" for n in ("population",
                                                                                             "separate")]
        print(f"| {r['population']} | {r['hidden']} | {r['heads']} | {r['batch']} | {r['precision']} | "
              f"{'fused' if r['fused_critics'] else 'separate'} | {'compiled' if r['compiled'] else 'eager'} | "
              f"{'seed, hyperparameters' if r['search_members'] else 'seed'} | " + " | ".join(cells)
              + f" | {r['ratio_population_separate']:.2f} | {r['population_memory_mib']:.0f} "
              f"| {r['separate_memory_mib']:.0f} | {r['datasets_mib']:.1f} |")


PAPER_SEEDS = 3  # seeds 0, 10, 20 per task and algorithm
PAPER_EVAL_EPISODES = 20  # per threshold


def measure_algorithm(name: str, args: argparse.Namespace, data: Path, population: int | None) -> float:
    """Member-steps/s of one algorithm's RLlib learner at its default sizes, its step captured where
    the device allows (``captured_step="auto"``); with ``population`` P, of P such trials as one population."""
    from rllib_caps.core.population import Population

    def learner(seed: int) -> Any:
        config = bench_config(name, data, seed, steps=args.steps, device=args.device,
                              matmul_precision=args.precision[0], compile=args.compile,
                              compile_backend=args.compile_backend)
        config.validate()
        return local_learner(config)

    if population:
        step = Population.of_learners([learner(seed) for seed in range(population)], captured=args.device == "cuda")
    else:
        one = learner(0)
        step = functools.partial(run_one_after_another, [one])
    step(args.warmup)
    return (population or 1) * statistics.median(measure(step, args.steps, args.device, args.clock)
                                                 for _ in range(args.repetitions))


def grid_steps(algo: str, task: Any, grid: dict[str, Any]) -> int:
    """The gradient steps of one trial of ``algo`` on ``task`` in a sweep of the YAML ``grid`` (its ``training`` and
    ``overrides`` resolved as the sweep resolves them; ``{}``: the config's default)."""
    from rllib_caps.algorithms.registry import canonical_settings, default_config
    from rllib_caps.sweeps.trials import settings_for, trial_settings

    settings = canonical_settings(settings_for(algo, trial_settings(grid.get("training") or {},
                                                                    grid.get("overrides") or {}, task, None)))
    return int(settings.get("num_gradient_steps", default_config(algo).num_gradient_steps))


def merged_populations(tasks: Iterable[Any], members_per_task: int, max_members: int) -> list[list[Any]]:
    """The populations of the grid's trials when those of tasks with the same observation and action sizes merge
    (``sweeps.gpu_plan.mergeable_groups``' rule), each group split as a sweep splits its populations
    (``sweeps.packing.split_into_populations``): one list of tasks per member."""
    from rllib_caps.sweeps.packing import split_into_populations

    groups: dict[tuple[int, int], list[Any]] = {}
    for task in tasks:
        groups.setdefault((task.obs_dim, task.act_dim), []).extend([task] * members_per_task)
    return [part for members in groups.values() for part in split_into_populations(members, max_members)]


def project_grid(args: argparse.Namespace, data: Path) -> list[dict[str, Any]]:
    """The paper's full grid (every algorithm of the registry, the 38 tasks, 3 seeds, per-κ algorithms once per
    threshold, each config's default gradient steps or those of ``--grid-config``, 20 evaluation episodes per
    threshold), one row per algorithm:
    trials, gradient steps, measured member-steps/s (separate trials, populations of each task's trials, and
    populations of ``--merged-population`` members, where the algorithm can form one), GPU-hours of training (the
    trials apart, each task's population, and the populations of tasks with matching sizes merged, their rates
    linear between the measured sizes and flat beyond) and CPU-hours of evaluation (``--eval-costs``: ms per
    environment step per suite, from ``benchmarks/bench_eval_rollouts.py``)."""
    from rllib_caps.algorithms.registry import ALGORITHMS, trained_per_threshold
    from rllib_caps.envs.tasks import TASKS
    from rllib_caps.sweeps.gpu_plan import interpolated

    costs = json.loads(args.eval_costs.read_text())["ms_per_step"] if args.eval_costs else None
    grid = yaml.safe_load(args.grid_config.read_text()) if args.grid_config else {}
    rows = []
    for name, entry in ALGORITHMS.items():
        per_kappa = trained_per_threshold(entry)
        trials_per_task = PAPER_SEEDS * (3 if per_kappa else 1)
        steps = sum(trials_per_task * grid_steps(name, task, grid) for task in TASKS.values())
        eval_steps = {suite: sum(trials_per_task * PAPER_EVAL_EPISODES * (1 if per_kappa else 3)
                                 * task.max_episode_steps for task in TASKS.values() if task.suite == suite)
                      for suite in {task.suite for task in TASKS.values()}}
        speed = measure_algorithm(name, args, data, None)
        rates = {1: speed}
        try:
            rates[trials_per_task] = packed = measure_algorithm(name, args, data, trials_per_task)
            rates[args.merged_population] = merged = measure_algorithm(name, args, data, args.merged_population)
        except ValueError:  # a learner's population_blocker (rllib_caps.core.population): its trials train alone
            packed = merged = None
        populations = merged_populations(TASKS.values(), trials_per_task, MAX_MEMBERS)
        merged_seconds = sum(grid_steps(name, task, grid) / interpolated(rates, len(members))
                             for members in populations for task in members)
        rows.append({"algorithm": name, "trials": trials_per_task * len(TASKS), "gradient_steps": steps,
                     "steps_per_s": speed, "population": trials_per_task, "population_member_steps_per_s": packed,
                     "merged_population": args.merged_population, "merged_member_steps_per_s": merged,
                     "train_gpu_hours": steps / speed / 3600,
                     "train_gpu_hours_packed": None if packed is None else steps / packed / 3600,
                     "train_gpu_hours_merged": merged_seconds / 3600,
                     "eval_cpu_hours": None if costs is None else
                     sum(n * costs[suite] / 1e3 for suite, n in eval_steps.items()) / 3600})
    return rows


def print_grid(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The projection per algorithm, and the grid's wall time on 1 and 4 GPUs: training GPU-hours divided over
    the GPUs, plus evaluation CPU-hours divided over ``--cpus-per-gpu`` cores per GPU (evaluation after training,
    as a trial runs today: no overlap assumed)."""
    def cell(value: float | None, digits: int) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    merged_size = rows[0]["merged_population"] if rows else 0
    print("| algorithm | trials | gradient steps | steps/s (one trial) | population | member-steps/s (population) "
          f"| member-steps/s ({merged_size} members) | training device-h | training device-h (populations) "
          "| training device-h (merged populations) | evaluation CPU-h |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['algorithm']} | {r['trials']} | {r['gradient_steps']:,} | {r['steps_per_s']:.0f} | "
              f"{r['population']} | {cell(r['population_member_steps_per_s'], 0)} | "
              f"{cell(r['merged_member_steps_per_s'], 0)} | {r['train_gpu_hours']:.2f} | "
              f"{cell(r['train_gpu_hours_packed'], 2)} | {r['train_gpu_hours_merged']:.2f} | "
              f"{cell(r['eval_cpu_hours'], 2)} |")
    train = sum(r["train_gpu_hours"] for r in rows)
    packed = sum(r["train_gpu_hours_packed"] or r["train_gpu_hours"] for r in rows)
    merged = sum(r["train_gpu_hours_merged"] for r in rows)
    evals = sum(r["eval_cpu_hours"] or 0.0 for r in rows)
    for gpus in (1, 4):
        cores = gpus * args.cpus_per_gpu
        print(f"{gpus} GPU(s), {cores} evaluation cores: separate trials {train / gpus + evals / cores:.2f} h, "
              f"populations {packed / gpus + evals / cores:.2f} h, merged populations "
              f"{merged / gpus + evals / cores:.2f} h (training {train / gpus:.2f} / {packed / gpus:.2f} / "
              f"{merged / gpus:.2f} h + evaluation {evals / cores:.2f} h)")
    if rows and rows[0]["eval_cpu_hours"] is None:
        print("(no --eval-costs: evaluation not included)")


def print_matrix(rows: list[dict[str, Any]], device: str, compiled: bool) -> None:
    """The matrix as a Markdown table: median steps/s [min-max], memory on CUDA, and the ratios."""
    names = loop_names(device, compiled)
    cells = [f"{n} steps/s" for n in names] + ([f"{n} MiB" for n in names] if device == "cuda" else [])
    ratios = [f"{n} ÷ plain_{n.split('_')[1]}" for n in names if not n.startswith("plain")]
    fused = [f"{n.split('_')[0]} fused ÷ unfused" for n in names if n.endswith("_fused")]
    header = ["precision", "hidden", "K", "batch", *cells, *ratios, *fused]
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for r in rows:
        values = [r["precision"], r["hidden"], r["heads"], r["batch"]]
        values += [f"{r[f'{n}_median']:.1f} [{r[f'{n}_min']:.0f}-{r[f'{n}_max']:.0f}]" for n in names]
        values += [f"{r[f'{n}_memory_mib']:.0f}" for n in names] if device == "cuda" else []
        values += [f"{r[f'{n}_vs_plain']:.3f}" for n in names if not n.startswith("plain")]
        values += [f"{r[f'{n.split(chr(95))[0]}_fused_vs_unfused']:.3f}" for n in names if n.endswith("_fused")]
        print("| " + " | ".join(str(v) for v in values) + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rllib_caps.bench", description=__doc__.split("\n\n")[0])
    with_loops = [name for name, entry in ALGORITHMS.items() if entry.reference_loop]
    p.add_argument("--algo", default=DEFAULT_ALGORITHM, choices=with_loops,
                   help=f"the algorithm of the matrix and of --population [{DEFAULT_ALGORITHM}]")
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 256, 512], help="hidden widths (2 layers)")
    p.add_argument("--heads", type=int, nargs="+", default=[2, 8], help="numbers of heads K")
    p.add_argument("--backbone", choices=("iql", "sacbc"), default="iql", help="CAPS's backbone [iql]")
    p.add_argument("--batch", type=int, default=256, help="minibatch size")
    p.add_argument("--steps", type=int, default=64, help="gradient steps per measurement")
    p.add_argument("--repetitions", type=int, default=5, help="interleaved measurements per loop")
    p.add_argument("--warmup", type=int, default=8, help="steps before measuring (a captured step records here)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu, or cuda (adds the RLlib learner with its step captured as a CUDA graph)")
    p.add_argument("--precision", choices=MATMUL_PRECISIONS, nargs="+",
                   help="matrix products on CUDA: highest (IEEE fp32), high (TF32) and/or bf16 (bf16 autocast); "
                        f"default {DEFAULT_MATMUL_PRECISION}, the learners' default")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time steps by the wall clock, or by this process's CPU time (--device cpu with --threads 1: "
                        "robust on a shared machine, where waiting for a core would count as wall time)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the learners' forward pass and losses as one program (torch_compile_learner): "
                        "the matrix adds the compiled RLlib learner (captured on CUDA) beside the eager loops; "
                        "--population compiles the population's vmapped losses (separate learners stay eager); "
                        "--project-grid compiles every learner that can be")
    p.add_argument("--compile-backend", default="inductor", metavar="BACKEND",
                   help="with --compile: torch.compile's backend (torch_compile_learner_dynamo_backend) [inductor; "
                        "aot_eager captures the same graph, forward and backward, without generating kernels]")
    p.add_argument("--fused-critics", action="store_true",
                   help="with --population: CAPS's critic pairs as one ensemble each (fused_critics) [separate MLPs]")
    p.add_argument("--search-members", action="store_true",
                   help="with --population: members differ in the algorithm's member hyperparameters (CAPS: β and "
                        "λ_k) as a packed Optuna search's samples do [members differ in seed only]")
    p.add_argument("--population", type=int, nargs="+", metavar="P",
                   help="instead of the matrix: populations of P trials trained as one vmapped program against "
                        "separate learners, at the first --hidden, --heads and --precision")
    p.add_argument("--project-grid", action="store_true",
                   help="instead of the matrix: measure every algorithm's learner (one trial, and a population of a "
                        "task's trials) at its default sizes and project the paper's full grid on 1 and 4 GPUs")
    p.add_argument("--grid-config", type=Path, metavar="YAML",
                   help="--project-grid: the sweep YAML whose training steps (and per-suite overrides) the grid "
                        "trains, e.g. tune_configs/paper.yaml [each algorithm's default steps]")
    p.add_argument("--eval-costs", type=Path, metavar="JSON",
                   help="--project-grid: evaluation ms per environment step per suite "
                        "(benchmarks/bench_eval_rollouts.py --out)")
    p.add_argument("--merged-population", type=int, default=32, metavar="P",
                   help="--project-grid: also measure populations of P members, the size of the populations of "
                        "tasks with matching observation and action sizes merged (default 32, the most a sweep "
                        "packs)")
    p.add_argument("--cpus-per-gpu", type=int, default=16,
                   help="--project-grid: CPU cores per GPU that run evaluation rollouts (default 16)")
    p.add_argument("--figures", type=Path, metavar="JSON",
                   help="--project-grid on cuda: also write the measured steps/s into this GPU figures file (created, "
                        "or updated where it holds this GPU's), which tune --dry-run --gpu-figures reads")
    p.add_argument("--json", action="store_true", help="print the matrix as JSON")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA GPU here", file=sys.stderr)
        return 2
    if args.clock == "cpu" and (args.device != "cpu" or args.threads != 1):
        print("error: --clock cpu needs --device cpu and --threads 1 (CPU time of several threads or of a GPU's "
              "work is not the step's time)", file=sys.stderr)
        return 2
    if args.search_members and not (args.population and ALGORITHMS[args.algo].config_class().member_hyperparameters()):
        print("error: --search-members applies to --population of an algorithm with member hyperparameters (CAPS: "
              "β and λ_k)", file=sys.stderr)
        return 2
    if args.device == "cpu" and args.precision:
        print("error: --precision applies to --device cuda (CPU learners compute in fp32)", file=sys.stderr)
        return 2
    args.precision = args.precision or [DEFAULT_MATMUL_PRECISION if args.device == "cuda" else "highest"]
    if min(args.heads) < 2 or min(args.hidden + [args.batch, args.steps, args.repetitions]) < 1:
        print("error: --heads must be >= 2 and --hidden/--batch/--steps/--repetitions >= 1", file=sys.stderr)
        return 2
    if args.population and min(args.population) < 1:
        print("error: --population sizes must be >= 1", file=sys.stderr)
        return 2
    if not 2 <= args.merged_population <= MAX_MEMBERS:
        print(f"error: --merged-population must be 2 to {MAX_MEMBERS} (the most a sweep packs), got "
              f"{args.merged_population}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    for flag, path in (("--eval-costs", args.eval_costs), ("--grid-config", args.grid_config)):
        if path and not path.is_file():
            print(f"error: {flag} {path}: no such file", file=sys.stderr)
            return 2
    if args.figures and not (args.project_grid and args.device == "cuda"):
        print("error: --figures applies to --project-grid --device cuda", file=sys.stderr)
        return 2
    if args.project_grid:
        run, show = project_grid, functools.partial(print_grid, args=args)
    elif args.population:
        run, show = run_populations, print_populations
    else:
        run, show = run_matrix, functools.partial(print_matrix, device=args.device, compiled=args.compile)
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args, write_synthetic_dataset(Path(tmp), rows=100_000, obs_dim=8, act_dim=2))
    machine = {"machine": f"{platform.machine()} {platform.processor()}".strip(), "cpus": os.cpu_count(),
               "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
               "load_average": os.getloadavg(), "torch": torch.__version__, "threads": torch.get_num_threads(),
               "device": args.device, "clock": args.clock, "algo": args.algo, "backbone": args.backbone,
               "compile": args.compile, "compile_backend": args.compile_backend,
               "steps": args.steps, "repetitions": args.repetitions,
               "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if args.figures:
        from rllib_caps.sweeps.gpu_figures import grid_figures, write_figures

        write_figures(args.figures, {"device": machine["gpu"], "date": time.strftime("%Y-%m-%d"),
                                     "torch": torch.__version__, "precision": args.precision[0],
                                     "command": "python -m rllib_caps.bench " + " ".join(sys.argv[1:] if argv is None
                                                                                         else argv),
                                     **grid_figures(rows)})
    if args.json:
        print(json.dumps({"setup": machine, "rows": rows}, indent=1))
        return 0
    print(" ".join(f"{k}: {v}" for k, v in machine.items()))
    print("Steps/s are medians of interleaved measurements (min-max in brackets); MiB: GPU memory a loop holds; "
          "datasets MiB: the members' datasets, each copy once.")
    show(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
