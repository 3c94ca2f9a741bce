"""Behaviour policies for dataset collection: RLlib PPO trained on ``reward - penalty * cost``.

`train_snapshots` trains one PPO agent (RLlib 2.60, new API stack) per cost penalty, or per target
episode cost (PPO-Lagrangian: the penalty is a multiplier updated after every iteration from the
measured episode cost, `data_conversion.lagrangian`), optionally from another run's final weights (a warm
start), and keeps frozen copies of its policy at evenly spaced points of training, optionally also on disk
(`save_snapshot`, as data only: safetensors weights and a JSON spec; `load_snapshots` reads a directory of them
back, running no code from it). A `GaussianPolicy` acts with a snapshot
outside Ray, drawing every random number from a caller-supplied NumPy generator, so rollouts of the
same snapshots are reproducible.

Training runs in this process (no env runners, one local learner) and needs ``ray.init`` first
(`ensure_ray` does it for a 2-CPU machine). It is seeded (RLlib's ``debugging(seed=...)``, torch on one
thread), which made repeated runs bit-identical on CPU here, but RLlib does not promise that.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

from data_conversion.lagrangian import INITIAL_MULTIPLIER, step_multiplier
from data_conversion.ppo_settings import PPO_DEFAULTS
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import TaskSpec

logger = logging.getLogger(__name__)

PENALIZED_ENV = "caps_collect_penalized"  # RLlib env name registered by `train_snapshots`
RAY_INIT_ATTEMPTS = 3
HIDDEN = (64, 64)  # small separate actor and critic MLPs
BATCH_SIZE = 4000  # PPO env steps per training iteration (less on tiny budgets)
ENVS = 8  # vectorised envs in the local env runner (one batched forward pass per step)
SNAPSHOT_META = "snapshot.json"  # written by `save_snapshot` beside RLlib's module files
class PenalizedCost(gymnasium.Wrapper):
    """Replaces the reward by ``reward - penalty * info["cost"]`` (the Lagrangian at the current `penalty`,
    which the trainer may change between iterations) and records each finished episode's cost return."""

    def __init__(self, env: gymnasium.Env, penalty: float, reward_scale: float = 1.0) -> None:
        super().__init__(env)
        self.penalty = penalty
        self.reward_scale = reward_scale
        self.episode_cost = 0.0
        self.finished_costs: list[float] = []

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.episode_cost = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_cost += float(info["cost"])
        if terminated or truncated:
            self.finished_costs.append(self.episode_cost)
        penalized = float(reward) - self.penalty * float(info["cost"])
        return obs, self.reward_scale * penalized, terminated, truncated, info

    def drain_finished_costs(self) -> list[float]:
        """The cost returns of the episodes finished since the last call."""
        costs, self.finished_costs = self.finished_costs, []
        return costs


def _make_penalized(env_config: Mapping[str, Any]) -> gymnasium.Env:
    """RLlib env creator: ``env_config = {"task": name, "penalty": float, "reward_scale": float}``."""
    return PenalizedCost(make_env(env_config["task"]), env_config["penalty"], env_config.get("reward_scale", 1.0))


@dataclass(frozen=True)
class Snapshot:
    """A frozen PPO policy: the penalty it was trained with (the multiplier at snapshot time for a
    target cost), its target episode cost if any, and the env steps it had seen."""

    penalty: float
    env_steps: int
    module: torch.nn.Module  # RLlib's PPO RLModule, returns Gaussian ``action_dist_inputs``
    target_cost: float | None = None

    @property
    def label(self) -> str:
        """Its behaviour's name on dataset cards and in logs: ``λ = 1`` or ``cost → 20``."""
        return f"λ = {self.penalty:g}" if self.target_cost is None else f"cost → {self.target_cost:g}"

    def actor(self, task: TaskSpec) -> GaussianPolicy:
        """The object that picks this snapshot's actions during rollouts."""
        return GaussianPolicy(self, task)


