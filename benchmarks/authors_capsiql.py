"""Runs the CAPS authors' CAPS(IQL) (yassineCh/CAPS, a reference only: imported from their checkout, not copied) on a
local DSRL-format HDF5, inside the authors' virtualenv; ``benchmarks/authors_reference.py`` starts it.

It follows their ``examples/train/train_capsiql.py``: their config (``CapsIQLTrainConfig`` parsed by pyrallis from the
trainer arguments, over the task's default config), DSRL's ``get_dataset`` and ``pre_process_data``, OSRL's
``TransitionDataset``, their ``CapsIQL`` and ``CapsIQLTrainer.train_one_step``, and ``evaluate_switch`` at each cost
limit every ``eval_every`` steps and at the last; after the last, each head alone (``evaluate_head``). Three things
differ, each because the original cannot run here:
the HDF5 is a local file (``get_dataset(h5path)``); the env is this project's (``rllib_caps.envs.make_env``: the same
simulators, under gymnasium 1.x, which DSRL's ``gym.make`` ids and MetaDrive fork are not; its first reset is seeded
with the training seed, where theirs is unseeded); and the reward is scaled by
gymnasium 1.x's ``TransformReward`` (DSRL's ``wrap_env`` calls ``TransformObservation`` with gymnasium 0.28's
signature; its observation transform is the identity at their defaults). Their installation (their README) appends
their ``osrl/common/net.py`` to OSRL's and adds their ``osrl/algorthims/capsiql.py`` to ``osrl.algorithms``; this
script does the same in memory. The result is one JSON object on the file given by ``--result``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
import types
from pathlib import Path
from typing import Any


def install_authors_modules(code: Path) -> types.ModuleType:
    """Their README's installation, in memory: their net.py appended to OSRL's, their capsiql.py as
    ``osrl.algorithms.capsiql``; returns that module (``CapsIQL``, ``CapsIQLTrainer``)."""
    import osrl.algorithms
    import osrl.common.net as net

    net_file = code / "osrl" / "common" / "net.py"
    exec(compile(net_file.read_text(), str(net_file), "exec"), net.__dict__)  # noqa: S102 (their README: append)
    path = code / "osrl" / "algorthims" / "capsiql.py"
    spec = importlib.util.spec_from_file_location("osrl.algorithms.capsiql", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    osrl.algorithms.CapsIQL, osrl.algorithms.CapsIQLTrainer = module.CapsIQL, module.CapsIQLTrainer
    sys.path.insert(0, str(code))  # their examples.configs
    return module


def authors_config(trainer_args: list[str]) -> types.SimpleNamespace:
    """Their script's configuration: the arguments that differ from ``CapsIQLTrainConfig``'s defaults, over the
    task's default config."""
    import pyrallis
    from examples.configs.capsiql_configs import CapsIQL_DEFAULT_CONFIG, CapsIQLTrainConfig

    given = dataclasses.asdict(pyrallis.parse(config_class=CapsIQLTrainConfig, args=trainer_args))
    base = dataclasses.asdict(CapsIQLTrainConfig())
    cfg = dataclasses.asdict(CapsIQL_DEFAULT_CONFIG[given["task"]]())
    cfg.update({key: value for key, value in given.items() if value != base[key]})
    return types.SimpleNamespace(**cfg)


def offline_data(h5: Path, spec: Any, env: Any, args: types.SimpleNamespace) -> tuple[dict, Any]:
    """DSRL's ``get_dataset`` on the local file and ``pre_process_data`` at their config, as their script calls them;
    also the DSRL env that holds the task's DSRL reward range (their evaluation script's ``get_normalized_score``)."""
    from dsrl import infos
    from dsrl.offline_env import OfflineEnv

    offline = OfflineEnv(max_episode_reward=infos.MAX_EPISODE_REWARD[spec.name],
                         min_episode_reward=infos.MIN_EPISODE_REWARD[spec.name],
                         max_episode_cost=infos.MAX_EPISODE_COST[spec.name],
                         min_episode_cost=infos.MIN_EPISODE_COST[spec.name])
    offline.observation_space, offline.action_space = env.observation_space, env.action_space
    if args.density != 1.0:  # their density filter reads DSRL's per-task bins (DENSITY_CFG), not wired here
        raise SystemExit(f"error: --density {args.density}: only 1.0 (no filtering) is supported by this runner")
    data = offline.get_dataset(str(h5))
    data = offline.pre_process_data(data, args.outliers_percent, args.noise_scale, args.inpaint_ranges, args.epsilon,
                                    args.density)
    return data, offline


