"""Collect a DSRL-format HDF5 dataset for a task from its simulator, without DSRL's servers.

Design (after DSRL's recipe: many behaviour policies spanning the reward/cost trade-off, then a
density filter over episode returns):

1. **Behaviour policies.** For each penalty λ in ``--penalties``, RLlib PPO (new API stack, small
   MLPs, in-process) is trained on ``reward - λ * cost`` for ``--train-steps`` env steps, and
   ``--snapshots`` frozen copies of its policy are kept at the ends of equal segments of training.
   λ = 0 gives reward-greedy, costly policies; large λ gives cautious ones; early snapshots give
   weak ones. Besides, for each target episode cost in ``--target-costs`` (DSRL's recipe), PPO is
   trained as a Lagrangian whose multiplier follows the measured episode cost
   (`data_conversion.lagrangian`), so its policies settle near that cost. See
   `data_conversion.behavior_policies`. ``--ppo-config KEY=VALUE`` overrides PPO's settings
   (`data_conversion.ppo_settings`); with ``--warm-start`` the λ = 0 run trains first and every other
   run starts from its final weights (for ``--warm-start-steps``), so a fast policy learns to slow
   down to its cost rather than to move under a penalty from scratch. On MetaDrive, ``--idm-speeds`` adds scripted
   behaviour policies, MetaDrive's IDM driving the ego car at each target speed, as DSRL collected its MetaDrive
   data, and ``--idm-slowdowns`` IDM drivers that slow down once per episode (`data_conversion.idm_drivers`);
   ``--penalties ""`` with no ``--target-costs`` trains no PPO at all.
2. **Rollouts.** Each snapshot runs ``--episodes-per-snapshot`` full episodes: actions are sampled
   from the policy's Gaussian, plus extra Gaussian noise whose std cycles through `NOISE_LEVELS`
   over the episodes, clipped to the action bounds. Episode ``j`` of snapshot ``i`` draws all its
   randomness (the reset seed, action samples, noise) from ``numpy.random.default_rng([seed, i, j])``; the IDM
   drivers come after the snapshots and are rolled out the same way (their own noise, then the extra noise).
   Up to `LOCKSTEP` episodes of a snapshot run side by side, one batched policy call per step.
3. **Grid filter.** As in DSRL, the (cost return, reward return) plane is cut into ``--bins``
   cells and every cell keeps at most the same number of episodes (a random subset): the largest
   number that keeps at most ``--max-episodes`` in all. This evens out the density. Unlike DSRL's
   filter, sparse cells are kept (they hold the extremes).
4. **Outputs.** Kept episodes in collection order, as DSRL keys/dtypes (``terminals`` where the env
   terminated, ``timeouts`` where the time limit cut the episode), written atomically with
   `data_conversion.dsrl_format.write_dsrl_hdf5`; and a dataset-card PNG scatter of per-episode
   (cost return, reward return), with the filtered-out episodes in grey. With ``--format minari`` the kept
   episodes are recorded with Minari's ``DataCollector`` instead, as ``--dataset-id`` (the cost in
   ``infos["cost"]``): each is replayed, its reset seed and actions, in a fresh env and must reproduce its
   rollout bit for bit (`data_conversion.minari_write.record_replays`); the card only with ``--plot``.

Determinism: given the same snapshots and ``--episodes-per-snapshot`` (which fixes the batches of
the policy calls), rollouts, filtering and so the file are a pure function of ``--seed``. PPO
training is seeded too (RLlib seed, one torch thread, no env-runner processes) and was
bit-identical across runs on CPU here, but RLlib does not guarantee it across machines, library
versions or thread counts.

``--from-snapshots DIR`` skips step 1 and rolls out the snapshots an earlier ``--snapshot-dir DIR`` saved
(`data_conversion.behavior_policies.load_snapshots`), for example to collect more episodes from the same policies.

Example (the bundled dataset; see datasets/sources/README.md)::

    python -m data_conversion.collect --task BallCircle --out datasets/sources/BallCircle.hdf5
    python -m data_conversion.collect --task BallCircle --format minari --dataset-id rllib-caps/BallCircle/ppo-v0
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium
import numpy as np
from tqdm import tqdm

from data_conversion.dsrl_format import KEYS, write_dsrl_hdf5
from data_conversion.idm_drivers import IDMDriver, idm_drivers
from data_conversion.ppo_settings import PPO_DEFAULTS, PPO_KEYS, parse_ppo_settings
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import TaskSpec, get_task
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_file, atomic_files

if TYPE_CHECKING:  # torch and Ray: imported where the work starts, not for --help
    from data_conversion.behavior_policies import Snapshot

logger = logging.getLogger(__name__)

NOISE_LEVELS = (0.0, 0.1, 0.3)  # std of the extra action noise (normalised units), cycled per episode
LOCKSTEP = 16  # envs stepped together by one batched policy call (about 30 MB each for Bullet)
TRAINING_DESTS = ("penalties", "target_costs", "snapshot_dir", "gamma", "ppo_config", "warm_start", "warm_start_steps",
                  "train_steps", "snapshots")  # parse_args' destinations of the flags that shape training alone
FILTER_STREAM = 2**31 - 1  # seed-sequence entry of the grid filter's generator (no snapshot has it)


class Actor(Protocol):
    """Picks the actions of a batch of envs stepped together: a learned policy reads `obs`, a scripted driver the
    simulator (`envs`); row ``i`` draws its randomness from ``rngs[i]`` only and adds ``N(0, noise_stds[i]^2)``
    noise."""

    def act(
        self,
        obs: np.ndarray,
        rngs: Sequence[np.random.Generator],
        noise_stds: Sequence[float],
        envs: Sequence[gymnasium.Env],
    ) -> np.ndarray: ...


class Behaviour(Protocol):
    """A behaviour policy of a collection: a PPO `Snapshot` or a scripted `IDMDriver`."""

    @property
    def label(self) -> str: ...

    @property
    def env_steps(self) -> int: ...

    def actor(self, task: TaskSpec) -> Actor: ...


@dataclass(frozen=True)
class Episode:
    """One rollout: its DSRL arrays, its behaviour policy's label (``λ = 1``, ``cost → 20``) and its reset seed."""

    arrays: dict[str, np.ndarray]
    behaviour: str
    seed: int

    @property
    def reward_return(self) -> float:
        return float(self.arrays["rewards"].sum(dtype=np.float64))

    @property
    def cost_return(self) -> float:
        return float(self.arrays["costs"].sum(dtype=np.float64))