class GaussianPolicy:
    """Acts with a snapshot on a batch of observations. Row ``i`` samples the policy's diagonal Gaussian
    and adds ``N(0, noise_stds[i]^2)`` noise using only ``rngs[i]``, so each row's randomness is its
    own stream; the action is clipped to the normalised box [-1, 1] and mapped to the task's bounds."""

    def __init__(self, snapshot: Snapshot, task: TaskSpec) -> None:
        self.module = snapshot.module
        self.low = np.asarray(task.action_low, dtype=np.float64)
        self.high = np.asarray(task.action_high, dtype=np.float64)

    @torch.no_grad()
    def act(
        self,
        obs: np.ndarray,
        rngs: Sequence[np.random.Generator],
        noise_stds: Sequence[float],
        envs: Sequence[gymnasium.Env] = (),
    ) -> np.ndarray:
        """One action per row of `obs`; `envs`, the envs the rows come from, is not read (a learned policy acts on
        the observation alone; `data_conversion.idm_drivers.IDMActor` reads the simulator instead)."""
        batch = {"obs": torch.as_tensor(np.asarray(obs, dtype=np.float32))}
        inputs = self.module.forward_inference(batch)["action_dist_inputs"].double().numpy()
        mean, log_std = np.split(inputs, 2, axis=1)
        z = np.stack([rng.standard_normal(2 * mean.shape[1]) for rng in rngs])
        sample, noise = np.split(z, 2, axis=1)
        action = mean + np.exp(log_std) * sample + np.asarray(noise_stds, dtype=np.float64)[:, None] * noise
        action = np.clip(action, -1.0, 1.0)
        return self.low + (action + 1.0) * (self.high - self.low) / 2.0


def envs_side_by_side(task: TaskSpec, wanted: int) -> int:
    """How many of `task`'s envs may run at once in this process: 1 for MetaDrive (one engine per process)."""
    return 1 if task.suite == "metadrive" else wanted


def ensure_ray() -> bool:
    """Start a local Ray sized for a 2-CPU machine (or join the cluster at ``$RAY_ADDRESS``) unless one is running;
    True if this call started it.

    Startup is retried: on a loaded machine Ray's node can time out while starting."""
    import os

    import ray

    if ray.is_initialized():
        return False
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if not os.environ.get("RAY_ADDRESS"):  # a running cluster is joined as it is sized
        options["num_cpus"] = 2
    for attempt in range(1, RAY_INIT_ATTEMPTS):
        try:
            ray.init(**options)
            return True
        except Exception as e:  # Ray raises a bare Exception when its node times out during startup
            ray.shutdown()
            logger.warning("ray.init failed (%s); retrying, attempt %d of %d", e, attempt + 1, RAY_INIT_ATTEMPTS)
    ray.init(**options)
    return True


