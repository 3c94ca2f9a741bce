"""Train one offline safe RL run and save its checkpoint.

    python -m rllib_caps.train --task T --data DIR --out CKPT
    python -m rllib_caps.train --algo bc-safe --cost-limit 20 --task T --data DIR --out CKPT
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    attribute_flag,
    build_config,
    declared,
    defaults_text,
    get_algorithm,
    names_where,
    trained_per_threshold,
)
from rllib_caps.core.checkpoint_size import training_run_estimate
from rllib_caps.core.keys import EVALUATION_FILE, RESULTS_KEY
from rllib_caps.core.ray_session import ray_started
from rllib_caps.core.results import format_results_table
from rllib_caps.data import DatasetError
from rllib_caps.envs import get_task
from rllib_caps.interrupts import interruptible
from rllib_caps.training_flags import add_training_flags
from rllib_caps.utils.atomic import (
    OutputExistsError,
    OutputNoSpaceError,
    OutputNotWritableError,
    atomic_directory,
)
from rllib_caps.utils.checks import check_local_gpus, check_output, number_type, seed_type
from rllib_caps.utils.console import divert_library_notices
from rllib_caps.utils.disk import check_free_space

logger = logging.getLogger("rllib_caps.train")

COMMAND = "rllib_caps.train"  # names train's checkpoints in their output marker


def train(config: Any, *, progress: bool = True) -> tuple[Any, dict[str, Any]]:
    """Builds the algorithm and runs its ``num_iterations`` iterations, logging each evaluation during training
    (``evaluation_every``); returns it and the last result."""
    from tqdm import tqdm

    algo = config.build_algo()
    with tqdm(total=config.num_iterations * config.updates_per_iteration, desc=f"{type(algo).__name__} {config.env}",
              unit="step", disable=not progress) as bar:
        for iteration in range(1, config.num_iterations + 1):
            result = algo.train()
            losses = result["learners"]["default_policy"]
            bar.set_postfix({k.removesuffix("_loss"): f"{v:.3g}" for k, v in losses.items() if k.endswith("_loss")})
            bar.update(config.updates_per_iteration)
            evaluation = result.get("evaluation", {}).get(RESULTS_KEY)
            if evaluation is not None and iteration < config.num_iterations:
                logger.info("after %d gradient steps: normalised reward %.3f, cost %.3f (mean over κ %s)",
                            iteration * config.updates_per_iteration, evaluation["mean"]["normalized_reward"],
                            evaluation["mean"]["normalized_cost"], config.thresholds)
    return algo, result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def flag_names() -> set[str]:
    """Every long flag of the command line (from its usage text)."""
    return set(re.findall(r"--[\w-]+", build_parser().format_usage()))


def build_parser() -> argparse.ArgumentParser:
    from rllib_caps.task_file_flag import add_task_file_argument

    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.train",
        description=f"Train an offline safe RL algorithm (default {DEFAULT_ALGORITHM}; or another, e.g. --algo "
                    "bc-safe --cost-limit 20) on one converted dataset, evaluate it at the task's cost thresholds "
                    "(or at its own --cost-limit) on the real simulator, and save an RLlib checkpoint. Settings left "
                    "out keep the algorithm config's defaults (the paper's or OSRL's hyperparameters).",
    )
    p.add_argument("--algo", default=DEFAULT_ALGORITHM, choices=list(ALGORITHMS),
                   help=f"algorithm [{DEFAULT_ALGORITHM}]")
    p.add_argument("--task", required=True, help="task short name or DSRL id, e.g. BallCircle, or a --task-file's")
    add_task_file_argument(p)
    p.add_argument("--data", required=True, help="converted dataset directory (from data_conversion.dsrl_to_parquet)")
    p.add_argument("--out", required=True, help="checkpoint directory to write (atomically)")
    p.add_argument("--seed", type=seed_type, default=0, help="training seed, an integer in [0, 2**32) (default 0)")
    p.add_argument("--cost-limit", type=float,
                   help=f"κ for the algorithms trained for one cost limit (required by "
                        f"{names_where(trained_per_threshold)}; an algorithm that ignores κ in training is evaluated "
                        f"at every threshold of the task without it); "
                        f"{names_where(lambda e: e.threshold_at_deployment)} take κ at deployment")
    add_training_flags(p)
    p.add_argument("--num-gpus", type=number_type(minimum=0), default=0.0,
                   help="GPUs for the learner, fractions allowed [0]")
    p.add_argument("--allow-task-mismatch", action="store_true",
                   help="train even if the dataset's metadata.json names another task (same sizes)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="use a dataset without metadata.json or file checksums, and skip the checksums (logged)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--json", action="store_true", help="print the evaluation results as JSON")
    add_entry_flags(p)
    return p


def add_entry_flags(parser: argparse.ArgumentParser) -> None:
    """One group per algorithm with the train flags its registry entry declares (``TrainFlag``), each flag once (the
    first entry's, where two declare the same); a flag's default comes from the config classes."""
    added: set[str] = set()
    for entry in ALGORITHMS.values():
        flags = [flag for flag in entry.train_flags if flag.flag not in added]
        if not flags:
            continue
        g = parser.add_argument_group(f"{entry.display_name}'s settings (--algo {entry.name})")
        for flag in flags:
            dest = flag.flag.removeprefix("--").replace("-", "_")
            if flag.kind is None:
                g.add_argument(flag.flag, dest=dest, action="store_true", default=None, help=flag.help)
            else:
                g.add_argument(flag.flag, dest=dest, type=flag.kind, choices=flag.choices or None,
                               help=f"{flag.help} [{defaults_text(flag.setting)}]")
        added |= {flag.flag for flag in flags}


def entry_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of the entries' own train flags given on the command line (``TrainFlag.setting`` -> value)."""
    return {flag.setting: getattr(args, flag.flag.removeprefix("--").replace("-", "_"))
            for flag in declared("train_flags").values()}


def flag_message(err: Exception, flags: Collection[str]) -> str:
    """The error's first line, with a config setting's name shown as the flag among ``flags`` that sets it."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    name = message.split(" ", 1)[0]
    flag = attribute_flag(name, flags)
    return f"{flag} ({name}){message[len(name):]}" if flag and " " in message else message


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        spec = _checked_input(args)
        divert_library_notices()  # imports RLlib, as the config does
        config = _checked_config(args, spec)
    except (ValueError, DatasetError, OutputNotWritableError) as err:
        print(f"error: {flag_message(err, flag_names())}", file=sys.stderr)
        return 2
    try:
        # The temporary output directory exists (so --out is writable, free and ours to replace) before training
        # starts; it becomes --out when the block ends without an error.
        with atomic_directory(args.out, force=args.force, command=COMMAND) as tmp, interruptible(
                f"nothing was written to --out {args.out}; run the same command again to train from the start"
        ), ray_started(num_cpus=None, include_dashboard=False, log_to_driver=False):
            result = _train_and_save(args, spec.name, config, tmp)
    except (OutputExistsError, OutputNotWritableError) as err:
        lost = "; the trained model is lost: free some space and run again" if isinstance(err, OutputNoSpaceError) \
            else ""
        print(f"error: --out {err}{lost}", file=sys.stderr)
        return 2
    logger.info("checkpoint saved to %s", Path(args.out).resolve())
    if result is not None:
        print(json.dumps(result, indent=2) if args.json else format_results_table(result, title=spec.name))
    return 0


def _checked_input(args: argparse.Namespace) -> Any:
    """The task of ``args``, once the checks that need no RLlib pass (output, dataset, GPUs, κ); raises the error that
    names what is wrong."""
    from rllib_caps.data.validation import check_dataset

    check_output(args.out, "--out", {"--data": args.data})
    spec = get_task(args.task)
    check_dataset(args.data, task=spec.name, obs_dim=spec.obs_dim, act_dim=spec.act_dim,
                  allow_task_mismatch=args.allow_task_mismatch, verify=args.verify)
    check_local_gpus("--num-gpus", args.num_gpus)
    if args.cost_limit is None and trained_per_threshold(get_algorithm(args.algo)):
        raise ValueError(f"--cost-limit is required: {args.algo} is trained for one cost limit κ (the "
                         f"paper trains one per threshold of {spec.name}: {spec.thresholds})")
    if args.eval_episodes is not None and args.eval_episodes < 0:
        raise ValueError(f"--eval-episodes must be >= 0 (0 skips the evaluation), got {args.eval_episodes}")
    return spec


def _checked_config(args: argparse.Namespace, spec: Any) -> Any:
    """The validated config of ``args`` for the task ``spec``, with the space its run needs under ``--out``."""
    from rllib_caps.core.offline import task_for_dataset

    spec = task_for_dataset(spec, args.data)  # a declared task without ranges gets the dataset's (recorded)
    config = build_config(args.algo, spec, args.data, seed=args.seed, cost_limit=args.cost_limit,
                          num_gpus_per_learner=args.num_gpus, steps=args.steps, time_limit=args.time_limit,
                          **entry_settings(args), hidden=args.hidden, batch_size=args.batch_size,
                          updates_per_iteration=args.updates_per_iteration,
                          eval_episodes=args.eval_episodes, eval_runners=args.eval_runners,
                          eval_every=args.eval_every)
    config.validate()
    check_free_space("--out", args.out, "the run", training_run_estimate(config))
    return config


def _train_and_save(args: argparse.Namespace, task: str, config: Any, out: Path) -> dict[str, Any] | None:
    """Trains, saves the checkpoint into ``out`` and returns the evaluation results (None without evaluation)."""
    from rllib_caps.core.results import labelled_results

    logger.info("training %s on %s from %s: %d steps, seed %d", args.algo, task, args.data,
                config.num_gradient_steps, args.seed)
    if config.evaluation_interval is not None:
        logger.info("the last iteration evaluates at thresholds %s, %d episodes each", config.thresholds,
                    config.evaluation_duration)
    algo, result = train(config)
    evaluation = labelled_results(result["evaluation"][RESULTS_KEY], config.task) \
        if config.evaluation_interval is not None else None
    if evaluation is not None:  # for export's policy card; written first, so the checkpoint's manifest covers it
        (out / EVALUATION_FILE).write_text(json.dumps(evaluation, indent=1) + "\n")
    algo.save_to_path(out)
    algo.stop()
    return evaluation


if __name__ == "__main__":
    sys.exit(main())