def rollout_episodes(
    envs: Sequence[gymnasium.Env],
    policy: Actor,
    rngs: Sequence[np.random.Generator],
    noise_stds: Sequence[float],
    seeds: Sequence[int],
) -> list[dict[str, np.ndarray]]:
    """Run one full episode in each env in lockstep (one batched policy call per step); DSRL arrays.

    Env ``i`` is reset with ``seeds[i]``; ``rngs[i]`` drives its action sampling."""
    obs = [env.reset(seed=seed)[0] for env, seed in zip(envs, seeds, strict=True)]
    rows: list[dict[str, list]] = [{key: [] for key in KEYS} for _ in envs]
    active = list(range(len(envs)))
    while active:
        actions = policy.act(
            np.stack([obs[i] for i in active]),
            [rngs[i] for i in active],
            [noise_stds[i] for i in active],
            [envs[i] for i in active],
        )
        still = []
        for i, action in zip(active, actions, strict=True):
            next_obs, reward, terminated, truncated, info = envs[i].step(action)
            step = (obs[i], next_obs, action, reward, info["cost"], terminated, truncated and not terminated)
            for key, value in zip(KEYS, step, strict=True):
                rows[i][key].append(value)
            obs[i] = next_obs
            if not (terminated or truncated):
                still.append(i)
        active = still
    return [{key: np.asarray(values) for key, values in episode.items()} for episode in rows]


