"""Issue 43: several checkpoints of one dataset, each acting with one shared ensemble of refit rule cost critics.

``evaluate --rule-cost-expectile TAU --rule-cost-members N`` fits N cost critics for each checkpoint it evaluates.
The fit reads only the dataset and the critics' settings (hidden sizes, cost discount, critic input, time limit,
cost sign), never the heads, so every checkpoint of one dataset and config gets the same members. This fits them
once, then evaluates each checkpoint with them under each reading, calibrated as ``--calibrate-cost`` does, on
``train``'s episodes: each output equals what ``evaluate --json`` writes for that checkpoint with the same flags.

    .venv/bin/python -m benchmarks.rule_critic_ensemble --data DATA --checkpoints CKPT ... --expectile 0.7 \\
        --members 4 --readings max mean --out-dir DIR
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rllib_caps.algorithms.caps.critic_variants import ENSEMBLE_READINGS

# The model_config entries the refit critics depend on; checkpoints that differ in any cannot share them.
CRITIC_SETTINGS = ("task", "hidden", "gamma", "cost_gamma", "time_limit", "horizon", "cost_maximize")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the converted dataset the checkpoints trained on")
    parser.add_argument("--checkpoints", type=Path, nargs="+", required=True, help="CAPS checkpoints of that dataset")
    parser.add_argument("--expectile", type=float, required=True, help="V^c expectile of the refit critics")
    parser.add_argument("--members", type=int, default=4, help="cost critics to fit [4]")
    parser.add_argument("--readings", nargs="+", choices=ENSEMBLE_READINGS, default=list(ENSEMBLE_READINGS),
                        help="how the rule reads them; each is evaluated [max mean]")
    parser.add_argument("--calibrate-cost", default="pessimism", help="the calibration after the refit [pessimism]")
    parser.add_argument("--thresholds", type=float, nargs="+", help="cost thresholds κ [the task's three]")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per κ [20]")
    parser.add_argument("--fqe-steps", type=int, help="gradient steps per member [FQE's]")
    parser.add_argument("--out-dir", type=Path, required=True,
                        help="writes <checkpoint name>-<reading>.json per checkpoint and reading")
    args = parser.parse_args(argv)

    import torch

    from rllib_caps.algorithms.caps.calibration import calibrate_cost_critic
    from rllib_caps.algorithms.caps.critic_variants import FQESettings
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.algorithms.caps.rule_critic import fit_rule_cost_critics, install_rule_cost_critic
    from rllib_caps.core.rollout import episode_seed, evaluate_policy
    from rllib_caps.data import TransitionDataset
    from rllib_caps.envs.tasks import get_task
    from rllib_caps.utils.atomic import atomic_file

    def critic_settings(module: torch.nn.Module) -> dict:
        return {key: module.model_config.get(key) for key in CRITIC_SETTINGS} | {"fused": module.qc.fused}

    torch.set_num_threads(1)
    policies = {checkpoint: CAPSPolicy.from_checkpoint(checkpoint) for checkpoint in args.checkpoints}
    first = policies[args.checkpoints[0]]
    settings = critic_settings(first.module)
    for checkpoint, other in policies.items():
        if differ := [key for key, value in critic_settings(other.module).items() if value != settings[key]]:
            parser.error(f"--checkpoints {checkpoint}: its {', '.join(differ)} differ from {args.checkpoints[0]}'s, "
                         f"so it cannot share the refit critics")
    dataset = TransitionDataset.from_parquet(args.data)
    fqe = FQESettings() if args.fqe_steps is None else FQESettings(steps=args.fqe_steps)
    members = fit_rule_cost_critics(first.module, dataset, args.expectile, fqe, args.members)
    columns = dataset.numpy_columns()
    task = get_task(first.task)
    for checkpoint, loaded in policies.items():
        for reading in args.readings:
            policy = copy.deepcopy(loaded)  # each reading starts from the checkpoint as saved
            install_rule_cost_critic(policy.module, members, reading)
            calibrate_cost_critic(policy, columns, args.calibrate_cost)
            results = evaluate_policy(policy, task, args.thresholds or task.thresholds, args.episodes,
                                      seed=episode_seed(policy))
            results |= {"cost_shift": policy.cost_shift, "rule_cost_expectile": args.expectile,
                        "rule_cost_members": args.members, "rule_cost_reading": reading}
            out = args.out_dir / f"{checkpoint.name}-{reading}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(out) as tmp:
                tmp.write_text(json.dumps(results, indent=1) + "\n")
            print(f"{out}: normalised cost {[round(r['normalized_cost'], 2) for r in results['thresholds'].values()]}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
