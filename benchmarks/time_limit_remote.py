"""The time-limit measurement split in two: train on a machine with many cores but no simulator, score here.

``benchmarks/time_limit.py`` trains and evaluates in one Tune sweep, which needs the simulators where it trains.
This script trains the same CAPS runs with ``python -m rllib_caps.train --eval-episodes 0`` (so no simulator is
needed) on a machine with many cores, keeps only what acting needs of each module (the actor and the reward and
cost critics), and scores those weights here with ``CAPSPolicy`` on the real simulator:

    # where the cores are (each run one process, one thread; resumable: finished runs are skipped)
    python -m benchmarks.time_limit_remote train --out /tmp/tl --jobs 16 --steps 30000 \\
        --data BallCircle=datasets/BallCircle DroneRun=datasets/DroneRun CarCircle=/data/CarCircle
    python -m benchmarks.time_limit_remote pack --out /tmp/tl --dest OUT   # weights in tarballs <= 15 MB
    # here, with the simulators
    python -m benchmarks.time_limit_remote score --weights DIR --episodes 20 --jobs 2 \\
        --data BallCircle=datasets/BallCircle DroneRun=datasets/DroneRun CarCircle=/data/CarCircle
    # the data's best episode within each κ, normalised: a yardstick for the arms' rewards
    python -m benchmarks.time_limit_remote ceiling --data BallCircle=datasets/BallCircle DroneRun=datasets/DroneRun

An arm is a ``time_limit`` variant, ``time_aware+actor`` (``time_aware`` with ``actor_time``: the actor heads see
the remaining time too) or ``time_aware+undiscounted`` (``time_aware`` with ``cost_gamma`` 1: Q^c is the
undiscounted cost-to-go, compared with the budget left itself). The table and the default rule are
``benchmarks/time_limit.py``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ARMS = ("bootstrap", "terminal", "time_aware", "time_aware+actor", "time_aware+undiscounted")
ACTING_NETS = ("actor.", "qr.", "qc.")  # what CAPSPolicy reads; values and target nets are training-only
TAR_BYTES = 15_000_000


def arm_settings(arm: str) -> dict[str, Any]:
    """The ``build_config`` settings of an arm."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    time_limit, _, variant = arm.partition("+")
    return {"time_limit": time_limit, "actor_time": variant == "actor" or None,
            "cost_gamma": 1.0 if variant == "undiscounted" else None}


def run_name(task: str, arm: str, seed: int) -> str:
    return f"{task}-{arm.replace('+', '_')}-s{seed}"


def parse_data(pairs: list[str]) -> dict[str, str]:
    data = {}
    for pair in pairs:
        task, sep, path = pair.partition("=")
        if not sep or not Path(path).is_dir():
            raise SystemExit(f"error: --data {pair!r}: expected TASK=DIR with an existing converted dataset")
        data[task] = path
    return data


def save_acting_weights(checkpoint: Path, weights: Path, run: dict[str, Any]) -> None:
    """Keeps what acting needs of a CAPS checkpoint's module (``ACTING_NETS``), with the run's description."""
    import torch

    from rllib_caps.algorithms.registry import load_policy

    module = load_policy(checkpoint, "caps").module
    state = {k: v for k, v in module.state_dict().items() if k.startswith(ACTING_NETS)}
    tmp = weights.with_suffix(".tmp")
    torch.save(run | {"state": state}, tmp)
    tmp.replace(weights)