def collect_episodes(
    task: TaskSpec, behaviours: Sequence[Behaviour], episodes_per_snapshot: int, seed: int
) -> list[Episode]:
    """Roll out every behaviour policy `episodes_per_snapshot` times (see the module docstring, step 2)."""
    from data_conversion.behavior_policies import envs_side_by_side

    envs = [make_env(task) for _ in range(envs_side_by_side(task, min(episodes_per_snapshot, LOCKSTEP)))]
    episodes: list[Episode] = []
    try:
        with tqdm(total=len(behaviours) * episodes_per_snapshot, desc="rollouts", unit="ep") as bar:
            for i, behaviour in enumerate(behaviours):
                policy = behaviour.actor(task)
                for start in range(0, episodes_per_snapshot, len(envs)):
                    js = range(start, min(start + len(envs), episodes_per_snapshot))
                    noise_stds = [NOISE_LEVELS[j % len(NOISE_LEVELS)] for j in js]
                    rngs = [np.random.default_rng([seed, i, j]) for j in js]
                    seeds = [int(rng.integers(2**31)) for rng in rngs]  # each generator's first draw
                    arrays = rollout_episodes(envs[: len(js)], policy, rngs, noise_stds, seeds)
                    episodes += [Episode(a, behaviour.label, s) for a, s in zip(arrays, seeds, strict=True)]
                    bar.update(len(js))
                new = episodes[-episodes_per_snapshot:]
                logger.info(
                    "%s: mean reward return %.1f, mean cost return %.1f",
                    f"{behaviour.label}, {behaviour.env_steps} steps" if behaviour.env_steps else behaviour.label,
                    np.mean([e.reward_return for e in new]),
                    np.mean([e.cost_return for e in new]),
                )
    finally:
        for env in envs:
            env.close()
    return episodes


def warm_start_order(penalties: Sequence[float], runs: int) -> list[int]:
    """The order of the training runs (penalties first, then target costs) for a warm start: the first λ = 0 run,
    then the others as listed. ValueError if `penalties` has no 0."""
    if 0 not in penalties:
        raise ValueError("--warm-start trains the λ = 0 policy first: --penalties must include 0")
    first = list(penalties).index(0)
    return [first, *(k for k in range(runs) if k != first)]


def bin_cap(counts: np.ndarray, max_episodes: int) -> int:
    """The largest per-cell cap ``k >= 1`` with ``sum(min(counts, k)) <= max_episodes`` (1 if none)."""
    caps = np.arange(1, max(int(counts.max()), 1) + 1)
    fits = caps[np.minimum(counts[None, :], caps[:, None]).sum(axis=1) <= max_episodes]
    return int(fits.max()) if len(fits) else 1


