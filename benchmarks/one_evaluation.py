"""Why ``train``'s evaluation and ``evaluate`` differed, episode by episode (issue 43, "One evaluation").

Trains a tiny CAPS on the bundled BallCircle dataset, rolls out its evaluation on RLlib's EnvRunners (what ``train``
prints) and, on the saved checkpoint, the Ray-free rollouts of ``core.rollout`` under two seedings: the one
``evaluate`` used before (``reset(seed=1000 × training seed + i)`` for episode i) and RLlib's, which ``evaluate_policy``
now follows. Then counts, on dataset states at random budgets and steps, the heads the switching rule picks
differently with the budget in float32 (how the module read it on EnvRunners before) and float64 (CAPSPolicy, the
ONNX export, and the module now).

    PYTHONPATH=$PWD python benchmarks/one_evaluation.py [--episodes 4] [--runners 0] [--seed 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def rllib_outcomes(algo, thresholds, episodes):
    from rllib_caps.core.cost_threshold_api import tell_cost_threshold
    from rllib_caps.core.evaluation import _sample_outcomes

    group, found = algo.eval_env_runner_group, {}
    for kappa in thresholds:
        group.foreach_env_runner(lambda er, k=kappa: tell_cost_threshold(er.module, k), local_env_runner=True)
        found[kappa] = [(o.reward, o.cost) for o in _sample_outcomes(group, episodes)]
    return found


def ray_free_outcomes(policy, task, thresholds, episodes, seeds):
    """``seeds(i)``: the reset seed of episode i (None: unseeded)."""
    from rllib_caps.core.extension import module_extension
    from rllib_caps.core.rollout import run_episode
    from rllib_caps.envs import make_env

    env, extension = make_env(task), module_extension(type(policy.module))
    found = {k: [(o.reward, o.cost) for o in (run_episode(policy, env, k, seeds(i), extension)
                                              for i in range(episodes))] for k in thresholds}
    env.close()
    return found


def head_flips(module, kappa: float, rows: int = 20000, seed: int = 0) -> int:
    """Dataset states at random c_<t ∈ [0, κ] and t: heads picked differently with the budget in float32 and float64."""
    import torch

    from rllib_caps.data import TransitionDataset

    obs = TransitionDataset.from_parquet(BUNDLED).tensors["obs"][:rows].float()
    rng = np.random.default_rng(seed)
    spent = torch.from_numpy(rng.uniform(0, kappa, len(obs)))
    step = torch.from_numpy(rng.integers(0, module.horizon, len(obs)).astype(np.float64))
    with torch.no_grad():
        _, heads64 = module.switching_actions(obs, spent, step, kappa)
        _, heads32 = module.switching_actions(obs, spent.float(), step.float(), kappa)
    return int((heads64 != heads32).sum())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--runners", type=int, default=0)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--steps", type=int, default=128)
    args = p.parse_args()

    import ray

    from rllib_caps.algorithms.registry import build_config, load_policy
    from rllib_caps.core.rollout import episode_seed
    from rllib_caps.envs import get_task

    task = get_task("BallCircle")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = build_config("caps", task, str(BUNDLED), seed=args.seed, steps=args.steps, hidden=[16, 16],
                          batch_size=32, updates_per_iteration=64, eval_episodes=args.episodes,
                          eval_runners=args.runners)
    algo = config.build_algo()
    for _ in range(config.num_iterations):
        algo.train()
    checkpoint = Path(tempfile.mkdtemp()) / "ckpt"
    algo.save_to_path(checkpoint)
    trained = rllib_outcomes(algo, config.thresholds, args.episodes)
    algo.stop()
    policy = load_policy(str(checkpoint))
    first = episode_seed(policy)
    seedings = {"before: reset(seed=1000 s + i) each": lambda i: 1000 * args.seed + i,
                f"now: reset(seed={first}) first, then unseeded": lambda i: first if i == 0 else None}
    print(f"train's evaluation (RLlib EnvRunners), {args.episodes} episodes per κ: (reward, cost)")
    for kappa, outcomes in trained.items():
        print(f"  κ={kappa:g}: " + ", ".join(f"({r:.4f}, {c:g})" for r, c in outcomes))
    for name, seeds in seedings.items():
        found = ray_free_outcomes(policy, task, config.thresholds, args.episodes, seeds)
        same = sum(a == b for k in trained for a, b in zip(trained[k], found[k], strict=True))
        print(f"Ray-free, {name}: {same}/{args.episodes * len(trained)} episodes bit-identical")
        for kappa, outcomes in found.items():
            print(f"  κ={kappa:g}: " + ", ".join(f"({r:.4f}, {c:g})" for r, c in outcomes))
    for kappa in config.thresholds:
        print(f"κ={kappa:g}: {head_flips(policy.module, kappa)} of 20000 dataset states pick another head with the "
              "budget in float32 than in float64")


if __name__ == "__main__":
    main()
