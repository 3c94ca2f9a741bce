"""Where a CAPS(IQL) checkpoint's heads put their advantage weights on its dataset (docs/paper.md, "Proxy benchmark").

    .venv/bin/python -m benchmarks.head_weights --checkpoint CKPT --data DATA --task CarCircle1

Each head k's AWR weight w_k (Eq. 8, ``caps_iql_head_weights``: the checkpoint's critics, value nets and target twins
with its own loss settings, as training computes it) on a seeded sample of the dataset's rows, and what the weights
select: the weighted mean of the rows' episode cost returns against the plain mean, the weight's share on the rows of
episodes whose cost is at most each of the task's cost limits, and the effective sample size (Σw)² / Σw² as a
fraction of the rows. A head whose weighted episode cost equals the plain one imitates the dataset's episodes
without regard to their cost, whatever its advantages say row by row.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

MODULE_PATH = ("learner_group", "learner", "rl_module", "default_policy")


def weight_summary(weights: np.ndarray, episode_costs: np.ndarray, limits: Sequence[float]) -> dict[str, float]:
    """For one head's weights over rows, and each row's episode cost return: the weighted and the plain mean episode
    cost, the weight share (and the row share) of episodes at or under each limit, and the effective sample size."""
    w = np.asarray(weights, dtype=np.float64)
    c = np.asarray(episode_costs, dtype=np.float64)
    summary = {"weighted_episode_cost": float(np.sum(w * c) / w.sum()), "episode_cost": float(c.mean()),
               "effective_sample_size": float(w.sum() ** 2 / np.sum(w ** 2) / len(w))}
    for limit in limits:
        summary[f"weight_share_at_or_under_{limit:g}"] = float(w[c <= limit].sum() / w.sum())
        summary[f"row_share_at_or_under_{limit:g}"] = float(np.mean(c <= limit))
    return summary


def head_weights(checkpoint: Path, data: Path, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint's head weights ``(rows, K)`` on a seeded sample of ``data``'s rows, and those rows' episode
    cost returns."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from rllib_caps.algorithms.caps.caps import CAPSConfig
    from rllib_caps.algorithms.caps.iql.losses import caps_iql_head_weights
    from rllib_caps.data.dataset import TransitionDataset
    from rllib_caps.data.episodes import episode_costs
    from rllib_caps.data.schema import COSTS, EPS_ID

    module_dir = checkpoint.absolute().joinpath(*MODULE_PATH)  # RLlib reads a relative path as a URI
    module = RLModule.from_checkpoint(str(module_dir)).eval()
    module.make_target_networks()  # the inference module has none; the learner's state holds them
    module.set_state(pickle.loads((module_dir / "module_state.pkl").read_bytes()))
    ctor = pickle.loads((checkpoint / "class_and_ctor_args.pkl").read_bytes())["ctor_args_and_kwargs"][0][0]
    settings = CAPSConfig().update_from_dict(ctor).loss_settings()
    dataset = TransitionDataset.from_parquet(data)
    episode_cost, _ = episode_costs(dataset.tensors[EPS_ID], dataset.tensors[COSTS])
    picked = torch.from_numpy(np.random.default_rng(seed).choice(len(dataset), min(rows, len(dataset)), replace=False))
    batch = dataset.rows(picked)
    with torch.no_grad():
        weights, _, _ = caps_iql_head_weights(module._forward_train(batch), batch, settings)
    return weights.numpy(), episode_cost[picked].numpy()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a CAPS(IQL) checkpoint (train --out)")
    parser.add_argument("--data", type=Path, required=True, help="the converted dataset it trained on")
    parser.add_argument("--task", required=True, help="its task (for the cost limits)")
    parser.add_argument("--rows", type=int, default=50_000, help="rows sampled [50000]")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed [0]")
    args = parser.parse_args(argv)
    from rllib_caps.envs.tasks import get_task

    limits = get_task(args.task).thresholds
    if not (args.checkpoint / "class_and_ctor_args.pkl").is_file():
        raise SystemExit(f"error: --checkpoint {args.checkpoint}: not a CAPS checkpoint (no class_and_ctor_args.pkl)")
    weights, episode_cost = head_weights(args.checkpoint, args.data, args.rows, args.seed)
    print("| head | weighted episode cost (plain) | " + " | ".join(f"weight share ≤ {k:g} (rows)" for k in limits)
          + " | effective sample size |")
    print("|---:|---|" + "---|" * len(limits) + "---:|")
    for head in range(weights.shape[1]):
        s = weight_summary(weights[:, head], episode_cost, limits)
        shares = " | ".join(f"{s[f'weight_share_at_or_under_{k:g}']:.3f} ({s[f'row_share_at_or_under_{k:g}']:.3f})"
                            for k in limits)
        print(f"| {head} | {s['weighted_episode_cost']:.1f} ({s['episode_cost']:.1f}) | {shares} | "
              f"{s['effective_sample_size']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
