"""Issue 43's fallback probe: a trained CAPS checkpoint with a BC-Safe policy acting as its cost head.

When no head is feasible, CAPS acts with its cost head K−1, and where that head is unsafe itself nothing protects
the budget (docs/paper.md, "Proxy benchmark": CarCircle1-v4's seed-0 cost head costs 3 × κ₁ alone). The issue's
first candidate is a head trained like BC-Safe on the dataset's cheapest episodes. Before such a head is built into
the module, this measures it: a BC-Safe checkpoint of the same dataset (``train --algo bc-safe --cost-limit κ₁``)
gives head K−1's action, everywhere the module reads its heads, so the switching rule also reads Q^r and Q^c of that
action, as it would of a head trained so. The episodes are ``train``'s (``evaluate_policy`` at the checkpoint's
episode seed), so each κ compares one to one with the checkpoint's own evaluation.

    .venv/bin/python benchmarks/fallback_probe.py --checkpoint CAPS_CKPT --fallback BC_SAFE_CKPT --out P.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def with_fallback_head(policy: Any, fallback: Any) -> Any:
    """``policy`` (a ``CAPSPolicy``), changed in place and returned: its module's head K−1 acts with ``fallback``'s
    π(s) (a BC module's ``actions``, in the same normalised action box) instead of its own; the other heads, the
    critics and the switching rule are unchanged."""
    module = policy.module
    trained_heads = module.head_means

    def head_means(obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        means = trained_heads(obs, step)
        return torch.cat([means[:, :-1], fallback.actions(obs.float()).to(means.dtype).unsqueeze(1)], dim=1)

    module.head_means = head_means
    return policy


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a CAPS checkpoint")
    parser.add_argument("--fallback", type=Path, required=True, help="a BC-Safe checkpoint of the same task")
    parser.add_argument("--thresholds", type=float, nargs="+", help="cost thresholds κ [the task's three]")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per κ [20]")
    parser.add_argument("--calibrate-cost", metavar="MODE", help="set Q^c's shift from --data as evaluate "
                        "--calibrate-cost does [the checkpoint's shift]")
    parser.add_argument("--data", type=Path, help="the converted dataset the checkpoint trained on (--calibrate-cost)")
    parser.add_argument("--out", type=Path, required=True, help="JSON to write (evaluate --json's results)")
    args = parser.parse_args(argv)
    if args.calibrate_cost and not args.data:
        parser.error("--calibrate-cost needs --data, the dataset the checkpoint trained on")

    from rllib_caps.algorithms.bc.torch.default_bc_torch_rl_module import DefaultBCTorchRLModule
    from rllib_caps.algorithms.caps.calibration import calibrate_cost_critic
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.core.deployment import load_module
    from rllib_caps.core.rollout import episode_seed, evaluate_policy
    from rllib_caps.data import TransitionDataset
    from rllib_caps.envs.tasks import get_task
    from rllib_caps.utils.atomic import atomic_file

    torch.set_num_threads(1)
    policy = CAPSPolicy.from_checkpoint(args.checkpoint)
    fallback = load_module(args.fallback, [DefaultBCTorchRLModule])
    if fallback.model_config.get("task") != policy.task:
        parser.error(f"--fallback {args.fallback} was trained on {fallback.model_config.get('task')}, --checkpoint "
                     f"on {policy.task}")
    task = get_task(policy.task)
    if args.calibrate_cost:
        calibrate_cost_critic(policy, TransitionDataset.from_parquet(args.data).numpy_columns(), args.calibrate_cost)
    results = evaluate_policy(with_fallback_head(policy, fallback), task, args.thresholds or task.thresholds,
                              args.episodes, seed=episode_seed(policy)) | {"cost_shift": policy.cost_shift}
    with atomic_file(args.out) as tmp:
        tmp.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