def train_one(task: str, data: str, arm: str, seed: int, args: argparse.Namespace) -> str:
    """Trains one run with the train CLI and keeps its acting weights in ``OUT/weights/NAME.pt``."""
    name = run_name(task, arm, seed)
    weights = Path(args.out) / "weights" / f"{name}.pt"
    if weights.exists():
        return f"{name}: done before"
    checkpoint = Path(args.out) / "checkpoints" / name
    settings = arm_settings(arm)
    cmd = [sys.executable, "-m", "rllib_caps.train", "--task", task, "--data", data, "--out", str(checkpoint),
           "--force", "--seed", str(seed), "--time-limit", settings["time_limit"], "--steps", str(args.steps),
           "--heads", "2", "--hidden", *map(str, args.hidden), "--batch-size", str(args.batch_size),
           "--eval-episodes", "0"] + (["--actor-time"] if settings["actor_time"] else []) + (
               ["--cost-gamma", str(settings["cost_gamma"])] if settings["cost_gamma"] else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    log = Path(args.out) / "logs" / f"{name}.log"
    with open(log, "w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    seconds = time.perf_counter() - start
    if code != 0:
        return f"{name}: FAILED ({code}), see {log}"
    save_acting_weights(checkpoint, weights, {"task": task, "arm": arm, "seed": seed, "steps": args.steps,
                                              "hidden": list(args.hidden), "train_seconds": seconds})
    return f"{name}: {seconds:.0f} s"


def cmd_adopt(args: argparse.Namespace) -> int:
    """A run trained elsewhere (e.g. by a sweep with the same settings) joins the weights directory."""
    (Path(args.out) / "weights").mkdir(parents=True, exist_ok=True)
    weights = Path(args.out) / "weights" / f"{run_name(args.task, args.arm, args.seed)}.pt"
    save_acting_weights(Path(args.checkpoint), weights, {"task": args.task, "arm": args.arm, "seed": args.seed,
                                                        "steps": args.steps, "hidden": list(args.hidden),
                                                        "train_seconds": None})
    print(f"{weights}: from {args.checkpoint}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    data = parse_data(args.data)
    for sub in ("weights", "checkpoints", "logs"):
        (Path(args.out) / sub).mkdir(parents=True, exist_ok=True)
    runs = [(task, path, arm, seed) for arm in args.arms for task, path in data.items() for seed in args.seeds]
    print(f"{len(runs)} runs, {args.jobs} at a time, {args.steps} steps each", flush=True)
    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for future in as_completed([pool.submit(train_one, *run, args) for run in runs]):
            message = future.result()
            failed += "FAILED" in message
            print(time.strftime("%H:%M:%S"), message, flush=True)
    return 1 if failed else 0


def cmd_pack(args: argparse.Namespace) -> int:
    """Tarballs of at most ``TAR_BYTES`` each, of the weights not packed by an earlier call."""
    weights = Path(args.out) / "weights"
    packed = Path(args.out) / "packed.txt"
    done = set(packed.read_text().split()) if packed.exists() else set()
    files = sorted(p for p in weights.glob("*.pt") if p.name not in done)
    Path(args.dest).mkdir(parents=True, exist_ok=True)
    batches: list[list[Path]] = [[]]
    for path in files:
        if batches[-1] and sum(p.stat().st_size for p in batches[-1]) + path.stat().st_size > TAR_BYTES:
            batches.append([])
        batches[-1].append(path)
    stamp = time.strftime("%H%M%S")
    for i, batch in enumerate(b for b in batches if b):
        with tarfile.open(Path(args.dest) / f"weights-{stamp}-{i}.tar", "w") as tar:
            for path in batch:
                tar.add(path, arcname=path.name)
        with open(packed, "a") as f:
            f.write("".join(f"{p.name}\n" for p in batch))
    print(f"packed {len(files)} weight files into {args.dest}")
    return 0


def score_one(path: str, data: str, episodes: int) -> dict[str, Any]:
    import torch

    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.core.rollout import episode_seed, evaluate_policy
    from rllib_caps.envs import get_task

    torch.set_num_threads(1)
    run = torch.load(path, weights_only=False)
    settings = {k: v for k, v in arm_settings(run["arm"]).items() if v is not None}
    config = build_config("caps", run["task"], data, seed=run["seed"], heads=2, hidden=run["hidden"], **settings)
    config.validate()  # fills the spaces from the task registry
    module = config.get_rl_module_spec().build()
    missing, unexpected = module.load_state_dict(run["state"], strict=False)
    if unexpected or any(k.startswith(ACTING_NETS) for k in missing):
        raise ValueError(f"{path}: weights do not fit the module (missing {missing}, unexpected {unexpected})")
    policy = CAPSPolicy(module)
    task = get_task(run["task"])
    evaluation = evaluate_policy(policy, task, task.thresholds, episodes, seed=episode_seed(policy), progress=False)
    return {k: run[k] for k in ("task", "arm", "seed", "steps", "train_seconds")} | {"evaluation": evaluation}


def cmd_score(args: argparse.Namespace) -> int:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    data = parse_data(args.data)
    out = Path(args.results)
    scored = json.loads(out.read_text()) if out.exists() else []
    seen = {(r["task"], r["arm"], r["seed"]) for r in scored}
    todo = [p for p in sorted(Path(args.weights).glob("*.pt")) if _key(p) not in seen and _key(p)[0] in data]
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(score_one, str(p), data[_key(p)[0]], args.episodes) for p in todo]
        for future in tqdm(as_completed(futures), total=len(futures), desc="score", unit="run"):
            scored.append(future.result())
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(scored, indent=1))
            tmp.replace(out)
    print_table(scored)
    return 0


def _key(path: Path) -> tuple[str, str, int]:
    """(task, arm, seed) of a weight file named by ``run_name``."""
    task, arm, seed = path.stem.split("-")
    return task, {a.replace("+", "_"): a for a in ARMS}[arm], int(seed[1:])


def print_table(scored: list[dict[str, Any]]) -> None:
    from benchmarks.time_limit import table
    from rllib_caps.report.records import TrialRecord

    records: dict[str, list[TrialRecord]] = {}
    for arm in ARMS:
        records[arm] = [TrialRecord(algo="caps", task=r["task"], heads=2, seed=r["seed"], search={},
                                    evaluation=r["evaluation"], trial_dir=Path("."), checkpoint=None)
                        for r in scored if r["arm"] == arm]
    markdown, chosen = table({arm: recs for arm, recs in records.items() if recs})
    print(markdown)
    print(f"\nby the rule (most safe (task, seed, κ), then highest mean reward): {chosen}")
    seconds = [r["train_seconds"] for r in scored if r["train_seconds"] is not None]
    if seconds:
        print(f"training time per run: median {sorted(seconds)[len(seconds) // 2]:.0f} s over {len(seconds)} runs")


def cmd_ceiling(args: argparse.Namespace) -> int:
    """Per task and κ, the normalised reward of the dataset's best episode within κ (``best_safe_episode``): a
    yardstick for what the arms could reach by reproducing the behaviour data's best safe episode."""
    from rllib_caps.core.scoring import best_safe_episode
    from rllib_caps.data import TransitionDataset
    from rllib_caps.data.sequences import EpisodeSequences
    from rllib_caps.envs import get_task

    print("| task | κ | episodes within κ | best normalised reward within κ |")
    print("|:---|---:|---:|---:|")
    for name, directory in parse_data(args.data).items():
        task = get_task(name)
        episodes = EpisodeSequences.from_dataset(TransitionDataset.from_parquet(directory))
        returns, costs = episodes.episode_returns.numpy(), episodes.episode_costs.numpy()
        for kappa in task.thresholds:
            best = best_safe_episode(returns, costs, kappa, task.min_reward, task.max_reward)
            print(f"| {name} | {kappa:g} | {int((costs <= kappa).sum())} / {len(costs)} | "
                  f"{'–' if best is None else f'{best:.3f}'} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.time_limit_remote", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train every (task, arm, seed) run, --jobs at a time, no evaluation")
    t.add_argument("--data", nargs="+", required=True, help="TASK=DIR converted datasets")
    t.add_argument("--out", required=True)
    t.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    t.add_argument("--seeds", nargs="+", type=int, default=[0, 10, 20])
    t.add_argument("--steps", type=int, default=30_000)
    t.add_argument("--hidden", nargs="+", type=int, default=[256, 256])
    t.add_argument("--batch-size", type=int, default=256)
    t.add_argument("--jobs", type=int, default=os.cpu_count())
    a = sub.add_parser("adopt", help="add a checkpoint trained elsewhere with the same settings as a run")
    a.add_argument("--checkpoint", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--task", required=True)
    a.add_argument("--arm", required=True, choices=ARMS)
    a.add_argument("--seed", type=int, required=True)
    a.add_argument("--steps", type=int, required=True)
    a.add_argument("--hidden", nargs="+", type=int, default=[256, 256])
    k = sub.add_parser("pack", help="tar the weights not packed yet into DEST, at most 15 MB per file")
    k.add_argument("--out", required=True)
    k.add_argument("--dest", required=True)
    s = sub.add_parser("score", help="roll out every weight file in DIR on the simulator and print the table")
    s.add_argument("--weights", required=True)
    s.add_argument("--data", nargs="+", required=True, help="TASK=DIR converted datasets")
    s.add_argument("--results", default="time_limit_remote.json", help="scores, appended as runs finish")
    s.add_argument("--episodes", type=int, default=20)
    s.add_argument("--jobs", type=int, default=1)
    c = sub.add_parser("ceiling", help="per task and κ, the normalised reward of the data's best episode within κ")
    c.add_argument("--data", nargs="+", required=True, help="TASK=DIR converted datasets")
    args = p.parse_args(argv)
    commands = {"train": cmd_train, "adopt": cmd_adopt, "pack": cmd_pack, "score": cmd_score, "ceiling": cmd_ceiling}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
