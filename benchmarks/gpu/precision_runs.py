"""Do TF32 and bf16 matrix products train CAPS as float32 does? Short runs from one start, then their evaluation.

``train`` (on a CUDA machine): CAPS(IQL) on the bundled BallCircle data at the quickstart's sizes (hidden 256,
batch 256, K = 2, seed 0), one run per ``matmul_precision`` (highest, high, bf16), every run from the same initial
weights and minibatch stream, its step captured. It records the loss terms every ``--every`` steps and the wall
time, sets the cost critic's calibration shift as ``CAPS.evaluate`` does, and writes the runs' module states and
losses to ``--out``/precision_runs.pt.

``evaluate`` (anywhere the simulator runs, e.g. here on CPU): loads each state into a CPU module and rolls it out
with the real simulator at the task's three thresholds (``evaluate_policy``); prints a table of the normalised
reward and cost per threshold, the final losses and each run's largest relative parameter difference from float32.

    python benchmarks/gpu/precision_runs.py train --steps 10000 --out "$OUT"       # on the GPU machine
    python benchmarks/gpu/precision_runs.py evaluate --runs benchmarks/gpu/results --episodes 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rllib_caps.algorithms.registry import build_config
from rllib_caps.core.precision import MATMUL_PRECISIONS
from rllib_caps.utils.atomic import atomic_file

BUNDLED = Path(__file__).resolve().parents[2] / "datasets" / "BallCircle"
RUNS = "precision_runs.pt"  # {"record": per precision its speed and losses, "states": per precision its module state}


def caps_config(steps: int, device: str) -> Any:
    config = build_config("caps", "BallCircle", BUNDLED, steps=steps, heads=2, hidden=[256, 256], batch_size=256,
                          eval_episodes=0, seed=0, num_gpus_per_learner=int(device == "cuda"))
    config.validate()
    return config


def train(args: argparse.Namespace) -> int:
    from rllib_caps.bench import local_learner

    args.out.mkdir(parents=True, exist_ok=True)
    start, record, states = None, {}, {}
    for precision in MATMUL_PRECISIONS:
        config = caps_config(args.steps, args.device)
        config.training(matmul_precision=precision)
        learner = local_learner(config)
        module = learner.module["default_policy"]
        if start is None:
            start = {name: value.clone() for name, value in module.state_dict().items()}
        module.load_state_dict(start)  # every run from the same weights (and the same seed's minibatches)
        curve, begin = [], time.perf_counter()
        for done in range(args.every, args.steps + 1, args.every):
            result = learner.update_from_dataset(num_updates=args.every)
            losses = {key: float(value) for key, value in result["default_policy"].items() if "loss" in key}
            curve.append({"steps": done, **losses})
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - begin
        shift = learner.calibrate_cost_critic(config.cost_calibration)
        states[precision] = {k: v.cpu() for k, v in module.state_dict().items()}
        record[precision] = {"seconds": seconds, "steps_per_s": args.steps / seconds, "cost_shift": shift,
                             "curve": curve,
                             "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
        print(f"{precision}: {args.steps / seconds:.0f} steps/s, final {curve[-1]}, cost shift {shift:.3f}")
    with atomic_file(args.out / RUNS) as path:
        torch.save({"record": record, "states": states}, path)
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.core.rollout import evaluate_policy
    from rllib_caps.envs import get_task

    runs = torch.load(args.runs / RUNS)
    record, states = runs["record"], runs["states"]
    task = get_task("BallCircle")
    reference = states["highest"]
    print(f"CAPS(IQL) on BallCircle, {record['highest']['curve'][-1]['steps']} steps trained on "
          f"{record['highest']['device']}, {args.episodes} episodes per threshold (simulator on CPU)")
    print("| precision | steps/s | normalised reward / cost at " + " / ".join(map(str, task.thresholds))
          + " | final losses | largest relative parameter difference from fp32 |")
    print("|---|---:|---|---|---:|")
    for precision, run in record.items():
        module = caps_config(1, "cpu").get_rl_module_spec().build()
        module.make_target_networks()
        module.load_state_dict(states[precision])
        results = evaluate_policy(CAPSPolicy(module), task, task.thresholds, args.episodes, progress=False)
        scores = " ; ".join(f"{s['normalized_reward']:.3f} / {s['normalized_cost']:.2f}"
                            for s in results["thresholds"].values())
        losses = ", ".join(f"{k.removesuffix('_loss')} {v:.3g}" for k, v in run["curve"][-1].items() if k != "steps")
        difference = max(float((states[precision][n] - reference[n]).norm() / (reference[n].norm() + 1e-12))
                         for n in reference if reference[n].is_floating_point())
        print(f"| {precision} | {run['steps_per_s']:.0f} | {scores} | {losses} | {difference:.3g} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one run per precision (CUDA)")
    t.add_argument("--steps", type=int, default=10_000)
    t.add_argument("--every", type=int, default=1000, help="record the losses every this many steps")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu only checks the script: CPU learners compute every precision in fp32")
    e = sub.add_parser("evaluate", help="roll out the runs' modules in the simulator")
    e.add_argument("--runs", type=Path, required=True, help="the folder `train --out` wrote")
    e.add_argument("--episodes", type=int, default=20)
    args = p.parse_args(argv)
    if args.command == "train":
        if args.device == "cuda" and not torch.cuda.is_available():
            print("error: train needs a CUDA GPU", file=sys.stderr)
            return 2
        return train(args)
    return evaluate(args)


if __name__ == "__main__":
    sys.exit(main())
