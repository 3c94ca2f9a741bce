"""Evaluate a checkpoint of an algorithm that takes κ at deployment (CAPS, CDT) at any thresholds without
retraining (and without Ray); the registry's deployable policy of the checkpoint's algorithm acts.

    python -m rllib_caps.evaluate --checkpoint CKPT --thresholds 5 10 20 40 --episodes 20
    python -m rllib_caps.evaluate --checkpoint CKPT --critic offline fqe-reward fqe-both --data datasets/BallCircle

An algorithm's own flags (CAPS's ``--critic``, ``--head``, ``--calibration``...) and what they evaluate come from
its extension (``core.extension.AlgorithmExtension``: ``add_evaluate_arguments``, ``evaluate``); ``--help`` lists
every algorithm's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import ALGORITHMS
from rllib_caps.core.extension import AlgorithmExtension
from rllib_caps.core.results import format_results_table
from rllib_caps.data import DatasetError
from rllib_caps.envs import TaskSpec
from rllib_caps.interrupts import interruptible
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_files
from rllib_caps.utils.checks import check_distinct, check_output, seed_type

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


class EvaluateParser(argparse.ArgumentParser):
    """The evaluate CLI's parser: the generic flags, then every algorithm's own (``add_evaluate_arguments`` of each
    registry entry's extension). A flag two algorithms add by the same name is added once; ``owners`` records, per
    extension class, the flags it added (the others are refused for its checkpoints)."""

    def __init__(self, **kwargs: Any) -> None:
        self.flags: dict[str, argparse.Action] = {}
        self.owners: dict[type, list[argparse.Action]] = {}
        self._adding: list[argparse.Action] | None = None
        super().__init__(**kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        known = next((self.flags[flag] for flag in args if flag in self.flags), None)
        action = known or super().add_argument(*args, **kwargs)
        self.flags.update(dict.fromkeys(action.option_strings, action))
        if self._adding is not None:
            self._adding.append(action)
        return action

    def add_extension_arguments(self, extension: AlgorithmExtension) -> None:
        """``extension``'s flags, recorded as its own."""
        self._adding = self.owners.setdefault(type(extension), [])
        try:
            extension.add_evaluate_arguments(self)
        finally:
            self._adding = None

    def foreign_flags(self, args: argparse.Namespace, extension: AlgorithmExtension) -> list[str]:
        """The flags given (not at their defaults) that ``extension``'s algorithm does not take."""
        own = {id(action) for action in self.owners.get(type(extension), [])}
        return list(dict.fromkeys(action.option_strings[0] for actions in self.owners.values() for action in actions
                                  if id(action) not in own and getattr(args, action.dest) != action.default))


def build_parser() -> EvaluateParser:
    from rllib_caps.task_file_flag import add_task_file_argument

    p = EvaluateParser(
        prog="python -m rllib_caps.evaluate",
        description="Roll out a trained policy that takes κ at deployment (e.g. CAPS, CDT) on the real simulator at "
                    "any cost thresholds (no retraining, no Ray) and print raw and DSRL-normalised reward/cost per "
                    "threshold.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint directory written by rllib_caps.train")
    p.add_argument("--task", help="task name (default: the one the checkpoint was trained on)")
    add_task_file_argument(p)
    p.add_argument("--thresholds", type=float, nargs="+", help="cost thresholds κ (default: the task's three)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per threshold (default 20)")
    p.add_argument("--seed", type=seed_type, help="seed of the first episode of each κ, an integer in [0, 2**32) "
                   "(the others continue the env's random state) [train's: the training seed + 1000000, so the "
                   "episodes and figures are train's]")
    p.add_argument("--allow-task-mismatch", action="store_true",
                   help="evaluate on --task although the checkpoint was trained on another task of the same sizes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table (the results; an algorithm's "
                   "flags may add to them, e.g. CAPS's several --critic: critic -> results)")
    p.add_argument("--out", help="also write that JSON to this file (atomically; checked before any rollout)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="load a checkpoint without manifest.json (and a --data dataset without checksums) without "
                        "checking their files (logged)")
    for extension in extensions():
        p.add_extension_arguments(extension)
    return p


def extensions() -> list[AlgorithmExtension]:
    """One extension of each kind among the registry's entries (the hooks of the algorithms that add any)."""
    return list({type(e): e for e in (entry.extension for entry in ALGORITHMS.values())}.values())


def policy_extension(policy: Any) -> AlgorithmExtension:
    """The extension of the algorithm whose deployable policy ``policy`` is."""
    return next(entry.extension for entry in ALGORITHMS.values()
                if entry.policy_path and type(policy) is entry.policy_class)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from rllib_caps.algorithms.registry import load_policy

    parser = build_parser()
    args = parser.parse_args(argv)
    from rllib_caps.core.rollout import policy_task  # after --help: it imports torch
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    bad = [k for k in args.thresholds or [] if not k >= 0]
    if args.episodes < 1 or bad:
        print(f"error: --thresholds must be >= 0 (got {bad})" if bad else "error: --episodes must be >= 1",
              file=sys.stderr)
        return 2
    outputs = {"--out": args.out} if args.out else {}
    for extension in extensions():
        outputs |= extension.evaluate_outputs(args)
    try:
        with contextlib.ExitStack() as claimed:
            try:
                check_distinct(outputs)
                for flag, path in outputs.items():
                    check_output(path, flag, {"--checkpoint": args.checkpoint}, file=True)
                policy = load_policy(args.checkpoint, verify=args.verify)
                task = policy_task(policy, args.task)
                check_task_fits(policy, task, args.checkpoint, allow_mismatch=args.allow_task_mismatch)
                extension = policy_extension(policy)
                for flag in parser.foreign_flags(args, extension):
                    raise ValueError(f"{flag}: {args.checkpoint} holds a {type(policy).__name__}, whose algorithm "
                                     f"takes no {flag}")
                prepared = extension.prepare_evaluation(policy, task, args, outputs)
                # claimed (one writer each) before any rollout; written when the block ends without an error
                tmps = dict(zip(outputs, claimed.enter_context(atomic_files(*outputs.values())), strict=True))
            except (ValueError, FileNotFoundError, DatasetError, OutputExistsError, OutputNotWritableError) as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
            text = _evaluate_and_write(args, policy, task, extension, prepared, tmps)
    except OutputNotWritableError as err:  # a full disk while writing
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _evaluate_and_write(args: argparse.Namespace, policy: Any, task: TaskSpec, extension: AlgorithmExtension,
                        prepared: Any, tmps: dict[str, Path]) -> str:
    """Evaluates ``policy`` (as its algorithm's extension does, else by the plain rollout), writes the JSON (and what
    the extension writes) into their temporary files (``tmps``: flag -> path) and returns what to print."""
    from rllib_caps.core.results import labelled_results
    from rllib_caps.core.rollout import episode_seed, evaluate_policy

    thresholds = args.thresholds or [float(k) for k in task.thresholds]
    seed = args.seed if args.seed is not None else episode_seed(policy)
    with interruptible("no results were written; the rollouts are deterministic, so the same command gives the "
                       "same figures"):
        evaluation = extension.evaluate(policy, task, args, thresholds=thresholds, seed=seed, prepared=prepared,
                                        files=tmps)
        if evaluation is None:
            output = evaluate_policy(policy, task, thresholds, args.episodes, seed=seed)
            tables = [format_results_table(labelled_results(output, task), title=task.name)]
        else:
            output, tables = evaluation.output, evaluation.tables
    payload = json.dumps(labelled_results(output, task), indent=2)  # how its rewards are scored, for every algorithm
    if args.out:
        tmps["--out"].write_text(payload + "\n")
    return payload if args.json else "\n\n".join(tables)


if __name__ == "__main__":
    sys.exit(main())
