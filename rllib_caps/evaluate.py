"""Evaluate a checkpoint of an algorithm that takes κ at deployment (CAPS, CDT) at any thresholds without
retraining (and without Ray); the registry's deployable policy of the checkpoint's algorithm acts.

    python -m rllib_caps.evaluate --checkpoint CKPT --thresholds 5 10 20 40 --episodes 20
    python -m rllib_caps.evaluate --checkpoint CKPT --critic offline fqe-reward fqe-both --data datasets/BallCircle

``--critic fqe-reward|fqe-both`` first fits FQE critics for the checkpoint's heads on the dataset
(``rllib_caps.algorithms.caps.fqe``), then switches with them (the paper's FQE ablation).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rllib_caps.core.calibration import (
    CALIBRATIONS,
    Calibration,
    CostCriticAPI,
    calibrate_cost_critic,
    dataset_calibration,
)
from rllib_caps.core.critic_variants import CRITICS, CriticVariantsAPI, FQESettings
from rllib_caps.core.interrupts import interruptible
from rllib_caps.core.results import format_results_table
from rllib_caps.core.rollout import episode_seed, evaluate_policy
from rllib_caps.data import DatasetError
from rllib_caps.data.schema import OBS
from rllib_caps.data.validation import check_dataset
from rllib_caps.envs import TaskSpec, get_task
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_files
from rllib_caps.utils.checks import check_apart, check_distinct, check_output, seed_type

logger = logging.getLogger("rllib_caps.evaluate")


def check_task_fits(policy: Any, task: TaskSpec, checkpoint: str, *, allow_mismatch: bool) -> None:
    """The env must match the observations the bundle was trained on; another task of the same sizes needs
    ``--allow-task-mismatch`` (as in ``train``)."""
    trained_on = f"trained on {policy.task}" if policy.task else "trained on a custom env"
    if tuple(policy.module.observation_space.shape) != (task.obs_dim,):
        raise ValueError(f"{checkpoint}: {trained_on} with {policy.module.observation_space.shape[0]} observation "
                         f"values; --task {task.name} has {task.obs_dim}")
    if policy.task and policy.task != task.name and not allow_mismatch:
        raise ValueError(f"{checkpoint}: {trained_on}, not {task.name}; pass --allow-task-mismatch to evaluate it "
                         "there anyway")


def format_calibration(calibration: Calibration, png: str) -> str:
    """The calibration as a few lines: what the bias and the centred error say, and where the plot is."""
    c = calibration
    return (f"Cost critic on its dataset ({c.rows:,} rows): mean predicted Q^c {c.mean_predicted:.3g}, realised "
            f"discounted cost-to-go {c.mean_realised:.3g}\n"
            f"  bias {c.bias:+.3g} ({'pessimistic' if c.bias > 0 else 'optimistic'}), centred RMSE "
            f"{c.centred_rmse:.3g}, correlation {c.correlation:.3f}; plot: {png}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.evaluate",
        description="Roll out a trained policy that takes κ at deployment (e.g. CAPS, CDT) on the real simulator at "
                    "any cost thresholds (no retraining, no Ray) and print raw and DSRL-normalised reward/cost per "
                    "threshold.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint directory written by rllib_caps.train")
    p.add_argument("--task", help="task name (default: the one the checkpoint was trained on)")
    p.add_argument("--thresholds", type=float, nargs="+", help="cost thresholds κ (default: the task's three)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per threshold (default 20)")
    p.add_argument("--seed", type=seed_type, help="seed of the first episode, an integer in [0, 2**32) [1000 × the "
                   "training seed, so checkpoints of different seeds meet different start states]")
    p.add_argument("--head", type=int, help="act with this head alone instead of switching (ablation)")
    p.add_argument("--allow-task-mismatch", action="store_true",
                   help="evaluate on --task although the checkpoint was trained on another task of the same sizes")
    p.add_argument("--critic", nargs="+", default=["offline"], choices=CRITICS,
                   help="critics the switching rule reads: offline (the trained Q^r, Q^c), fqe-reward (FQE Q̂^r with "
                        "the offline Q^c), fqe-both (FQE Q̂^r and Q̂^c); several are evaluated on the same episodes "
                        "and share one FQE fit [offline]")
    p.add_argument("--data", help="converted dataset FQE is fitted on [datasets/<the checkpoint's task>]")
    p.add_argument("--fqe-steps", type=int, default=FQESettings.steps,
                   help=f"FQE gradient steps [{FQESettings.steps}]")
    p.add_argument("--fqe-batch-size", type=int, default=FQESettings.batch_size,
                   help=f"FQE batch size [{FQESettings.batch_size}]")
    p.add_argument("--calibration", metavar="PNG",
                   help="also compare the policy's cost critic Q^c(s, a) with the discounted cost-to-go the dataset "
                        "(--data) realised: bias (> 0: pessimistic), centred RMSE and correlation in the output "
                        "(JSON key calibration), a reliability plot to this PNG")
    p.add_argument("--calibrate-cost", choices=CALIBRATIONS, metavar="MODE",
                   help="before acting, set the shift of the policy's cost critic from its bias on the dataset "
                        "(--data): 'pessimism' removes measured pessimism only (training's default), 'mean' the "
                        "bias either way, 'none' no shift (docs/paper.md, 'Calibrated Q^c'). Default: the "
                        "checkpoint's shift, set by its training's cost_calibration. The shift acted with is in the "
                        "output (JSON key cost_shift; with several --critic, in the offline entry)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table (one critic: its results; "
                   "several: critic -> results)")
    p.add_argument("--out", help="also write that JSON to this file (atomically; checked before any rollout)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="load a checkpoint without manifest.json (and a --data dataset without checksums) without "
                        "checking their files (logged)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.algorithms.registry import load_policy
    from rllib_caps.data import TransitionDataset

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    bad = [k for k in args.thresholds or [] if not k >= 0]
    if args.episodes < 1 or bad:
        print(f"error: --thresholds must be >= 0 (got {bad})" if bad else "error: --episodes must be >= 1",
              file=sys.stderr)
        return 2
    critics = list(dict.fromkeys(args.critic))
    outputs = {flag: path for flag, path in (("--out", args.out), ("--calibration", args.calibration)) if path}
    try:
        with contextlib.ExitStack() as claimed:
            try:
                settings = FQESettings(steps=args.fqe_steps, batch_size=args.fqe_batch_size)
                check_distinct(outputs)
                for flag, path in outputs.items():
                    check_output(path, flag, {"--checkpoint": args.checkpoint, "--data": args.data}, file=True)
                policy = load_policy(args.checkpoint, verify=args.verify)
                if not (args.task or policy.task):
                    raise ValueError(f"{args.checkpoint}: trained on a custom env; pass --task")
                task = get_task(args.task or policy.task)
                check_task_fits(policy, task, args.checkpoint, allow_mismatch=args.allow_task_mismatch)
                if args.head is not None and not 0 <= args.head < policy.num_heads:
                    raise ValueError(f"--head {args.head}: the checkpoint has heads 0 to {policy.num_heads - 1}")
                if args.head is not None and critics != ["offline"]:
                    raise ValueError("--head acts with one head, no critic is read: leave out --critic")
                if critics != ["offline"] and not isinstance(policy, CriticVariantsAPI):
                    raise ValueError(f"--critic {' '.join(critics)}: {args.checkpoint} holds a "
                                     f"{type(policy).__name__}, which does not switch with critics")
                for flag, asked in (("--calibration", args.calibration), ("--calibrate-cost", args.calibrate_cost)):
                    if asked and not isinstance(policy, CostCriticAPI):
                        raise ValueError(f"{flag}: {args.checkpoint} holds a {type(policy).__name__}, which reads "
                                         "no cost critic")
                dataset = None
                recalibrates = args.calibrate_cost not in (None, "none")
                uses = [use for use, asked in (("FQE", critics != ["offline"]), ("the cost calibration", recalibrates),
                                               ("the calibration diagnostics", args.calibration)) if asked]
                if uses:
                    data = Path(args.data or Path("datasets") / task.name)
                    for flag, path in outputs.items():
                        check_apart(path, flag, {"--data": data})
                    logger.info("loading %s for %s", data, " and ".join(uses))
                    check_dataset(data, task=task.name, obs_dim=task.obs_dim, act_dim=task.act_dim,
                                  allow_task_mismatch=args.allow_task_mismatch, verify=args.verify)
                    dataset = TransitionDataset.from_parquet(data)
                    if dataset.tensors[OBS].shape[1:] != policy.module.observation_space.shape:
                        raise ValueError(f"--data {data}: observations of size {dataset.tensors[OBS].shape[1]}; "
                                         f"the checkpoint's have {policy.module.observation_space.shape[0]}")
                # claimed (one writer each) before any rollout; written when the block ends without an error
                tmps = dict(zip(outputs, claimed.enter_context(atomic_files(*outputs.values())), strict=True))
            except (ValueError, FileNotFoundError, DatasetError, OutputExistsError, OutputNotWritableError) as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
            text = _evaluate_and_write(args, policy, task, critics, settings, dataset, tmps)
    except OutputNotWritableError as err:  # a full disk while writing
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _evaluate_and_write(args: argparse.Namespace, policy: Any, task: TaskSpec, critics: list[str],
                        settings: FQESettings, dataset: Any, tmps: dict[str, Path]) -> str:
    """Rolls ``policy`` out, writes the JSON and the calibration plot into their temporary files (``tmps``: flag ->
    path) and returns what to print."""
    thresholds = args.thresholds or [float(k) for k in task.thresholds]
    seed = args.seed if args.seed is not None else episode_seed(policy)
    columns = None if dataset is None else {k: v.numpy() for k, v in dataset.tensors.items()}
    if args.calibrate_cost is not None:
        calibrate_cost_critic(policy, columns, args.calibrate_cost)
    shift = policy.cost_shift if isinstance(policy, CostCriticAPI) else None
    if shift is not None:
        logger.info("the switching rule reads Q^c − %.4g (cost calibration)", shift)
    with interruptible("no results were written; the rollouts are deterministic, so the same command gives the "
                       "same figures"):
        if args.head is not None or not isinstance(policy, CriticVariantsAPI):
            results = {"offline": evaluate_policy(policy, task, thresholds, args.episodes, seed=seed,
                                                  fixed_head=args.head)}
        else:
            results = policy.evaluate_critics(dataset, task, thresholds, args.episodes, critics, settings, seed=seed)
    if shift is not None and "offline" in results:  # the shift of the policy's own Q^c
        results["offline"] = {**results["offline"], "cost_shift": shift}
    output = dict(results[critics[0]] if len(critics) == 1 else results)
    calibration = None
    if args.calibration:
        from rllib_caps.report.plots import plot_calibration  # matplotlib, only when asked for

        calibration = dataset_calibration(policy, columns)
        output["calibration"] = calibration.as_dict()
        plot_calibration({"": calibration}, tmps["--calibration"],
                         f"{task.name}: cost critic on its dataset ({calibration.rows:,} rows)")
    payload = json.dumps(output, indent=2)
    if args.out:
        tmps["--out"].write_text(payload + "\n")
    tables = [format_results_table(r, title=task.name + ("" if critic == "offline" else f" ({critic} critics)"))
              for critic, r in results.items()]
    if calibration is not None:
        tables.append(format_calibration(calibration, args.calibration))
    return payload if args.json else "\n\n".join(tables)


if __name__ == "__main__":
    sys.exit(main())