def ppo_config(task: TaskSpec, penalty: float, batch_size: int, seed: int, ppo: Mapping[str, Any] | None = None) -> Any:
    """RLlib PPOConfig (new API stack) for `task` with reward ``r - penalty * c``, in-process; `ppo` overrides
    `PPO_DEFAULTS` (`data_conversion.ppo_settings`)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    training = {**PPO_DEFAULTS, **(ppo or {})}
    env_config = {"task": task.name, "penalty": penalty, "reward_scale": training.pop("reward_scale")}
    training["minibatch_size"] = min(training["minibatch_size"], batch_size)
    return (
        PPOConfig()
        .environment(PENALIZED_ENV, env_config=env_config)
        .env_runners(
            num_env_runners=0, num_envs_per_env_runner=envs_side_by_side(task, ENVS), rollout_fragment_length="auto"
        )
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=batch_size, **training)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=list(HIDDEN), vf_share_layers=False))
        .reporting(metrics_num_episodes_for_smoothing=20)
        .debugging(seed=seed, log_level="WARN")
    )


def snapshot_iterations(train_steps: int, snapshots: int) -> tuple[int, list[int]]:
    """PPO batch size and the (1-based) training iterations after which to snapshot.

    The budget is split into ``snapshots`` equal segments of whole iterations; the batch shrinks
    below `BATCH_SIZE` when a segment would be shorter than one batch (tiny test budgets).
    """
    if train_steps < 1 or snapshots < 1:
        raise ValueError("train_steps and snapshots must be positive")
    batch_size = max(ENVS, min(BATCH_SIZE, train_steps // snapshots))
    iterations = max(snapshots, math.ceil(train_steps / batch_size))
    return batch_size, [iterations * (k + 1) // snapshots for k in range(snapshots)]


@dataclass(frozen=True)
class TrainedPolicies:
    """One PPO training run: its snapshots, and the learner's whole RLModule state (actor and critic) after its
    last iteration, which `train_snapshots` takes as ``warm_start`` to begin another run from it."""

    snapshots: list[Snapshot]
    final_weights: dict[str, Any]


def train_snapshots(
    task: TaskSpec,
    penalty: float,
    train_steps: int,
    snapshots: int,
    seed: int,
    *,
    target_cost: float | None = None,
    snapshot_dir: Path | None = None,
    ppo: Mapping[str, Any] | None = None,
    warm_start: Mapping[str, Any] | None = None,
) -> TrainedPolicies:
    """Train PPO on ``reward - penalty * cost`` for about `train_steps` env steps; return `snapshots`
    frozen policies taken at the ends of equal segments of training (the last is the final policy).

    With a `target_cost`, `penalty` is ignored: the penalty starts at `INITIAL_MULTIPLIER` and after
    every iteration follows `step_multiplier` from that iteration's finished episodes' costs. With a
    `snapshot_dir`, every snapshot is also saved there (`save_snapshot`). `ppo` overrides PPO's settings
    (`ppo_config`). With `warm_start` (another run's `TrainedPolicies.final_weights`), training begins from
    those weights instead of a fresh network; the penalty or multiplier starts as without it."""
    from ray.tune.registry import register_env

    register_env(PENALIZED_ENV, _make_penalized)
    batch_size, at = snapshot_iterations(train_steps, snapshots)
    torch.set_num_threads(1)
    if target_cost is not None:
        penalty = INITIAL_MULTIPLIER
    config = ppo_config(task, penalty, batch_size, seed, ppo)
    unscaled = 1.0 / config.env_config["reward_scale"]  # logs show the penalised return before the reward scale
    algo = config.build_algo()
    out: list[Snapshot] = []
    try:
        if warm_start is not None:  # into the learner, then synced to the env runner's (inference-only) module
            algo.set_state({"learner_group": {"learner": {"rl_module": copy.deepcopy(dict(warm_start))}}})
        for iteration in range(1, at[-1] + 1):
            result = algo.train()
            envs = algo.env_runner.env.unwrapped  # the local env runner's gymnasium vector env
            costs = [c for env_costs in envs.call("drain_finished_costs") for c in env_costs]
            logger.info(
                "%s, iteration %d: %d episodes, mean cost %.1f, mean penalised return %.1f, multiplier %.4g",
                f"penalty {penalty:g}" if target_cost is None else f"target cost {target_cost:g}",
                iteration,
                len(costs),
                np.mean(costs) if costs else float("nan"),
                unscaled * result["env_runners"].get("episode_return_mean", float("nan")),
                penalty,
            )
            if target_cost is not None:
                penalty = step_multiplier(penalty, costs, target_cost)
                envs.set_attr("penalty", penalty)
            if iteration in at:
                steps = int(result["num_env_steps_sampled_lifetime"])
                module = copy.deepcopy(algo.get_module()).eval()
                snapshot = Snapshot(penalty=penalty, env_steps=steps, module=module, target_cost=target_cost)
                out.append(snapshot)
                if snapshot_dir is not None:
                    save_snapshot(snapshot, snapshot_dir)
                logger.info(
                    "%s: snapshot %d/%d at %d env steps (mean penalised return %.1f)",
                    snapshot.label,
                    len(out),
                    snapshots,
                    steps,
                    unscaled * result["env_runners"].get("episode_return_mean", float("nan")),
                )
        final_weights = algo.learner_group.get_weights()
    finally:
        algo.stop()
    return TrainedPolicies(out, final_weights)


def snapshot_path(snapshot: Snapshot, directory: Path) -> Path:
    """Where `save_snapshot` puts `snapshot` under `directory`: ``<penalty|target><value>-<env steps>``."""
    kind = "penalty" if snapshot.target_cost is None else "target"
    value = snapshot.penalty if snapshot.target_cost is None else snapshot.target_cost
    return Path(directory).absolute() / f"{kind}{value:g}-{snapshot.env_steps}"


def save_snapshot(snapshot: Snapshot, directory: Path) -> Path:
    """Save a snapshot's RLModule as data only (``core.deployment.save_module_files``: safetensors weights and a JSON
    spec) and a ``snapshot.json`` of its penalty, target cost and env steps, under ``directory/<label>-<steps>``."""
    from rllib_caps.core.deployment import save_module_files

    path = snapshot_path(snapshot, directory)
    partial = path.with_name(path.name + ".partial")  # renamed once complete, so a snapshot dir is never half-written
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_module_files(snapshot.module, partial)
    meta = {"penalty": snapshot.penalty, "target_cost": snapshot.target_cost, "env_steps": snapshot.env_steps}
    (partial / SNAPSHOT_META).write_text(json.dumps(meta) + "\n")
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    return path


def load_snapshots(directory: Path) -> list[Snapshot]:
    """Every snapshot `save_snapshot` wrote under `directory`, in the collector's order: the fixed penalties, then
    the target costs, each by ascending value, then by env steps. That is the order a collection listed its
    ``--penalties`` and ``--target-costs`` in when it gave them ascending, so rolling the snapshots out again with the
    same seed reproduces its episodes. The files are data only (weights and JSON), so loading them runs no code and
    a directory from anyone can be read. ValueError naming the directory or file at fault."""
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

    from rllib_caps.core.deployment import SPEC_FILE, load_module_files

    directory = Path(directory).absolute()
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory of behaviour policy snapshots")
    found: list[tuple[Path, float, int, float | None]] = []
    for meta_file in sorted(directory.glob(f"*/{SNAPSHOT_META}")):
        if meta_file.parent.name.endswith(".partial"):
            continue  # an interrupted save
        found.append((meta_file.parent, *_snapshot_meta(meta_file)))
        if not (meta_file.parent / SPEC_FILE).is_file():
            raise ValueError(f"{meta_file.parent}: no {SPEC_FILE}: a snapshot in RLlib's pickled format (an earlier "
                             "collector's), which this one does not load, as loading a pickle runs code; collect it "
                             "again, or convert a directory you wrote with convert_pickled_snapshots")
    if not found:
        raise ValueError(f"{directory}: holds no snapshot (no */{SNAPSHOT_META}; collect --snapshot-dir writes them)")
    found.sort(key=lambda s: (s[3] is not None, s[1] if s[3] is None else s[3], s[2]))
    return [  # a file that does not fit raises CheckpointError, a ValueError naming it
        Snapshot(penalty, steps, load_module_files(path, [DefaultPPOTorchRLModule]).eval(), target)
        for path, penalty, steps, target in found
    ]


def _snapshot_meta(meta_file: Path) -> tuple[float, int, float | None]:
    """A ``snapshot.json``'s penalty, env steps and target cost; ValueError naming the file if it is not one."""
    try:
        meta = json.loads(meta_file.read_text())
        target = None if meta["target_cost"] is None else float(meta["target_cost"])
        return float(meta["penalty"]), int(meta["env_steps"]), target
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"{meta_file}: not a snapshot description ({type(err).__name__}: {err})") from None


def convert_pickled_snapshots(directory: Path) -> int:
    """Rewrite, in place, the snapshots under ``directory`` that an earlier collector saved in RLlib's pickled format
    (``RLModule.save_to_path``) as `save_snapshot` writes them now; returns how many. It unpickles them, which runs
    code: only for a directory you wrote."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from rllib_caps.core.deployment import SPEC_FILE

    converted = 0
    for meta_file in sorted(Path(directory).absolute().glob(f"*/{SNAPSHOT_META}")):
        if meta_file.parent.name.endswith(".partial") or (meta_file.parent / SPEC_FILE).is_file():
            continue
        penalty, steps, target = _snapshot_meta(meta_file)
        snapshot = Snapshot(penalty, steps, RLModule.from_checkpoint(meta_file.parent).eval(), target)
        if snapshot_path(snapshot, meta_file.parent.parent) != meta_file.parent:
            raise ValueError(f"{meta_file.parent}: its name does not match {meta_file}")
        save_snapshot(snapshot, meta_file.parent.parent)
        converted += 1
    return converted