def evaluate_head(trainer: Any, head: int, episodes: int) -> dict:
    """One head alone for ``episodes`` episodes, as their ``CapsIQLTrainer.evaluate(head=...)`` means to: that one
    cannot run, since its ``rollout`` passes ``headtag`` to ``MHGaussianPolicy.act``, which takes ``tasktag``."""
    import numpy as np
    import torch

    model, env = trainer.model, trainer.env
    returns, costs, lengths = [], [], []
    model.eval()
    with torch.no_grad():
        for _ in range(episodes):
            obs, _ = env.reset()
            episode_return, episode_cost, length = 0.0, 0.0, 0
            for _ in range(model.episode_len):
                obs, reward, terminated, truncated, info = env.step(
                    model.actor.act(obs, tasktag=head, device=trainer.device))
                episode_return += reward
                episode_cost += info["cost"] * trainer.cost_scale
                length += 1
                if terminated or truncated:
                    break
            returns.append(episode_return)
            costs.append(episode_cost)
            lengths.append(length)
    model.train()
    return {"head": head, "reward": float(np.mean(returns) / trainer.reward_scale),
            "cost": float(np.mean(costs) / trainer.cost_scale), "length": float(np.mean(lengths)),
            "episodes": episodes}


def run(code: Path, h5: Path, trainer_args: list[str]) -> dict:
    """Train and evaluate as their script does; the evaluations (raw and by DSRL's ``get_normalized_score``)."""
    import gymnasium
    import torch
    from dsrl.offline_env import OfflineEnvWrapper
    from osrl.common import TransitionDataset
    from osrl.common.exp_util import seed_all
    from torch.utils.data import DataLoader
    from tqdm.auto import trange

    from rllib_caps.envs.make import make_env
    from rllib_caps.envs.tasks import get_task

    caps = install_authors_modules(code)
    args = authors_config(trainer_args)
    spec = get_task(args.task)
    seed_all(args.seed)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    env = make_env(spec, seed=args.seed)
    data, offline = offline_data(h5, spec, env, args)
    env = OfflineEnvWrapper(gymnasium.wrappers.TransformReward(env, lambda r: args.reward_scale * r))

    model = caps.CapsIQL(state_dim=env.observation_space.shape[0], action_dim=env.action_space.shape[0],
                         max_action=env.action_space.high[0], num_heads=args.num_heads,
                         iql_deterministic=args.iql_deterministic, hidden_dim=args.hidden_dim, iql_tau=args.iql_tau,
                         iql_tau_cost=args.iql_tau_cost, beta=args.beta, beta_cost=args.beta_cost, tau=args.tau,
                         gamma=args.gamma, episode_len=args.episode_len, device=args.device)
    trainer = caps.CapsIQLTrainer(model, env, actor_lr=args.actor_lr, q_lr=args.q_lr, value_lr=args.value_lr,
                                  max_steps=args.max_steps, reward_scale=args.reward_scale,
                                  cost_scale=args.cost_scale, device=args.device)
    dataset = TransitionDataset(data, reward_scale=args.reward_scale, cost_scale=args.cost_scale)
    batches = iter(DataLoader(dataset, batch_size=args.batch_size, pin_memory=True, num_workers=args.num_workers))

    evaluations = []
    for step in trange(args.update_steps, desc="Training"):
        batch = [b.to(args.device) for b in next(batches)]
        trainer.train_one_step(*batch, step)
        if (step + 1) % args.eval_every == 0 or step == args.update_steps - 1:
            for cost_limit in spec.thresholds:
                start = time.time()
                reward, cost, length = trainer.evaluate_switch(cost_limit, args.eval_episodes)
                offline.set_target_cost(cost_limit)
                dsrl_reward, dsrl_cost = offline.get_normalized_score(reward, cost)
                evaluations.append({"step": step + 1, "cost_limit": cost_limit, "reward": float(reward),
                                    "cost": float(cost), "length": float(length), "episodes": args.eval_episodes,
                                    "eval_seconds": time.time() - start,
                                    "dsrl_normalized_reward": float(dsrl_reward),
                                    "dsrl_normalized_cost": float(dsrl_cost)})
    heads = [evaluate_head(trainer, head, args.eval_episodes) for head in range(args.num_heads)]
    return {"config": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool, type(None)))},
            "dsrl_reward_bounds": {"min": offline.min_episode_reward, "max": offline.max_episode_reward},
            "all_evaluations": evaluations, "heads_alone": heads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors-code", type=Path, required=True, help="their checkout (yassineCh/CAPS)")
    parser.add_argument("--h5", type=Path, required=True, help="the DSRL-format HDF5 to train on")
    parser.add_argument("--result", type=Path, required=True, help="where the result JSON goes")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER, help="their train_capsiql.py's arguments")
    ns = parser.parse_args()
    trainer_args = ns.trainer_args[1:] if ns.trainer_args[:1] == ["--"] else ns.trainer_args
    ns.result.write_text(json.dumps(run(ns.authors_code, ns.h5, trainer_args), indent=1))


if __name__ == "__main__":
    main()
