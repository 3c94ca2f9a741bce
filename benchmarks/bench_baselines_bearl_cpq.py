"""BEAR-Lag and CPQ: learner speed (RLlib vs a plain loop of the same losses) and scores on the bundled BallCircle.

    python -m benchmarks.bench_baselines_bearl_cpq speed                 # steps/s, RLlib learner vs plain loop (CPU)
    python -m benchmarks.bench_baselines_bearl_cpq plan --steps 2000 --out /tmp/plan.json
    python -m benchmarks.bench_baselines_bearl_cpq train-plain --plan /tmp/plan.json --out /tmp/w  # no Ray needed
    python -m benchmarks.bench_baselines_bearl_cpq evaluate --plan /tmp/plan.json --weights /tmp/w/weights.pt

``speed`` times both loops interleaved on the same data, networks and losses (``benchmarks.baselines_plain``),
with the machinery of ``rllib_caps.bench``. ``plan`` writes one run per algorithm × κ × seed from the registry's
configs. ``train-plain`` trains them with the plain loop (the learner's step-for-step twin, tests/test_bearl.py),
in parallel processes, where Ray is not installed (a GPU machine); ``evaluate`` loads each run's weights into its
RLlib algorithm and scores it through the algorithms' own evaluation path (``algo.evaluate()``, 20 episodes at
the run's κ).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.baselines_plain import PlainLoop, run_spec

ALGOS = ("bearl", "cpq")
BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def build(algo: str, cost_limit: float, seed: int, steps: int, hidden: int, batch: int, eval_episodes: int = 0,
          device: str = "cpu", implementation: str = "osrl") -> Any:
    from rllib_caps.algorithms.registry import build_config

    config = build_config(algo, "BallCircle", BUNDLED, seed=seed, cost_limit=cost_limit, steps=steps,
                          hidden=[hidden] * 2, batch_size=batch, eval_episodes=eval_episodes,
                          implementation=implementation, num_gpus_per_learner=1 if device == "cuda" else 0)
    config.validate()
    return config


def speed(args: argparse.Namespace) -> None:
    from rllib_caps.bench import measure, rllib_learner_step

    torch.set_num_threads(args.threads)
    rows = []
    for algo in args.algos:
        config = build(algo, 20.0, 0, args.steps, args.hidden, args.batch, device=args.device)
        loops = {"rllib": rllib_learner_step(config), "plain": PlainLoop(run_spec(algo, config), device=args.device)}
        for loop in loops.values():
            loop(args.warmup)
        speeds: dict[str, list[float]] = {name: [] for name in loops}
        for _ in range(args.repetitions):  # interleaved, so drift on a shared machine hits both alike
            for name, loop in loops.items():
                speeds[name].append(measure(loop, args.steps, args.device))
        medians = {name: statistics.median(v) for name, v in speeds.items()}
        rows.append({"algo": algo, "hidden": args.hidden, "batch": args.batch,
                     **{f"{name}_{stat}": f(v) for name, v in speeds.items()
                        for stat, f in (("min", min), ("median", statistics.median), ("max", max))},
                     "ratio_rllib_plain": medians["rllib"] / medians["plain"]})
    print(f"machine: {platform.machine()} cpus={os.cpu_count()} load={os.getloadavg()} torch={torch.__version__} "
          f"threads={torch.get_num_threads()} device={args.device} steps={args.steps} reps={args.repetitions}")
    print("| algo | hidden | batch | RLlib steps/s (min / median / max) | plain steps/s (min / median / max) "
          "| RLlib ÷ plain |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['algo']} | {r['hidden']} | {r['batch']} | {r['rllib_min']:.2f} / {r['rllib_median']:.2f} / "
              f"{r['rllib_max']:.2f} | {r['plain_min']:.2f} / {r['plain_median']:.2f} / {r['plain_max']:.2f} | "
              f"{r['ratio_rllib_plain']:.3f} |")


def plan(args: argparse.Namespace) -> None:
    runs = [run_spec(algo, build(algo, kappa, seed, args.steps, args.hidden, args.batch,
                                 implementation=args.implementation))
            for algo in args.algos for kappa in args.kappas for seed in args.seeds]
    for run in runs:  # relative to the repository root, so the plan travels with the checkout
        run["data"] = os.path.relpath(run["data"], BUNDLED.parents[1])
    Path(args.out).write_text(json.dumps(runs, indent=1))
    print(f"{len(runs)} runs -> {args.out}")


def run_name(run: dict[str, Any]) -> str:
    return f"{run['algo']}-k{run['cost_limit']:g}-s{run['seed']}"


def _train_one(job: tuple[dict[str, Any], str]) -> tuple[str, dict[str, torch.Tensor], float, dict[str, float]]:
    run, device = job
    torch.set_num_threads(1)
    torch.manual_seed(run["seed"])
    loop = PlainLoop(run, device=device, data_seed=run["seed"] * 1000)
    start = time.perf_counter()
    loop(run["steps"])
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    state = {key: value.cpu() for key, value in loop.nets.state_dict().items() if key.startswith("actor.")}
    return run_name(run), state, run["steps"] / elapsed, loop.metrics


def train_plain(args: argparse.Namespace) -> None:
    runs = json.loads(Path(args.plan).read_text())
    for run in runs:
        run["steps"] = args.steps or run["steps"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    weights, log = {}, {}
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.jobs) as pool:
        for name, state, steps_per_s, metrics in pool.imap_unordered(_train_one, [(r, args.device) for r in runs]):
            weights[name] = state
            log[name] = {"steps_per_s": steps_per_s, "final": metrics}
            print(f"{name}: {steps_per_s:.1f} steps/s, final {json.dumps(metrics)}", flush=True)
    torch.save(weights, out / "weights.pt")
    (out / "train_log.json").write_text(json.dumps(log, indent=1))


def evaluate(args: argparse.Namespace) -> None:
    import ray

    from rllib_caps.core.keys import RESULTS_KEY
    from rllib_caps.core.ray_internals import local_learner
    from rllib_caps.report.stats import mean_ci

    # A Ray of its own: on a shared machine, a plain ray.init() would join another user's running cluster.
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    runs = json.loads(Path(args.plan).read_text())
    weights = torch.load(args.weights)
    scores: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for run in runs:
        config = build(run["algo"], run["cost_limit"], run["seed"], run["steps"], run["model"]["hidden"][0],
                       run["batch_size"], eval_episodes=args.episodes, implementation=run["model"]["implementation"])
        algo = config.build_algo()
        module = local_learner(algo.learner_group).module["default_policy"]
        module.load_state_dict(weights[run_name(run)], strict=False)
        algo.eval_env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)
        result = algo.evaluate()[RESULTS_KEY]["thresholds"][f"{run['cost_limit']:g}"]
        algo.stop()
        scores.setdefault((run["algo"], run["cost_limit"]), []).append(
            (float(result["normalized_reward"]), float(result["normalized_cost"])))
        print(f"{run_name(run)}: normalised reward {result['normalized_reward']:.3f}, "
              f"cost {result['normalized_cost']:.3f}", flush=True)
    print("| algo | κ | seeds | norm. reward (mean ± 95% CI) | norm. cost (mean ± 95% CI) |")
    print("|---|---:|---:|---:|---:|")
    for (algo, kappa), values in scores.items():
        (reward, reward_ci), (cost, cost_ci) = (mean_ci(column) for column in zip(*values, strict=True))
        print(f"| {algo} | {kappa:g} | {len(values)} | {reward:.3f} ± {reward_ci:.3f} | {cost:.3f} ± {cost_ci:.3f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_baselines_bearl_cpq",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_text in (("speed", "steps/s of the RLlib learner vs the plain loop"),
                            ("plan", "write the runs (algorithm × κ × seed) as JSON")):
        s = sub.add_parser(name, help=help_text)
        s.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
        s.add_argument("--hidden", type=int, default=256, help="hidden width of actor and critics (2 layers)")
        s.add_argument("--batch", type=int, default=512, help="minibatch size")
    speed_p, plan_p = sub.choices["speed"], sub.choices["plan"]
    speed_p.add_argument("--steps", type=int, default=20, help="gradient steps per measurement")
    speed_p.add_argument("--repetitions", type=int, default=3, help="interleaved measurements per loop")
    speed_p.add_argument("--warmup", type=int, default=3, help="steps before measuring")
    speed_p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    speed_p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    plan_p.add_argument("--steps", type=int, required=True, help="gradient steps per run")
    plan_p.add_argument("--kappas", type=float, nargs="+", default=[10.0, 20.0, 40.0], help="cost limits κ")
    plan_p.add_argument("--seeds", type=int, nargs="+", default=[0, 10, 20])
    plan_p.add_argument("--out", required=True, help="the plan's JSON file")
    plan_p.add_argument("--implementation", choices=("osrl", "paper"), default="osrl")
    train_p = sub.add_parser("train-plain", help="train a plan's runs with the plain loop (no Ray needed)")
    train_p.add_argument("--plan", required=True)
    train_p.add_argument("--out", required=True, help="directory for weights.pt and train_log.json")
    train_p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    train_p.add_argument("--jobs", type=int, default=1, help="runs trained in parallel")
    train_p.add_argument("--steps", type=int, default=None, help="gradient steps per run (default: the plan's)")
    eval_p = sub.add_parser("evaluate", help="score each run's weights through its RLlib algorithm's evaluation")
    eval_p.add_argument("--plan", required=True)
    eval_p.add_argument("--weights", required=True, help="weights.pt from train-plain")
    eval_p.add_argument("--episodes", type=int, default=20, help="evaluation episodes per run")
    eval_p.add_argument("--cpus", type=int, default=2, help="CPUs of the evaluation's own local Ray")
    args = p.parse_args(argv)
    if getattr(args, "device", "cpu") == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA GPU here", file=sys.stderr)
        return 2
    {"speed": speed, "plan": plan, "train-plain": train_plain, "evaluate": evaluate}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