def grid_filter(
    cost_returns: np.ndarray,
    reward_returns: np.ndarray,
    bins: tuple[int, int],
    max_episodes: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Sorted indices of the episodes kept by DSRL-style density filtering.

    The returns' range is cut into a ``bins = (cost bins, reward bins)`` grid; every cell keeps at
    most the same number of episodes (chosen at random), the largest such cap keeping at most
    `max_episodes` in all (see `bin_cap`). Cells under the cap are kept whole."""
    cells = []
    for values, n in zip((cost_returns, reward_returns), bins, strict=True):
        values = np.asarray(values, dtype=np.float64)
        span = max(values.max() - values.min(), 1e-12)
        cells.append(np.minimum(((values - values.min()) / span * n).astype(np.int64), n - 1))
    cell_ids = cells[0] * bins[1] + cells[1]
    ids, counts = np.unique(cell_ids, return_counts=True)
    cap = bin_cap(counts, max_episodes)
    kept = []
    for cell in ids:
        members = np.flatnonzero(cell_ids == cell)
        if len(members) > cap:
            members = rng.choice(members, size=cap, replace=False)
        kept.append(members)
    logger.info("grid filter: at most %d episodes per cell of %d x %d", cap, *bins)
    return np.sort(np.concatenate(kept))


def plot_card(path: Path, task: TaskSpec, episodes: Sequence[Episode], kept: np.ndarray) -> None:
    """Write a DSRL-style dataset card: per-episode (cost return, reward return), coloured by behaviour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    costs = np.array([e.cost_return for e in episodes])
    rewards = np.array([e.reward_return for e in episodes])
    behaviours = np.array([e.behaviour for e in episodes])
    labels = list(dict.fromkeys(behaviours))
    dropped = np.setdiff1d(np.arange(len(episodes)), kept)
    rows = sum(len(episodes[i].arrays["rewards"]) for i in kept)
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=120)
    ax.scatter(costs[dropped], rewards[dropped], s=6, c="0.8", label=f"filtered out ({len(dropped)})")
    for k, behaviour in enumerate(labels):
        sel = kept[behaviours[kept] == behaviour]
        ax.scatter(
            costs[sel],
            rewards[sel],
            s=10,
            color=plt.cm.viridis(k / max(1, len(labels) - 1)),
            label=f"{behaviour} ({len(sel)})",
        )
    for threshold in task.thresholds:
        ax.axvline(threshold, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("cost return")
    ax.set_ylabel("reward return")
    ax.set_title(f"{task.id}: {len(kept)} episodes, {rows} rows")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        with atomic_file(path) as tmp:
            fig.savefig(tmp)
    finally:
        plt.close(fig)


@dataclass(frozen=True)
class Summary:
    """What `build_dataset` wrote."""

    out: Path | str  # the HDF5 file, or the Minari dataset's id
    plot: Path | None
    collected: int
    episodes: int
    rows: int
    cost_range: tuple[float, float]
    reward_range: tuple[float, float]


def train_behaviour_policies(
    task: TaskSpec,
    *,
    penalties: Sequence[float],
    target_costs: Sequence[float] = (),
    snapshot_dir: Path | None = None,
    ppo: Mapping[str, Any] | None = None,
    warm_start: bool = False,
    warm_start_steps: int | None = None,
    train_steps: int,
    snapshots: int,
    seed: int,
) -> list[Snapshot]:
    """Step 1: train PPO at each penalty, then as a Lagrangian at each target cost, and return every run's
    `snapshots` policies in that order (also saved under `snapshot_dir`, if given). `ppo` overrides PPO's settings
    (`data_conversion.ppo_settings`); with `warm_start`, the λ = 0 run trains first and every other run begins from its
    final weights (`warm_start_order`), for `warm_start_steps` env steps (default `train_steps`)."""
    from data_conversion.behavior_policies import ensure_ray, train_snapshots

    runs = [(seed + 1000 * k, penalty, None) for k, penalty in enumerate(penalties)]
    runs += [(seed + 1000 * k, 0.0, target) for k, target in enumerate(target_costs, start=len(penalties))]
    order = warm_start_order(penalties, len(runs)) if warm_start else range(len(runs))
    trained: dict[int, list[Snapshot]] = {}
    start_from = None
    started_ray = ensure_ray()
    try:
        for n, k in enumerate(order):
            run_seed, penalty, target = runs[k]
            steps = train_steps if start_from is None else (warm_start_steps or train_steps)
            logger.info(
                "training PPO %s for %d env steps (%d/%d)%s",
                f"with cost penalty {penalty:g}" if target is None else f"as a Lagrangian at target cost {target:g}",
                steps,
                n + 1,
                len(runs),
                ", from the λ = 0 policy" if start_from is not None else "",
            )
            run = train_snapshots(
                task, penalty, steps, snapshots, run_seed, target_cost=target, snapshot_dir=snapshot_dir,
                ppo=ppo, warm_start=start_from,
            )  # fmt: skip
            trained[k] = run.snapshots
            if warm_start and n == 0:
                start_from = run.final_weights
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    return [snapshot for k in range(len(runs)) for snapshot in trained[k]]


def build_dataset(
    task: TaskSpec,
    out: Path | str,
    policies: Sequence[Behaviour],
    *,
    episodes_per_snapshot: int,
    seed: int,
    bins: tuple[int, int],
    max_episodes: int,
    plot: Path | None,
    dataset_format: str = "hdf5",
) -> Summary:
    """Steps 2 to 4: roll the behaviour `policies` out, grid-filter the episodes, write the HDF5 file `out` (or, with
    `dataset_format` ``minari``, record them as the Minari dataset `out` under the current Minari root) and the card
    (unless `plot` is None)."""
    episodes = collect_episodes(task, policies, episodes_per_snapshot, seed)
    costs = np.array([e.cost_return for e in episodes])
    rewards = np.array([e.reward_return for e in episodes])
    kept = grid_filter(costs, rewards, bins, max_episodes, np.random.default_rng([seed, FILTER_STREAM]))
    logger.info("grid filter kept %d of %d episodes", len(kept), len(episodes))
    arrays = {key: np.concatenate([episodes[i].arrays[key] for i in kept]) for key in KEYS}
    if dataset_format == "minari":
        from data_conversion.minari_write import record_replays

        behaviours = ", ".join(dict.fromkeys(snapshot.label for snapshot in policies))
        record_replays(
            task,
            [(episodes[i].seed, episodes[i].arrays) for i in kept],
            str(out),
            algorithm_name=f"data_conversion.collect: {len(policies)} behaviour policies "
            f"({behaviours}), rolled out with noise, grid-filtered (seed {seed})",
        )
    else:
        write_dsrl_hdf5(out, arrays)
    if plot is not None:
        plot_card(plot, task, episodes, kept)
    return Summary(
        out=out,
        plot=plot,
        collected=len(episodes),
        episodes=len(kept),
        rows=len(arrays["rewards"]),
        cost_range=(float(costs[kept].min()), float(costs[kept].max())),
        reward_range=(float(rewards[kept].min()), float(rewards[kept].max())),
    )


def _floats(text: str) -> list[float]:
    """Comma-separated non-negative numbers; an empty text is an empty list (``--penalties ""``: no PPO)."""
    values = [float(v) for v in text.split(",") if v.strip()]
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("expected comma-separated non-negative numbers, e.g. 0,1,5")
    return values


def _speeds(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("expected comma-separated positive speeds in km/h, e.g. 10,12,15")
    return values


def _slowdowns(text: str) -> list[tuple[float, float]]:
    message = "expected comma-separated FAST:SLOW speeds in km/h with FAST > SLOW > 0, e.g. 20:10,30:10"
    try:  # a ValueError: a speed is not a number, or an item has not exactly one colon
        items = (item.split(":") for item in text.split(",") if item.strip())
        pairs = [(float(fast), float(slow)) for fast, slow in items]
    except ValueError:
        raise argparse.ArgumentTypeError(message) from None
    if not pairs or any(not fast > slow > 0 for fast, slow in pairs):
        raise argparse.ArgumentTypeError(message)
    return pairs


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from rllib_caps.task_file_flag import add_task_file_argument

    parser = argparse.ArgumentParser(
        prog="python -m data_conversion.collect",
        description="Build a DSRL-format HDF5 dataset from a task's simulator: RLlib PPO behaviour policies "
        "trained at several cost penalties, snapshotted, rolled out with noise, then grid-filtered.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", default="BallCircle", help="task short name or DSRL id, or a --task-file's")
    add_task_file_argument(parser)
    parser.add_argument("--out", type=Path, help="output FILE.hdf5 (--format hdf5)")
    parser.add_argument("--format", choices=("hdf5", "minari"), default="hdf5", dest="dataset_format",
                        help="a DSRL-format HDF5 file, or a Minari dataset recorded with Minari's DataCollector (the "
                             "cost in infos['cost'])")
    parser.add_argument("--dataset-id", metavar="ID",
                        help="--format minari: the Minari dataset id, (namespace/)name-vN, written under "
                             "$MINARI_DATASETS_PATH (default ~/.minari/datasets)")
    parser.add_argument(
        "--penalties",
        type=_floats,
        default="0,1,2,10",
        help='comma-separated cost penalties λ; PPO maximises reward - λ·cost for each ("" for none)',
    )
    parser.add_argument(
        "--target-costs",
        type=_floats,
        default=[],
        help="comma-separated target episode costs; besides the penalties, PPO-Lagrangian is trained at each "
        "(its multiplier follows the measured episode cost, data_conversion.lagrangian)",
    )
    parser.add_argument(
        "--idm-speeds",
        type=_speeds,
        default=[],
        metavar="KMH,...",
        help="MetaDrive only: besides the PPO policies, MetaDrive's IDM driving the ego car at each of these target "
        "speeds (km/h), as DSRL collected its MetaDrive data (data_conversion/idm_drivers.py); each is rolled out "
        "--episodes-per-snapshot times",
    )
    parser.add_argument(
        "--idm-slowdowns",
        type=_slowdowns,
        default=[],
        metavar="FAST:SLOW,...",
        help="MetaDrive only: besides those, MetaDrive's IDM driving at FAST km/h that slows to SLOW km/h once per "
        "episode, at a step drawn uniform over the first half of the task's step limit, so the data shows braking "
        "from costly speeds (data_conversion/idm_drivers.py); each is rolled out --episodes-per-snapshot times",
    )
    parser.add_argument("--snapshot-dir", type=Path, help="also save every behaviour policy snapshot here (RLlib)")
    parser.add_argument(
        "--from-snapshots",
        type=Path,
        metavar="DIR",
        help="train nothing: roll out the snapshots an earlier --snapshot-dir DIR saved (penalties, then target costs, "
        "each ascending; with that run's --seed and --episodes-per-snapshot this reproduces its episodes). The "
        "snapshots are weights and JSON, so reading them runs no code",
    )
    parser.add_argument(
        "--gamma", type=float, help="PPO's discount [0.99] (Swimmer needs about 0.9999); short for --ppo-config gamma=G"
    )
    parser.add_argument(
        "--ppo-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",  # parsed into args.ppo by parse_args
        help="override one of PPO's settings (repeatable): "
        + ", ".join(f"{key} [{PPO_DEFAULTS.get(key, 'RLlib default')}]" for key in PPO_KEYS)
        + "; reward_scale multiplies the penalised reward PPO sees, not the data (data_conversion/ppo_settings.py)",
    )
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="train the λ = 0 run (--penalties must include 0) first and start every other penalty's and target "
        "cost's run from its final weights (the multiplier starts as without it)",
    )
    parser.add_argument("--warm-start-steps", type=_positive,
                        help="--warm-start: PPO env steps of each run that starts from the λ = 0 weights "
                             "[--train-steps]")
    parser.add_argument("--train-steps", type=_positive, default=120_000, help="PPO env steps per penalty")
    parser.add_argument("--snapshots", type=_positive, default=6, help="policies kept along each training run")
    parser.add_argument("--episodes-per-snapshot", type=_positive, default=20, help="rollouts per snapshot")
    parser.add_argument(
        "--bins",
        type=_positive,
        nargs=2,
        default=(20, 20),
        metavar=("COST", "REWARD"),
        help="grid-filter cells along cost return and reward return",
    )
    parser.add_argument(
        "--max-episodes",
        type=_positive,
        default=350,
        help="episodes kept at most by the grid filter (the per-cell cap is chosen to fit)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds PPO, rollouts and the filter")
    parser.add_argument("--plot", type=Path,
                        help="dataset-card PNG; if not given, OUT with suffix .png (none with --format minari)")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    args = parser.parse_args(argv)
    if args.dataset_format == "hdf5" and (args.out is None or args.dataset_id is not None):
        parser.error("--format hdf5 writes --out FILE.hdf5, and takes no --dataset-id")
    if args.dataset_format == "minari" and (args.dataset_id is None or args.out is not None):
        parser.error("--format minari writes the Minari dataset --dataset-id ID, and takes no --out")
    try:
        args.ppo = parse_ppo_settings(args.ppo_config)
    except ValueError as e:
        parser.error(str(e))
    if args.gamma is not None:
        if "gamma" in args.ppo:
            parser.error("--gamma and --ppo-config gamma=...: give one")
        args.ppo["gamma"] = args.gamma
    if args.from_snapshots is not None:
        defaults = parser.parse_args([])  # with the types applied, as `args` has them
        training = [f"--{d.replace('_', '-')}" for d in TRAINING_DESTS if getattr(args, d) != getattr(defaults, d)]
        if training:
            parser.error(f"--from-snapshots trains nothing, so {', '.join(training)} would be ignored: drop them")
    if not (args.penalties or args.target_costs or args.from_snapshots or args.idm_speeds or args.idm_slowdowns):
        parser.error("nothing to collect: give --penalties, --target-costs, --from-snapshots, --idm-speeds or "
                     "--idm-slowdowns")
    if args.warm_start_steps is not None and not args.warm_start:
        parser.error("--warm-start-steps needs --warm-start")
    if args.warm_start:
        try:
            warm_start_order(args.penalties, len(args.penalties))
        except ValueError as e:
            parser.error(str(e))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        task = get_task(args.task)
        drivers = idm_drivers(task, args.idm_speeds, args.idm_slowdowns)
        policies = None if args.from_snapshots is None else _load_snapshots(args.from_snapshots)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dataset_format == "minari":
        return _collect_minari(args, task, policies, drivers)
    plot = args.plot or args.out.with_suffix(".png")
    start = time.monotonic()
    try:  # both outputs claimed (refused if they exist without --force, or are being written) before any work
        with atomic_files(args.out, plot, force=args.force) as (out_tmp, plot_tmp):
            summary = _build(args, task, policies, drivers, out_tmp, plot_tmp, "hdf5")
    except (OutputExistsError, OutputNotWritableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if isinstance(err, OutputExistsError) else 2
    _report(replace(summary, out=args.out, plot=plot), start)
    return 0


def _load_snapshots(directory: Path) -> list[Snapshot]:
    """``--from-snapshots``: read before any output is claimed, so a bad directory fails at once."""
    from data_conversion.behavior_policies import load_snapshots

    policies = load_snapshots(directory)
    logger.info("loaded %d behaviour policy snapshots from %s", len(policies), directory)
    return policies


def _build(
    args: argparse.Namespace,
    task: TaskSpec,
    policies: list[Snapshot] | None,
    drivers: list[IDMDriver],
    out: Path | str,
    plot: Path | None,
    dataset_format: str,
) -> Summary:
    """The dataset from the command line: the PPO behaviour policies trained (unless ``--from-snapshots`` gave
    `policies`, or there are no penalties or target costs), then the IDM `drivers`, then `build_dataset`."""
    if policies is None:
        policies = []
        if args.penalties or args.target_costs:
            policies = train_behaviour_policies(
                task, penalties=args.penalties, target_costs=args.target_costs, snapshot_dir=args.snapshot_dir,
                ppo=args.ppo, warm_start=args.warm_start, warm_start_steps=args.warm_start_steps,
                train_steps=args.train_steps, snapshots=args.snapshots, seed=args.seed,
            )  # fmt: skip
    return build_dataset(task, out, [*policies, *drivers], episodes_per_snapshot=args.episodes_per_snapshot,
                         seed=args.seed, bins=tuple(args.bins), max_episodes=args.max_episodes, plot=plot,
                         dataset_format=dataset_format)  # fmt: skip


def _report(summary: Summary, start: float) -> None:
    plot = f" and {summary.plot}" if summary.plot is not None else ""
    print(
        f"wrote {summary.out} ({summary.episodes} of {summary.collected} episodes, {summary.rows} rows, "
        f"cost return {summary.cost_range[0]:g}..{summary.cost_range[1]:g}, reward return "
        f"{summary.reward_range[0]:.1f}..{summary.reward_range[1]:.1f}){plot} "
        f"in {time.monotonic() - start:.0f} s"
    )


def _collect_minari(
    args: argparse.Namespace, task: TaskSpec, policies: list[Snapshot] | None, drivers: list[IDMDriver]
) -> int:
    """``main`` for ``--format minari``: the Minari dataset (and the card, with ``--plot``) claimed before any work."""
    from contextlib import ExitStack

    from data_conversion.minari_format import datasets_root, minari_output
    from rllib_caps.data.errors import DatasetError

    start = time.monotonic()
    try:
        with ExitStack() as outputs:
            plot_tmp = outputs.enter_context(atomic_files(args.plot, force=args.force))[0] if args.plot else None
            outputs.enter_context(minari_output(args.dataset_id, command="data_conversion.collect", force=args.force))
            summary = _build(args, task, policies, drivers, args.dataset_id, plot_tmp, "minari")
    except (OutputExistsError, OutputNotWritableError, DatasetError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _report(replace(summary, out=datasets_root() / args.dataset_id, plot=args.plot), start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
