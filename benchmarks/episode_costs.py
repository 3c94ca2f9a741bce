"""Issue 43: how much one (seed, κ) safety verdict from 20 episodes can say, and what Q^c predicted along them.
Rolls out a checkpoint on ``train``'s evaluation episodes at one κ (``threshold_episodes``, as ``evaluate_policy``
runs them) and writes each episode's cost with their mean, standard error and the 95 % interval of the mean in units
of κ. For a CAPS checkpoint it also writes Q^c's on-policy calibration (``onpolicy_calibration``: at every step,
the Q^c the switching rule read for the action taken against the discounted cost the episode then incurred, per
head that acted) and where the cost came from (``cost_by_head``: per head, and the part incurred once the budget
was spent).

    .venv/bin/python benchmarks/episode_costs.py --checkpoint CKPT --threshold 20 --out C.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rllib_caps.data.schema import ACTIONS, COSTS, EPS_ID, OBS, T


def cost_spread(costs: Sequence[float], threshold: float) -> dict[str, Any]:
    """The episodes' costs, their mean, sample standard deviation, standard error of the mean, the share of episodes
    that cost nothing, and the normal 95 % interval of the mean cost divided by κ (``threshold``)."""
    costs = np.asarray(costs, dtype=float)
    if costs.size < 2:
        raise ValueError(f"need at least 2 episodes for a spread, got {costs.size}")
    mean, std = float(costs.mean()), float(costs.std(ddof=1))
    sem = std / np.sqrt(costs.size)
    return {"threshold": threshold, "costs": costs.tolist(), "mean": mean, "std": std, "sem": float(sem),
            "zero_cost_share": float(np.mean(costs == 0)),
            "normalized_cost_ci95": [(mean - 1.96 * sem) / threshold, (mean + 1.96 * sem) / threshold]}


def head_rows(heads: np.ndarray, num_heads: int) -> dict[str, np.ndarray]:
    """``"all"`` and each head that acted -> the mask of its steps in ``heads``."""
    rows = {"all": np.ones(len(heads), dtype=bool)} | {str(k): heads == k for k in range(num_heads)}
    return {name: mask for name, mask in rows.items() if mask.any()}


def onpolicy_calibration(predicted: np.ndarray, realised: np.ndarray, thresholds: np.ndarray, heads: np.ndarray,
                         num_heads: int) -> dict[str, dict[str, float]]:
    """Per head that acted (and ``"all"``): its steps, the mean Q^c the rule read for the action taken
    (``predicted``, shifts included), the mean realised cost-to-go G_t (``realised``, discounted as Q^c is), their
    mean difference (``bias``: < 0 is optimistic), and the share of its steps judged feasible (Q^c below the
    rule's threshold, ``thresholds``) whose realised G_t was not below it (``feasible_but_over``)."""
    out = {}
    for name, mask in head_rows(heads, num_heads).items():
        feasible = mask & (predicted < thresholds)
        out[name] = {"steps": int(mask.sum()), "predicted": float(predicted[mask].mean()),
                     "realised": float(realised[mask].mean()), "bias": float((predicted - realised)[mask].mean()),
                     "feasible_but_over": float(np.mean(realised[feasible] >= thresholds[feasible]))
                     if feasible.any() else 0.0}
    return out


def cost_by_head(costs: np.ndarray, spent: np.ndarray, heads: np.ndarray, threshold: float,
                 num_heads: int) -> dict[str, dict[str, float]]:
    """Where the cost came from, per head that acted (and ``"all"``): ``cost``, the cost its steps incurred, and
    ``after_budget``, the part incurred at steps that began with the budget already spent (``spent`` c_<t ≥ κ =
    ``threshold``), where the rule has no feasible head and acts with the head of lowest Q^c. ``costs``, ``spent``
    and ``heads`` are per step, over any number of episodes; the figures are their sums."""
    over = spent >= threshold
    return {name: {"cost": float(costs[mask].sum()), "after_budget": float(costs[mask & over].sum())}
            for name, mask in head_rows(heads, num_heads).items()}


class RecordingPolicy:
    """A CAPS policy that records, at every decision of a one-env rollout, what the switching rule read: per
    episode (``reset`` starts one), the observation, step, action taken, head, the threshold Q^c was compared with,
    the cost already spent, and the previous step's cost (the last step's never reaches ``act``)."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.episodes = policy, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def reset(self, threshold: float, batch_size: int = 1) -> None:
        self.policy.reset(threshold, batch_size)
        self.episodes.append({OBS: [], T: [], ACTIONS: [], "head": [], "threshold": [], "spent": [], COSTS: []})

    def act(self, obs: np.ndarray, cost: float = 0.0, reward: float = 0.0) -> np.ndarray:
        import torch

        from rllib_caps.core.budget import remaining_budget_threshold

        action = self.policy.act(obs, cost, reward=reward)
        budget, module, episode = self.policy.budget, self.policy.module, self.episodes[-1]
        threshold = remaining_budget_threshold(self.policy.threshold, torch.from_numpy(budget.spent),
                                               torch.from_numpy(budget.step.astype(np.float64)), module.horizon,
                                               module.cost_gamma)
        if episode[T]:
            episode[COSTS].append(float(cost))
        for name, value in ((OBS, obs), (T, int(budget.step[0])), (ACTIONS, self.policy.last_actions[0]),
                            ("head", int(self.policy.last_heads[0])), ("threshold", float(threshold[0])),
                            ("spent", float(budget.spent[0]))):
            episode[name].append(value)
        return action

    def calibration(self, episode_costs: Sequence[float]) -> dict[str, Any]:
        """Over the recorded episodes, whose total costs are ``episode_costs``: ``onpolicy_calibration`` (Q^c and the
        realised cost-to-go by ``dataset_predictions``, as on a dataset's rows) and ``cost_by_head`` (per
        episode)."""
        from rllib_caps.algorithms.caps.calibration import dataset_predictions

        rows = {name: np.concatenate([np.asarray(e[name]) for e in self.episodes])
                for name in (OBS, T, ACTIONS, "head", "threshold", "spent")}
        rows[COSTS] = np.concatenate([[*e[COSTS], total - sum(e[COSTS])]
                                      for e, total in zip(self.episodes, episode_costs, strict=True)])
        rows[EPS_ID] = np.concatenate([np.full(len(e[T]), i) for i, e in enumerate(self.episodes)])
        predicted, realised = dataset_predictions(self.policy, rows)
        num_heads = self.policy.module.num_heads
        by_head = cost_by_head(rows[COSTS], rows["spent"], rows["head"], self.policy.threshold, num_heads)
        return {"calibration": onpolicy_calibration(predicted, realised, rows["threshold"], rows["head"], num_heads),
                "cost_by_head": {head: {k: v / len(self.episodes) for k, v in row.items()}
                                 for head, row in by_head.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint with a deployable policy")
    parser.add_argument("--threshold", type=float, required=True, help="the cost threshold κ")
    parser.add_argument("--episodes", type=int, default=20, help="episodes [20]")
    parser.add_argument("--out", type=Path, required=True, help="JSON to write")
    args = parser.parse_args(argv)

    import torch

    from rllib_caps.algorithms.registry import load_policy
    from rllib_caps.core.extension import module_extension
    from rllib_caps.core.rollout import episode_seed, evaluation_runners, runner_shares, threshold_episodes
    from rllib_caps.envs import make_env
    from rllib_caps.envs.tasks import get_task
    from rllib_caps.utils.atomic import atomic_file

    torch.set_num_threads(1)
    policy = load_policy(args.checkpoint)
    env, extension = make_env(get_task(policy.task)), module_extension(type(policy.module))
    shares = runner_shares(args.episodes, evaluation_runners(policy))
    recorder = RecordingPolicy(policy) if hasattr(policy.module, "predicted_cost") else None
    outcomes = threshold_episodes(recorder or policy, env, args.threshold, shares, episode_seed(policy), extension)
    env.close()
    costs = [o.cost for o in outcomes]
    result = cost_spread(costs, args.threshold)
    if recorder is not None:
        result |= recorder.calibration(costs)
    with atomic_file(args.out) as tmp:
        tmp.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
